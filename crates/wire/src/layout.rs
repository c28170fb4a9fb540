//! A JSON layout for documents that people read and programs parse often:
//! the outer levels are indented one member per line, and everything nested
//! deeper is written on one line. serde_json's pretty printer puts every
//! array element on its own line, so a plan of 128 two-vCPU VMs ran to
//! thousands of lines and most of its bytes were indentation; one VM's pins,
//! cells or request on one line reads as well and costs a fraction.

use serde::Serialize;
use serde_json::ser::Formatter;
use std::io::{self, Write};

/// Serialises `value` with containers opened below nesting level `outer`
/// indented and deeper ones inline (`outer` 0 is compact JSON). The plan
/// document is written by hand in this layout; this is its reference.
#[cfg(test)]
pub(crate) fn write<W: Write, T: Serialize + ?Sized>(out: W, value: &T, outer: usize) -> io::Result<()> {
    write_at(out, value, outer, 0)
}

/// [`write`] for a value that sits `depth` containers deep in a document
/// whose outer levels are written by hand (the plan's placements).
pub(crate) fn write_at<W: Write, T: Serialize + ?Sized>(
    out: W,
    value: &T,
    outer: usize,
    depth: usize,
) -> io::Result<()> {
    let mut ser = serde_json::Serializer::with_formatter(out, Layout { outer, depth, has_value: false });
    value.serialize(&mut ser).map_err(io::Error::from)
}

struct Layout {
    /// Levels written one member per line.
    outer: usize,
    /// Containers open now.
    depth: usize,
    /// Whether the innermost indented container has a member yet.
    has_value: bool,
}

impl Layout {
    /// Whether the innermost open container is indented.
    fn indented(&self) -> bool {
        self.depth <= self.outer && self.depth > 0
    }

    fn open<W: Write + ?Sized>(&mut self, w: &mut W, bracket: &[u8]) -> io::Result<()> {
        self.depth += 1;
        self.has_value = false;
        w.write_all(bracket)
    }

    fn close<W: Write + ?Sized>(&mut self, w: &mut W, bracket: &[u8]) -> io::Result<()> {
        let indented = self.indented();
        self.depth -= 1;
        if indented && self.has_value {
            newline(w, self.depth)?;
        }
        // The container just closed is a member of its parent.
        self.has_value = true;
        w.write_all(bracket)
    }

    fn member<W: Write + ?Sized>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if self.indented() {
            if !first {
                w.write_all(b",")?;
            }
            newline(w, self.depth)
        } else if self.outer == 0 {
            if first {
                Ok(())
            } else {
                w.write_all(b",")
            }
        } else if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }
}

fn newline<W: Write + ?Sized>(w: &mut W, depth: usize) -> io::Result<()> {
    w.write_all(b"\n")?;
    for _ in 0..depth {
        w.write_all(b"  ")?;
    }
    Ok(())
}

impl Formatter for Layout {
    fn begin_array<W: Write + ?Sized>(&mut self, w: &mut W) -> io::Result<()> {
        self.open(w, b"[")
    }

    fn end_array<W: Write + ?Sized>(&mut self, w: &mut W) -> io::Result<()> {
        self.close(w, b"]")
    }

    fn begin_array_value<W: Write + ?Sized>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        self.member(w, first)
    }

    fn end_array_value<W: Write + ?Sized>(&mut self, _w: &mut W) -> io::Result<()> {
        self.has_value = true;
        Ok(())
    }

    fn begin_object<W: Write + ?Sized>(&mut self, w: &mut W) -> io::Result<()> {
        self.open(w, b"{")
    }

    fn end_object<W: Write + ?Sized>(&mut self, w: &mut W) -> io::Result<()> {
        self.close(w, b"}")
    }

    fn begin_object_key<W: Write + ?Sized>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        self.member(w, first)
    }

    fn begin_object_value<W: Write + ?Sized>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(if self.outer == 0 { b":" } else { b": " })
    }

    fn end_object_value<W: Write + ?Sized>(&mut self, _w: &mut W) -> io::Result<()> {
        self.has_value = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::write;

    fn text(v: &serde_json::Value, outer: usize) -> String {
        let mut out = Vec::new();
        write(&mut out, v, outer).expect("writes");
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn outer_levels_indented_inner_inline() {
        // json! sorts keys: a, empty, list.
        let v = serde_json::json!({"a": 1, "list": [{"x": [1, 2], "y": {}}, {"x": []}], "empty": []});
        assert_eq!(
            text(&v, 2),
            "{\n  \"a\": 1,\n  \"empty\": [],\n  \"list\": [\n    {\"x\": [1, 2], \"y\": {}},\n    {\"x\": []}\n  ]\n}"
        );
        assert_eq!(text(&v, 0), r#"{"a":1,"empty":[],"list":[{"x":[1,2],"y":{}},{"x":[]}]}"#);
        assert_eq!(
            text(&v, 1),
            "{\n  \"a\": 1,\n  \"empty\": [],\n  \"list\": [{\"x\": [1, 2], \"y\": {}}, {\"x\": []}]\n}"
        );
        for outer in 0..4 {
            let back: serde_json::Value = serde_json::from_str(&text(&v, outer)).expect("valid JSON");
            assert_eq!(back, v);
        }
    }
}

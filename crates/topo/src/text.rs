//! Text primitives every writer of the workspace shares: escaping for XML
//! (libvirt's domain format, the SVG pictures, the simulator's charts) and
//! the lines of Prometheus' text exposition format (the exporter's
//! sampler and the service's `/metrics`).
//!
//! They live here, in the crate every writer already depends on, so that
//! each format has one spelling without a writer depending on another
//! writer's crate. Nothing here knows the model, a file or a document:
//! these are pure functions from strings to strings.

use std::fmt::{Display, Write};

/// Escapes text for XML character data and for single- or double-quoted
/// attribute values: both quotes too, so a name is inert anywhere. The
/// apostrophe is `&#39;` rather than `&apos;`: the same in XML, and also
/// understood by HTML, where the web page embeds the SVG picture.
pub fn xml_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\'' => out.push_str("&#39;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

/// Prometheus' text exposition format (version 0.0.4): a family's
/// `# HELP`/`# TYPE` header, then its samples, one a line.
pub mod prom {
    use super::{Display, Write};

    /// The content type to serve the text with.
    pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

    /// A family's type, as the `# TYPE` line names it.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Kind {
        /// Only ever goes up (`_total` names).
        Counter,
        /// Goes up and down.
        Gauge,
        /// Buckets, a sum and a count.
        Histogram,
    }

    impl Kind {
        fn as_str(self) -> &'static str {
            match self {
                Kind::Counter => "counter",
                Kind::Gauge => "gauge",
                Kind::Histogram => "histogram",
            }
        }
    }

    /// A label value escaped as the format wants: a backslash, a double
    /// quote or a line break in a value must never break the page.
    pub fn escape_label(v: &str) -> String {
        v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
    }

    /// Writes a family's header: `# HELP name help` and `# TYPE name kind`.
    pub fn family(out: &mut String, name: &str, help: &str, kind: Kind) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {}", kind.as_str());
    }

    /// Writes one sample: `name{k="v",...} value`, without braces when
    /// there are no labels; each label value escaped.
    pub fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: impl Display) {
        out.push_str(name);
        if !labels.is_empty() {
            out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{k}=\"{}\"", escape_label(v));
            }
            out.push('}');
        }
        let _ = writeln!(out, " {value}");
    }

    /// A float as the format spells it: `NaN`, `+Inf`, `-Inf`, otherwise
    /// Rust's shortest form (`0.5`, `3`).
    #[derive(Clone, Copy, Debug)]
    pub struct Float(pub f64);

    impl Display for Float {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            let v = self.0;
            if v.is_nan() {
                f.write_str("NaN")
            } else if v.is_infinite() {
                f.write_str(if v > 0.0 { "+Inf" } else { "-Inf" })
            } else {
                write!(f, "{v}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::prom::{self, Float, Kind};
    use super::xml_escape;

    #[test]
    fn xml_escape_makes_markup_and_both_quotes_inert() {
        assert_eq!(xml_escape("a<b>&'c'\"d\""), "a&lt;b&gt;&amp;&#39;c&#39;&quot;d&quot;");
        assert_eq!(xml_escape("plain é"), "plain é");
    }

    #[test]
    fn prom_lines_escape_labels_and_spell_floats() {
        let mut out = String::new();
        prom::family(&mut out, "x_total", "Things.", Kind::Counter);
        prom::sample(&mut out, "x_total", &[("vm", "a\"b\\c\nd"), ("pid", "7")], 3);
        prom::sample(&mut out, "x_total", &[], Float(f64::INFINITY));
        prom::sample(&mut out, "x_total", &[], Float(f64::NEG_INFINITY));
        prom::sample(&mut out, "x_total", &[], Float(f64::NAN));
        prom::sample(&mut out, "x_total", &[], Float(0.5));
        assert_eq!(
            out,
            "# HELP x_total Things.\n# TYPE x_total counter\nx_total{vm=\"a\\\"b\\\\c\\nd\",pid=\"7\"} 3\n\
             x_total +Inf\nx_total -Inf\nx_total NaN\nx_total 0.5\n"
        );
    }
}

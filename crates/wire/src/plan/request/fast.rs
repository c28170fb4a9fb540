//! The fast path of [`super::requests_from_json`]: the plainest request
//! files read by hand, member by member, without building a
//! `serde_json::Value`. Whatever it does not read (an escape, a nested
//! value, a duplicate key, a syntax error) is `None`, and the general path
//! reads the file again and words the error; a property test below holds
//! the two paths to the same answers.

use super::{from_members, Base, Given, KEYS};
use numaplace_plan::{Policy, Request};
use serde::Deserialize;
use serde_json::Value;
use std::borrow::Cow;
use std::fmt;

/// A request object's members as read, keys and strings borrowed from the
/// text where they need no unescaping.
struct Members<'de>(Vec<(Cow<'de, str>, Member<'de>)>);

/// A member's value: most are strings and numbers, read without building
/// a `Value` (and a `String`) for them.
// Copied only by the tests, which keep what the scanner hands over.
#[cfg_attr(test, derive(Clone))]
enum Member<'de> {
    Str(Cow<'de, str>),
    Json(Value),
}

impl Member<'_> {
    fn given(&self) -> Given<'_> {
        match self {
            Member::Str(s) => Given::Str(s),
            Member::Json(v) => Given::Json(v),
        }
    }
}

impl<'de> Deserialize<'de> for Member<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Member<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Member<'de>, E> {
                Ok(Member::Str(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Member<'de>, E> {
                Ok(Member::Str(Cow::Owned(v.to_string())))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Member<'de>, E> {
                Ok(Member::Json(Value::Bool(v)))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Member<'de>, E> {
                Ok(Member::Json(Value::from(v)))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Member<'de>, E> {
                Ok(Member::Json(Value::from(v)))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Member<'de>, E> {
                Ok(Member::Json(Value::from(v)))
            }
            fn visit_unit<E>(self) -> Result<Member<'de>, E> {
                Ok(Member::Json(Value::Null))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<Member<'de>, A::Error> {
                Value::deserialize(SeqAccessDeserializer::new(seq)).map(Member::Json)
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Member<'de>, A::Error> {
                Value::deserialize(MapAccessDeserializer::new(map)).map(Member::Json)
            }
        }
        d.deserialize_any(V)
    }
}

struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_string())))
            }
        }
        d.deserialize_str(V)
    }
}

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut out = Vec::with_capacity(map.size_hint().unwrap_or(4).min(KEYS.len()));
                while let Some(Key(k)) = map.next_key()? {
                    out.push((k, map.next_value()?));
                }
                Ok(Members(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// The common case of [`requests_from_json`], a list of valid requests,
/// without building the whole document as a `Value` first (a map and a
/// key string per member). `None` on anything else, duplicate keys
/// included: the general path then reads the file again and words the
/// error, so both paths accept and refuse exactly the same files.
pub(super) fn requests_fast(text: &str, default_policy: Policy) -> Option<Vec<Request>> {
    // Sized once: a flat list has one `{` per request (a name with a `{`
    // only oversizes it), and growing a list of requests copies them all.
    // Bounded, so a file of braces cannot ask for much memory.
    let mut out = Vec::with_capacity(text.bytes().filter(|&b| b == b'{').count().min(4096));
    let scanned = scan_flat(text, |members| {
        out.push(request_of(out.len(), members, default_policy)?);
        Some(())
    });
    if scanned.is_some() {
        return Some(out);
    }
    let list: Vec<Members<'_>> = serde_json::from_str(text).ok()?;
    requests_of(list, default_policy)
}

/// Requests from their members as read, `None` on any error.
fn requests_of(list: Vec<Members<'_>>, default_policy: Policy) -> Option<Vec<Request>> {
    let mut out = Vec::with_capacity(list.len());
    for (i, Members(mut members)) in list.into_iter().enumerate() {
        out.push(request_of(i, &mut members, default_policy)?);
    }
    Some(out)
}

/// Request `i` from its members as read, `None` on any error.
fn request_of(i: usize, members: &mut [(Cow<'_, str>, Member<'_>)], default_policy: Policy) -> Option<Request> {
    // A JSON object's map orders its members by key and keeps the last of
    // a repeated one; the general path reads them so.
    members.sort_by(|a, b| a.0.cmp(&b.0));
    if members.windows(2).any(|w| w[0].0 == w[1].0) {
        return None;
    }
    let pairs = members.iter().map(|(k, v)| (k.as_ref(), v.given()));
    from_members(pairs, Base::Entry(i), default_policy).ok()
}

/// The plainest request files, read by hand: a list of objects whose
/// members are strings without escapes, whole numbers and booleans, as
/// most generated files are. The members are those serde reads
/// ([`Members`]); anything else (an escape, a fraction, a sign, a nested
/// value, a syntax error) is `None`, and serde reads the file. Reading
/// through serde's visitors was half the cost of taking a VM from a file.
/// Each object's members go to `each` as soon as they are read; `None`
/// from it stops the scan and is returned.
fn scan_flat<'t>(text: &'t str, mut each: impl FnMut(&mut [(Cow<'t, str>, Member<'t>)]) -> Option<()>) -> Option<()> {
    let mut s = Scan { b: text.as_bytes(), text, at: 0 };
    // One object's members at a time, in one list kept for them all.
    let mut members = Vec::with_capacity(KEYS.len());
    s.expect(b'[')?;
    if !s.eat(b']') {
        loop {
            members.clear();
            s.object(&mut members)?;
            each(&mut members)?;
            if s.eat(b']') {
                break;
            }
            s.expect(b',')?;
        }
    }
    s.space();
    (s.at == s.b.len()).then_some(())
}

/// [`scan_flat`]'s cursor.
struct Scan<'t> {
    b: &'t [u8],
    text: &'t str,
    at: usize,
}

impl<'t> Scan<'t> {
    /// Skips JSON whitespace.
    fn space(&mut self) {
        while self.b.get(self.at).is_some_and(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    /// Takes `c` after whitespace if it is next.
    fn eat(&mut self, c: u8) -> bool {
        self.space();
        let hit = self.b.get(self.at) == Some(&c);
        self.at += usize::from(hit);
        hit
    }

    fn expect(&mut self, c: u8) -> Option<()> {
        self.eat(c).then_some(())
    }

    fn object(&mut self, out: &mut Vec<(Cow<'t, str>, Member<'t>)>) -> Option<()> {
        self.expect(b'{')?;
        if self.eat(b'}') {
            return Some(());
        }
        loop {
            self.expect(b'"')?;
            let key = self.string()?;
            self.expect(b':')?;
            out.push((Cow::Borrowed(key), self.value()?));
            if self.eat(b'}') {
                return Some(());
            }
            self.expect(b',')?;
        }
    }

    /// The rest of a string after its opening quote, if it has no escape
    /// and no control character.
    fn string(&mut self) -> Option<&'t str> {
        let start = self.at;
        loop {
            match *self.b.get(self.at)? {
                b'"' => break,
                b'\\' | 0..0x20 => return None,
                _ => self.at += 1,
            }
        }
        // Both ends are ASCII quotes, so on character boundaries.
        let s = self.text.get(start..self.at)?;
        self.at += 1;
        Some(s)
    }

    fn value(&mut self) -> Option<Member<'t>> {
        self.space();
        match *self.b.get(self.at)? {
            b'"' => {
                self.at += 1;
                self.string().map(|s| Member::Str(Cow::Borrowed(s)))
            }
            b'0'..=b'9' => {
                let start = self.at;
                let mut n: u64 = 0;
                while let Some(&d @ b'0'..=b'9') = self.b.get(self.at) {
                    n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
                    self.at += 1;
                }
                // A leading zero is not JSON; a fraction or an exponent is
                // serde's to read.
                let leading_zero = self.b[start] == b'0' && self.at - start > 1;
                let more = self.b.get(self.at).is_some_and(|c| matches!(c, b'.' | b'e' | b'E'));
                (!leading_zero && !more).then(|| Member::Json(Value::from(n)))
            }
            _ => {
                let rest = self.b.get(self.at..)?;
                let (word, value) = if rest.starts_with(b"true") {
                    (4, true)
                } else if rest.starts_with(b"false") {
                    (5, false)
                } else {
                    return None;
                };
                self.at += word;
                Some(Member::Json(Value::Bool(value)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::requests_general;
    use super::*;
    use proptest::prelude::*;

    /// A member as a file may give it: known keys with good and bad
    /// values, unknown keys, keys spelled with escapes.
    fn member() -> impl Strategy<Value = String> {
        let key = prop_oneof![
            proptest::sample::select(KEYS.to_vec()).prop_map(|k| format!("\"{k}\"")),
            Just("\"max-nodes\"".to_string()),
            Just("\"\\u006eame\"".to_string()),
        ];
        let value = proptest::sample::select(vec![
            "2",
            "0",
            "-1",
            "1.5",
            "65537",
            "\"2GiB\"",
            "\"vm\"",
            "\"a/b\"",
            "\"shared\"",
            // Escaped: read into an owned string, not borrowed.
            "\"sh\\u0061red\"",
            "\"dedicated\"",
            "\"isolate\"",
            "\"spread\"",
            "\"pairs\"",
            "true",
            "null",
            "[]",
            "{}",
            "\"0-1\"",
            "4",
            "[{\"vcpus\": 1, \"memory\": \"1GiB\"}]",
            "18446744073709551616",
            "\"hbm\"",
            "\"dram,cxl\"",
            "\"any\"",
        ]);
        (key, value).prop_map(|(k, v)| format!("{k}: {v}"))
    }

    fn entry() -> impl Strategy<Value = String> {
        let named = (0u8..4, proptest::collection::vec(member(), 0..6)).prop_map(|(n, mut m)| {
            m.insert(0, format!("\"name\": \"vm{n}\", \"vcpus\": 2, \"memory\": \"1GiB\""));
            format!("{{{}}}", m.join(", "))
        });
        prop_oneof![named, Just("3".to_string()), Just("{}".to_string())]
    }

    /// Texts near the scanner's edges: its own subset with every kind of
    /// whitespace, and the JSON just outside it; and whether the text is
    /// of the subset (valid, every value plain).
    fn near_flat() -> impl Strategy<Value = (String, bool)> {
        let plain = ["2", "0", "18446744073709551615", "true", "false", "\"2GiB\"", "\"\"", "\"é\""];
        let other = ["02", "-1", "1.5", "1e3", "18446744073709551616", "null", "truex", "\"a\\\"b\"", "[]", "{}"];
        let value = prop_oneof![
            3 => proptest::sample::select(plain.to_vec()).prop_map(|v| (v, true)),
            1 => proptest::sample::select(other.to_vec()).prop_map(|v| (v, false)),
        ];
        let key = proptest::sample::select(vec!["name", "vcpus", "memory", "cpu", "force", "x"]);
        let gap = proptest::sample::select(vec!["", " ", "\n", "\t", "\r\n  "]);
        let member =
            (key, gap.clone(), value, gap.clone()).prop_map(|(k, g, (v, p), h)| (format!("\"{k}\"{g}:{h}{v}"), p));
        let object = proptest::collection::vec(member, 0..4).prop_map(|m| {
            let p = m.iter().all(|x| x.1);
            (format!("{{{}}}", m.into_iter().map(|x| x.0).collect::<Vec<_>>().join(",")), p)
        });
        let tail = prop_oneof![3 => Just(("", true)), 1 => proptest::sample::select(vec![",", "]", " x"]).prop_map(|t| (t, false))];
        (proptest::collection::vec(object, 0..3), gap, tail).prop_map(|(objects, g, (tail, tail_ok))| {
            let p = tail_ok && objects.iter().all(|o| o.1);
            let body = objects.into_iter().map(|o| o.0).collect::<Vec<_>>().join(&format!(",{g}"));
            (format!("{g}[{g}{body}{g}]{g}{tail}"), p)
        })
    }

    /// Every object [`scan_flat`] reads, kept.
    fn scan_all(text: &str) -> Option<Vec<Members<'_>>> {
        let mut list = Vec::new();
        scan_flat(text, |members| {
            list.push(Members(members.to_vec()));
            Some(())
        })?;
        Some(list)
    }

    #[test]
    fn a_plain_generated_file_is_read_by_hand() {
        let text = "[{\"name\": \"vm0\", \"vcpus\": 2, \"memory\": \"2GiB\"},\n {\"name\": \"vm1\", \"vcpus\": 4, \"memory\": 4294967296, \"force\": true}]\n";
        let list = scan_all(text).expect("scanned");
        assert_eq!(list.len(), 2);
        assert_eq!(requests_of(list, Policy::Balanced), requests_general(text, Policy::Balanced).ok());
        assert!(scan_all("[{\"name\": \"v\\u006d\"}]").is_none(), "escapes are serde's");
        assert!(scan_all("[{\"cells\": []}]").is_none(), "nested values are serde's");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        /// What the scanner reads, serde reads the same; what serde cannot
        /// read, the scanner refuses too.
        #[test]
        fn the_scanner_reads_as_serde((text, plain) in near_flat()) {
            let by_serde: Option<Vec<Members<'_>>> = serde_json::from_str(&text).ok();
            match scan_all(&text) {
                Some(scanned) => {
                    let serde = by_serde.map(|l| requests_of(l, Policy::Balanced));
                    prop_assert!(serde.is_some(), "serde refuses what the scanner read: {}", text);
                    prop_assert_eq!(Some(requests_of(scanned, Policy::Balanced)), serde);
                }
                // Refusing is always safe (serde reads the file), but the
                // plain files must not need it.
                None => prop_assert!(!plain, "the scanner refused a plain file: {}", text),
            }
        }

        /// The fast path accepts only what the general path accepts, and
        /// reads it the same; it leaves nothing valid to the general path
        /// but files with a repeated key.
        #[test]
        fn the_fast_path_reads_as_the_general_path(entries in proptest::collection::vec(entry(), 0..4)) {
            let text = format!("[{}]", entries.join(", "));
            let general = requests_general(&text, Policy::Balanced);
            match requests_fast(&text, Policy::Balanced) {
                Some(fast) => prop_assert_eq!(Ok(fast), general),
                None => {
                    let repeated = entries.iter().any(|e| {
                        let keys: Vec<&str> = KEYS.iter().copied().filter(|k| e.matches(&format!("\"{k}\":")).count() > 1).collect();
                        !keys.is_empty() || e.contains("\\u006eame")
                    });
                    prop_assert!(general.is_err() || repeated, "fast path refused a valid file: {}", text);
                }
            }
        }
    }
}

//! A single-pass check for the common case: a request body exactly as the
//! daemon writes it (`JSON.stringify` of a valid request, keys in schema
//! order). It walks the text against the same [`Schema`] tables the full
//! validator uses, allocates nothing, and answers only "certainly valid and
//! canonical" — then `JSON.parse` of the text is the validated body, and the
//! binding lets V8 build it. Anything unusual (an unknown or repeated key, a
//! key out of order, an escape in a key or enum value, a lone surrogate, a
//! default to fill in, any failure at all) makes it give up, and the full
//! parser and validator decide instead. So this can make a body faster,
//! never change what is accepted.

use super::schema::{Field, Presence, Refine, Schema, MAX_PAIR_START_BYTES};

/// From `at`, the length of the run of bytes before the first quote,
/// backslash or control byte (or the end), and the code points in it (its
/// non-continuation bytes).
fn plain_run(b: &[u8], at: usize) -> (usize, u64) {
    let mut cps = 0u64;
    let mut i = at;
    while let Some(&c) = b.get(i) {
        if c == b'"' || c == b'\\' || c < 0x20 {
            break;
        }
        cps += u64::from(c & 0xC0 != 0x80);
        i += 1;
    }
    (i - at, cps)
}

struct Scan<'a> {
    b: &'a [u8],
    i: usize,
}

/// `Some(())` only when `text` is valid for `schema` and canonical.
pub fn canonical_ok(schema: &Schema, text: &str) -> Option<()> {
    let mut s = Scan {
        b: text.as_bytes(),
        i: 0,
    };
    s.ws();
    s.value(schema)?;
    s.ws();
    (s.i == s.b.len()).then_some(())
}

impl<'a> Scan<'a> {
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        self.ws();
        if self.b.get(self.i) == Some(&c) {
            self.i += 1;
            Some(())
        } else {
            None
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.b.get(self.i).copied()
    }

    /// Is the next token the string `"word"` (no escapes)? Consumed if so.
    /// The usual body spells each key and enum value exactly as the schema
    /// does, so a direct comparison settles it without scanning for the
    /// closing quote first; `word` holds no quote, so the answer is the same
    /// as [`Self::plain_str`]'s.
    fn literal(&mut self, word: &str) -> bool {
        self.ws();
        let w = word.as_bytes();
        let Some(rest) = self.b.get(self.i..) else {
            return false;
        };
        if rest.len() < w.len() + 2 || rest[0] != b'"' || rest[w.len() + 1] != b'"' {
            return false;
        }
        // A short loop the compiler keeps inline (a memcmp call costs more
        // than these few bytes).
        if rest[1..=w.len()].iter().zip(w).all(|(a, b)| a == b) {
            self.i += w.len() + 2;
            true
        } else {
            false
        }
    }

    /// A string without escapes (keys, enum values): its raw bytes.
    fn plain_str(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let start = self.i;
        loop {
            match *self.b.get(self.i)? {
                b'"' => break,
                b'\\' | 0..=0x1f => return None,
                _ => self.i += 1,
            }
        }
        let bytes: &'a [u8] = self.b;
        let s = bytes.get(start..self.i)?;
        self.i += 1;
        Some(s)
    }

    /// Any string: its length in code points (what zod's min/max count).
    fn str_code_points(&mut self) -> Option<u64> {
        self.eat(b'"')?;
        let mut cps: u64 = 0;
        loop {
            let c = *self.b.get(self.i)?;
            match c {
                b'"' => {
                    self.i += 1;
                    return Some(cps);
                }
                0..=0x1f => return None,
                b'\\' => {
                    let e = *self.b.get(self.i + 1)?;
                    match e {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.i += 2,
                        b'u' => {
                            let unit = self.hex4(self.i + 2)?;
                            self.i += 6;
                            if (0xD800..0xDC00).contains(&unit) {
                                // Only a proper pair; a lone half goes the slow way.
                                if self.b.get(self.i) != Some(&b'\\')
                                    || self.b.get(self.i + 1) != Some(&b'u')
                                {
                                    return None;
                                }
                                let low = self.hex4(self.i + 2)?;
                                if !(0xDC00..0xE000).contains(&low) {
                                    return None;
                                }
                                self.i += 6;
                            } else if (0xDC00..0xE000).contains(&unit) {
                                return None;
                            }
                        }
                        _ => return None,
                    }
                    cps += 1;
                }
                _ => {
                    // The plain run up to the next quote, backslash or
                    // control byte (long ciphertexts and prompts are most
                    // of a body).
                    let (run, plain) = plain_run(self.b, self.i);
                    if run > 0 {
                        cps += plain;
                        self.i += run;
                        continue;
                    }
                    // Count UTF-8 lead bytes only: one per code point.
                    if c & 0xC0 != 0x80 {
                        cps += 1;
                    }
                    self.i += 1;
                }
            }
        }
    }

    fn hex4(&self, at: usize) -> Option<u16> {
        crate::json::parse::hex4(self.b.get(at..)?)
    }

    fn number(&mut self) -> Option<f64> {
        self.ws();
        let start = self.i;
        let mut simple = true;
        if self.b.get(self.i) == Some(&b'-') {
            self.i += 1;
        }
        let digits_start = self.i;
        while let Some(b'0'..=b'9') = self.b.get(self.i) {
            self.i += 1;
        }
        let int_digits = self.i - digits_start;
        if int_digits == 0 || (int_digits > 1 && self.b.get(digits_start) == Some(&b'0')) {
            return None;
        }
        if self.b.get(self.i) == Some(&b'.') {
            simple = false;
            self.i += 1;
            let f = self.i;
            while let Some(b'0'..=b'9') = self.b.get(self.i) {
                self.i += 1;
            }
            if self.i == f {
                return None;
            }
        }
        if let Some(b'e' | b'E') = self.b.get(self.i) {
            simple = false;
            self.i += 1;
            if let Some(b'+' | b'-') = self.b.get(self.i) {
                self.i += 1;
            }
            let e = self.i;
            while let Some(b'0'..=b'9') = self.b.get(self.i) {
                self.i += 1;
            }
            if self.i == e {
                return None;
            }
        }
        let text = std::str::from_utf8(self.b.get(start..self.i)?).ok()?;
        if simple && int_digits <= 15 {
            return text.parse::<i64>().ok().map(|v| v as f64);
        }
        text.parse::<f64>().ok()
    }

    /// An object of `fields`, keys in schema order.
    fn object(&mut self, fields: &[Field]) -> Option<()> {
        self.eat(b'{')?;
        let mut next = 0; // index of the next field the text may hold
        if self.peek()? == b'}' {
            self.i += 1;
        } else {
            loop {
                // The expected key first, spelled as the schema
                // does; otherwise read the key and look ahead.
                if !fields.get(next).is_some_and(|f| self.literal(f.name)) {
                    let key = self.plain_str()?;
                    // Skip absent optional fields; a skipped required
                    // or defaulted field means "not canonical".
                    loop {
                        let field = fields.get(next)?;
                        if field.name.as_bytes() == key {
                            break;
                        }
                        if field.presence != Presence::Optional {
                            return None;
                        }
                        next += 1;
                    }
                }
                self.eat(b':')?;
                let field = fields.get(next)?;
                self.value(field.schema)?;
                next += 1;
                match self.peek()? {
                    b',' => self.i += 1,
                    b'}' => {
                        self.i += 1;
                        break;
                    }
                    _ => return None,
                }
            }
        }
        fields
            .get(next..)?
            .iter()
            .all(|f| f.presence == Presence::Optional)
            .then_some(())
    }

    fn value(&mut self, schema: &Schema) -> Option<()> {
        match schema {
            Schema::Str { min, max } => {
                let n = self.str_code_points()?;
                let ok_min = min.is_none_or(|m| n >= u64::from(m));
                let ok_max = max.is_none_or(|m| n <= u64::from(m));
                (ok_min && ok_max).then_some(())
            }
            Schema::Enum(values) => {
                if values.iter().any(|v| self.literal(v)) {
                    return Some(());
                }
                let s = self.plain_str()?;
                values.iter().any(|v| v.as_bytes() == s).then_some(())
            }
            Schema::Bool => {
                self.ws();
                let rest = self.b.get(self.i..)?;
                if rest.starts_with(b"true") {
                    self.i += 4;
                } else if rest.starts_with(b"false") {
                    self.i += 5;
                } else {
                    return None;
                }
                Some(())
            }
            Schema::Int { min, max, gt_zero } => {
                let n = self.number()?;
                let ok = n.is_finite()
                    && n.fract() == 0.0
                    && n.abs() <= 9_007_199_254_740_991.0
                    && min.is_none_or(|m| n >= m)
                    && max.is_none_or(|m| n <= m)
                    && (!gt_zero || n > 0.0);
                ok.then_some(())
            }
            Schema::Array { elem, min, max } => {
                self.eat(b'[')?;
                let mut count: u64 = 0;
                if self.peek()? == b']' {
                    self.i += 1;
                } else {
                    loop {
                        self.value(elem)?;
                        count += 1;
                        match self.peek()? {
                            b',' => self.i += 1,
                            b']' => {
                                self.i += 1;
                                break;
                            }
                            _ => return None,
                        }
                    }
                }
                let ok_min = min.is_none_or(|m| count >= u64::from(m));
                let ok_max = max.is_none_or(|m| count <= u64::from(m));
                (ok_min && ok_max).then_some(())
            }
            Schema::Object { fields, refine } => {
                // A pair start's size is judged on its text, which is never
                // shorter than its canonical JSON: a text within the limit
                // is a body within it; a longer one goes the full way.
                let limit = match refine {
                    None => usize::MAX,
                    Some(Refine::PairStartBytes) => MAX_PAIR_START_BYTES,
                    Some(_) => return None,
                };
                let start = self.i;
                self.object(fields)?;
                (self.i - start <= limit).then_some(())
            }
            Schema::Union { options, .. } => {
                // Each option pins its own tag, so the option that accepts
                // the whole object is the one the tag selects.
                let start = self.i;
                for (_, option) in options.iter() {
                    self.i = start;
                    if self.value(option).is_some() {
                        return Some(());
                    }
                }
                None
            }
            // Not part of any request schema; leave it to the full path.
            Schema::Url => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{self, basic_url_ok, Endpoint, Inspection};

    /// The fast answer never disagrees with the full path: when it says yes,
    /// the full path says valid and canonical.
    fn agrees(endpoint: Endpoint, text: &str) -> bool {
        let fast = canonical_ok(endpoint.schema(), text).is_some();
        let full = matches!(
            wire::inspect_request(endpoint, text, &basic_url_ok),
            Inspection::Ok {
                canonical: true,
                ..
            }
        );
        assert!(
            !fast || full,
            "fast path accepted what the full path does not: {text}"
        );
        fast
    }

    #[test]
    fn a_pair_start_is_fast_up_to_its_size_limit_and_never_past_it() {
        let keys = crate::keys::StoredKeys::generate(1).public_identity();
        let start = |model: &str| {
            format!(
                r#"{{"protocolVersion":"2","action":"start","daemon":{{"version":"1","label":"l","platform":"linux"}},"device":{},"capabilities":[{{"kind":"llm.generate","service":"s","backendId":"ollama","backendClass":"http","model":"{model}","offerScope":"team"}}]}}"#,
                keys.to_json()
            )
        };
        let room = MAX_PAIR_START_BYTES - start("").len();
        assert!(agrees(Endpoint::Pair, &start(&"m".repeat(room))));
        let over = start(&"m".repeat(room + 1));
        assert!(!agrees(Endpoint::Pair, &over));
        assert!(matches!(
            wire::inspect_request(Endpoint::Pair, &over, &basic_url_ok),
            Inspection::Schema
        ));
        // Whitespace counts against the text, never against the body: the
        // full path decides and accepts it.
        let spaced = start(&"m".repeat(room)).replacen(':', ": ", 1);
        assert!(!agrees(Endpoint::Pair, &spaced));
        assert!(matches!(
            wire::inspect_request(Endpoint::Pair, &spaced, &basic_url_ok),
            Inspection::Ok { .. }
        ));
    }

    #[test]
    fn takes_canonical_bodies_and_leaves_the_rest() {
        let cap = r#"{"kind":"llm.chat","service":"s","backendId":"openai-http","backendClass":"http","model":"m","knownModels":["a"],"offerScope":"team"}"#;
        let claim = format!(
            r#"{{"protocolVersion":"2","runnerId":"r\u00e9\ud83d\ude00","capabilities":[{cap},{cap}],"max":64}}"#
        );
        assert!(agrees(Endpoint::Claim, &claim));
        assert!(agrees(
            Endpoint::Pair,
            r#"{"protocolVersion":"2","action":"poll","deviceCode":"xxxxxxxxxxxxxxxxxxxx"}"#
        ));
        for not_fast in [
            r#"{"runnerId":"r","protocolVersion":"2","capabilities":[],"max":1}"#,
            r#"{"protocolVersion":"2","runnerId":"r","capabilities":[],"max":65}"#,
            r#"{"protocolVersion":"2","runnerId":"r","runnerId":"r","capabilities":[],"max":1}"#,
            r#"{"protocolVersion":"2","runnerId":"\ud800","capabilities":[],"max":1}"#,
            r#"{"protocolVersion":"\u0032","runnerId":"r","capabilities":[],"max":1}"#,
            r#"{"protocolVersion":"2","runnerId":"r","capabilities":[],"max":1,"x":1}"#,
            r#"{"protocolVersion":"2","runnerId":"r","capabilities":[],"max":1e400}"#,
            r#"{"protocolVersion":"2","runnerId":"r","capabilities":[],"max":01}"#,
            r#"{"protocolVersion":"2","runnerId":"r","capabilities":[]}"#,
            r#"{"protocolVersion":"2","runnerId":"r","capabilities":[],"max":1} x"#,
        ] {
            assert!(!agrees(Endpoint::Claim, not_fast), "{not_fast}");
        }
        // Spacing and number spellings JSON.parse reads the same way are fine.
        assert!(agrees(Endpoint::Claim, " {\"protocolVersion\" : \"2\", \"runnerId\":\"r\",\"capabilities\":[ ],\"max\":5.0e0}\n"));
        let heartbeat = r#"{"protocolVersion":"2","runnerId":"r","daemonVersion":"1","capabilities":[],"activeLeases":[]}"#;
        assert!(
            !agrees(Endpoint::Heartbeat, heartbeat),
            "withheld must be filled in"
        );
    }

    /// The result handler trusts a yes over the sealed-outcome schema to mean
    /// `JSON.parse(text)` is the validated outcome: the full path must then
    /// accept it and write back the very same text.
    #[test]
    fn canonical_sealed_outcomes_are_what_the_full_path_builds() {
        const RAN: &str = r#""ran":{"model":"m","backendClass":"http","durationMs":12}"#;
        let yes = [
            format!(r#"{{"outcome":{{"outcome":"ok","text":"hi é \"q\""}},{RAN}}}"#),
            format!(r#"{{"outcome":{{"outcome":"error","code":"c","message":"m","retryable":false}},{RAN}}}"#),
            format!(r#"{{"outcome":{{"outcome":"canceled"}},{RAN}}}"#),
            r#"{"outcome":{"outcome":"ok","text":""},"ran":{"model":"m","backendClass":"http","durationMs":0,"stop":"end","stopReported":true}}"#.to_string(),
        ];
        for text in &yes {
            assert!(
                canonical_ok(&wire::SEALED_OUTCOME, text).is_some(),
                "{text}"
            );
            let wire::SealedOutcomeResult::Ok { doc, outcome } =
                wire::parse_sealed_outcome(text, &basic_url_ok)
            else {
                panic!("the full path refused {text}")
            };
            let mut written = String::new();
            outcome.write_json(&doc, &mut written);
            assert_eq!(&written, text);
        }
        // Not canonical, or not valid: the handler takes the full path.
        let no = [
            format!(r#"{{{RAN},"outcome":{{"outcome":"canceled"}}}}"#),
            format!(r#"{{"outcome":{{"outcome":"ok","text":"t","artifactUrl":"https://x.test/a"}},{RAN}}}"#),
            format!(r#"{{"outcome":{{"outcome":"ok","text":"t","extra":1}},{RAN}}}"#),
            format!(r#"{{"outcome":{{"outcome":"done"}},{RAN}}}"#),
            r#"{"outcome":{"outcome":"canceled"},"ran":{"model":"m","backendClass":"http","durationMs":1.5}}"#.to_string(),
            r#"{"outcome":{"outcome":"canceled"},"ran":{"model":"","backendClass":"http","durationMs":1}}"#.to_string(),
            format!(r#"{{"outcome":{{"outcome":"canceled"}},{RAN},"more":true}}"#),
        ];
        for text in &no {
            assert!(
                canonical_ok(&wire::SEALED_OUTCOME, text).is_none(),
                "{text}"
            );
        }
    }
}

//! Encodings used on the wire.
//!
//! Encoding is the easy half: the `base64` crate's `URL_SAFE_NO_PAD` and
//! `STANDARD` engines produce exactly what Node's `Buffer#toString` does.
//!
//! Decoding is where compatibility lives. The reference decodes keys,
//! signatures, ciphertexts and the site-keys secret with Node's
//! `Buffer.from(text, "base64" | "base64url")`, which never fails: it reads
//! each UTF-16 unit as its low byte, takes either alphabet, skips anything that
//! is not a base64 character, stops at the first `=`, and keeps only whole
//! bytes. No crate reproduces that (the `base64`
//! crate is strict by design, and its "forgiving" modes still reject stray
//! characters), so [`decode_lenient`] is written out here.
//!
//! The one strict place is the envelope's inner `body` field, which the
//! reference decodes with its own portable decoder: [`decode_inner_body`].

use base64::alphabet;
use base64::engine::general_purpose::{
    GeneralPurpose, GeneralPurposeConfig, STANDARD, URL_SAFE_NO_PAD,
};
use base64::engine::DecodePaddingMode;
use base64::Engine;

/// Strict decoders used as fast paths. Leftover bits are ignored (as Node
/// and the inner-body decoder do); padding is optional for the standard
/// alphabet and refused for base64url.
const FAST_URL: GeneralPurpose = GeneralPurpose::new(
    &alphabet::URL_SAFE,
    GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireNone),
);
const FAST_STD: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Unpadded base64url: keys, signatures, ciphertexts, the inner body.
pub fn encode_url(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// [`encode_url`] appended to `out` (no intermediate string).
pub fn encode_url_append(bytes: &[u8], out: &mut String) {
    URL_SAFE_NO_PAD.encode_string(bytes, out);
}

/// Standard alphabet with `=` padding: PKCS#8 private keys, the env secret.
pub fn encode_std(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

/// Marks a byte that is not a base64 symbol in either alphabet.
const SKIP: u8 = 0xFF;

/// Sextet value of every ASCII byte, both alphabets merged (`+`/`-` = 62,
/// `/`/`_` = 63); everything else is [`SKIP`].
const LENIENT: [u8; 256] = {
    let mut table = [SKIP; 256];
    let mut i = 0u8;
    while i < 26 {
        table[(b'A' + i) as usize] = i;
        table[(b'a' + i) as usize] = 26 + i;
        i += 1;
    }
    let mut d = 0u8;
    while d < 10 {
        table[(b'0' + d) as usize] = 52 + d;
        d += 1;
    }
    table[b'+' as usize] = 62;
    table[b'-' as usize] = 62;
    table[b'/' as usize] = 63;
    table[b'_' as usize] = 63;
    table
};

/// Node's `Buffer.from(text, "base64")` / `"base64url"` (the two behave the
/// same way): never fails, returns whatever whole bytes the symbols make.
///
/// Working on UTF-8 bytes is equivalent to Node's UTF-16 walk because every
/// byte of a multi-byte UTF-8 sequence is >= 0x80, which is skipped just as
/// the non-ASCII code unit it came from would be.
pub fn decode_lenient(text: &str) -> Vec<u8> {
    let mut out = Vec::new();
    decode_lenient_into(text, &mut out);
    out
}

/// [`decode_lenient`] into a caller's buffer (cleared first), so a large
/// decode can reuse memory.
pub fn decode_lenient_into(text: &str, out: &mut Vec<u8>) {
    // Fast path: well-formed input in one alphabet (what every encoder on
    // this wire writes). Where a strict decode succeeds, the lenient one
    // yields the same bytes: same symbols, padding only at the end.
    out.clear();
    if FAST_URL.decode_vec(text, out).is_ok() {
        return;
    }
    out.clear();
    if FAST_STD.decode_vec(text, out).is_ok() {
        return;
    }
    out.clear();
    if text.is_ascii() {
        lenient_slow_into(text.as_bytes(), out);
    } else {
        // Node reads a JS string for base64 as Latin-1: each UTF-16 unit
        // counts as its low byte, so U+0141 "Ł" is an "A" and U+013D "Ľ" (or
        // the high surrogate of an emoji, 0xD83D) is an "=" that ends the
        // input, while "é" (0xE9) is skipped like any other junk.
        let units: Vec<u8> = text
            .encode_utf16()
            .map(|unit| (unit & 0xFF) as u8)
            .collect();
        lenient_slow_into(&units, out);
    }
}

/// Strict hex (either case, even length, non-empty): the bytes, or `None`.
pub fn decode_hex_strict(text: &str) -> Option<Vec<u8>> {
    if text.is_empty() || !text.len().is_multiple_of(2) {
        return None;
    }
    let decoded = decode_hex_lenient(text);
    (decoded.len() * 2 == text.len()).then_some(decoded)
}

fn lenient_slow_into(input: &[u8], out: &mut Vec<u8>) {
    out.reserve(input.len() / 4 * 3 + 3);
    let mut acc: u32 = 0;
    let mut bits: u32 = 0;
    for &byte in input {
        if byte == b'=' {
            break;
        }
        let value = LENIENT[byte as usize];
        if value == SKIP {
            continue;
        }
        acc = (acc << 6) | u32::from(value);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            // Keep only the bits not yet emitted so `acc` never overflows.
            acc &= (1 << bits) - 1;
        }
    }
}

/// The envelope inner `body` decoder: base64url alphabet only, no padding, no
/// whitespace, and a length of 1 mod 4 refused. Non-zero leftover bits in the
/// last group are ignored rather than refused, as the reference does.
/// `None` means the open reports `malformed`. (The reference counts UTF-16
/// units for the length rule; any non-ASCII text is refused anyway.)
pub fn decode_inner_body(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    decode_inner_body_into(text.as_bytes(), &mut out).then_some(out)
}

/// [`decode_inner_body`] over raw bytes into a caller's buffer (cleared first);
/// `false` when refused.
pub fn decode_inner_body_into(input: &[u8], out: &mut Vec<u8>) -> bool {
    // The crate's strict URL-safe engine with these settings refuses exactly
    // what the reference's decoder refuses: any byte outside the alphabet
    // (`=` included), and a length of 1 mod 4.
    out.clear();
    FAST_URL.decode_vec(input, out).is_ok()
}

/// Strict unpadded base64url, accepting only the one spelling the encoders
/// on this wire write: no padding, no `+`/`/`, no junk and no non-zero
/// leftover bits in the last symbol. `None` for anything else. Used for
/// request signatures, where the reference's lenient decoder lets a second
/// spelling of a valid signature verify.
pub fn decode_canonical_url(text: &str) -> Option<Vec<u8>> {
    URL_SAFE_NO_PAD.decode(text).ok()
}

/// Lowercase hex, as Node's `digest("hex")` writes it.
pub fn hex_lower(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0x0F)] as char);
    }
    out
}

/// Node's `Buffer.from(text, "hex")`: pairs of hex digits (either case) are
/// read until the first pair that is not hex; an odd trailing digit is
/// dropped. Never fails.
pub fn decode_hex_lenient(text: &str) -> Vec<u8> {
    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    let input = text.as_bytes();
    let mut out = Vec::with_capacity(input.len() / 2);
    for pair in input.chunks_exact(2) {
        match (nibble(pair[0]), nibble(pair[1])) {
            (Some(hi), Some(lo)) => out.push((hi << 4) | lo),
            _ => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lenient_slow(input: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        lenient_slow_into(input, &mut out);
        out
    }

    #[test]
    fn lenient_accepts_both_alphabets_and_skips_junk() {
        assert_eq!(decode_lenient("-_-_"), vec![0xfb, 0xff, 0xbf]);
        assert_eq!(decode_lenient("+/+/"), vec![0xfb, 0xff, 0xbf]);
        assert_eq!(decode_lenient("QU JD\nRA"), b"ABCD".to_vec());
        assert_eq!(decode_lenient("QUJDéRA"), b"ABCD".to_vec());
        // Beyond Latin-1, Node keeps each UTF-16 unit's low byte (checked
        // against Buffer.from(text, "base64") on Node 20 and 22).
        assert_eq!(decode_lenient("QŁFB"), vec![0x40, 0x01, 0x41]);
        assert_eq!(decode_lenient("QUJDĽRA"), b"ABC".to_vec());
        assert_eq!(decode_lenient("QUJD😀RA"), b"ABC".to_vec());
        assert_eq!(decode_lenient("Q\u{FF41}FB"), vec![0x40, 0x01, 0x41]);
    }

    #[test]
    fn lenient_stops_at_padding_and_drops_lone_sextets() {
        assert_eq!(decode_lenient("QUJD=RA"), b"ABC".to_vec());
        assert_eq!(decode_lenient("=QUJD"), Vec::<u8>::new());
        assert_eq!(decode_lenient("Q"), Vec::<u8>::new());
        assert_eq!(decode_lenient("QR=="), b"A".to_vec());
    }

    #[test]
    fn fast_and_slow_paths_agree() {
        let bytes: Vec<u8> = (0..=255u8).collect();
        for len in 0..40 {
            let b = &bytes[..len];
            for text in [
                encode_url(b),
                encode_std(b),
                format!("{}==", encode_url(b)),
                encode_std(b).replace('=', ""),
            ] {
                assert_eq!(
                    decode_lenient(&text),
                    lenient_slow(text.as_bytes()),
                    "{text}"
                );
            }
        }
        for text in [
            "QR", "QR==", "QUJDRAB", "Q", "Q===", "QUJD=RA", "-_+/", "QQ=x",
        ] {
            assert_eq!(
                decode_lenient(text),
                lenient_slow(text.as_bytes()),
                "{text}"
            );
        }
    }

    #[test]
    fn lenient_handles_long_input_without_overflow() {
        let bytes: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        assert_eq!(decode_lenient(&encode_url(&bytes)), bytes);
        assert_eq!(decode_lenient(&encode_std(&bytes)), bytes);
    }

    #[test]
    fn strict_inner_body_rules() {
        assert_eq!(decode_inner_body("QQ"), Some(b"A".to_vec()));
        assert_eq!(decode_inner_body("QQ=="), None);
        assert_eq!(decode_inner_body("Q"), None);
        assert_eq!(decode_inner_body("+/+/"), None);
        assert_eq!(decode_inner_body("QU JD"), None);
        assert_eq!(decode_inner_body(""), Some(Vec::new()));
        // Non-zero leftover bits are ignored, not refused.
        assert_eq!(decode_inner_body("QR"), Some(b"A".to_vec()));
    }

    /// The strict fast paths against the lenient rule: every text, and every
    /// text with a bad byte put anywhere (seeded, repeatable), decodes
    /// leniently to what the rule itself gives.
    #[test]
    fn fast_paths_agree_with_the_lenient_rule() {
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let junk = [b'=', b'+', b'/', b' ', b'\n', b'.', 0xC3, b'A', b'_', b'-'];
        for len in (0..200).chain([1000, 4097, 65_537]) {
            let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let text = encode_url(&bytes);
            assert_eq!(decode_inner_body(&text), Some(bytes.clone()));
            assert_eq!(decode_lenient(&text), bytes);
            for _ in 0..4 {
                let mut bad = text.clone().into_bytes();
                if !bad.is_empty() {
                    let at = next() as usize % bad.len();
                    bad[at] = junk[next() as usize % junk.len()];
                }
                assert_eq!(decode_lenient_slow_checked(&bad), lenient_slow(&bad));
            }
        }
    }

    /// `decode_lenient` over bytes that may not be UTF-8 (the lossy text, as
    /// napi would hand it over).
    fn decode_lenient_slow_checked(bytes: &[u8]) -> Vec<u8> {
        decode_lenient(&String::from_utf8_lossy(bytes))
    }

    #[test]
    fn hex_helpers() {
        assert_eq!(hex_lower(&[0x00, 0xab, 0xff]), "00abff");
        assert_eq!(decode_hex_lenient("abc"), vec![0xab]);
        assert_eq!(decode_hex_lenient("ABzz12"), vec![0xab]);
        assert_eq!(decode_hex_lenient("zz"), Vec::<u8>::new());
        assert_eq!(decode_hex_lenient("a"), Vec::<u8>::new());
    }
}

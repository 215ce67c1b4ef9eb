//! Encodings used on the wire.
//!
//! Encoding is the easy half: the `base64` crate's `URL_SAFE_NO_PAD` and
//! `STANDARD` engines produce exactly what Node's `Buffer#toString` does.
//!
//! Decoding is where compatibility lives. The reference decodes keys,
//! signatures, ciphertexts and the site-keys secret with Node's
//! `Buffer.from(text, "base64" | "base64url")`, which never fails: it takes
//! either alphabet, skips anything that is not a base64 character, stops at the
//! first `=`, and keeps only whole bytes. No crate reproduces that (the `base64`
//! crate is strict by design, and its "forgiving" modes still reject stray
//! characters), so [`decode_lenient`] is written out here.
//!
//! The one strict place is the envelope's inner `body` field, which the
//! reference decodes with its own portable decoder: [`decode_inner_body`].

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;

/// Unpadded base64url: keys, signatures, ciphertexts, the inner body.
pub fn encode_url(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
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
    let input = text.as_bytes();
    let mut out = Vec::with_capacity(input.len() / 4 * 3 + 3);
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
    out
}

/// Sextet values of the strict base64url alphabet only.
const STRICT_URL: [u8; 256] = {
    let mut table = LENIENT;
    table[b'+' as usize] = SKIP;
    table[b'/' as usize] = SKIP;
    table
};

/// The envelope inner `body` decoder: base64url alphabet only, no padding, no
/// whitespace, and a length of 1 mod 4 refused. Non-zero leftover bits in the
/// last group are ignored rather than refused, as the reference does.
/// `None` means the open reports `malformed`.
pub fn decode_inner_body(text: &str) -> Option<Vec<u8>> {
    let input = text.as_bytes();
    // The reference counts UTF-16 units; any non-ASCII text is refused below
    // anyway, so for every text that could pass the byte count is the same.
    if input.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(input.len() / 4 * 3 + 2);
    let mut acc: u32 = 0;
    let mut bits: u32 = 0;
    for &byte in input {
        let value = STRICT_URL[byte as usize];
        if value == SKIP {
            return None;
        }
        acc = (acc << 6) | u32::from(value);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
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

    #[test]
    fn lenient_accepts_both_alphabets_and_skips_junk() {
        assert_eq!(decode_lenient("-_-_"), vec![0xfb, 0xff, 0xbf]);
        assert_eq!(decode_lenient("+/+/"), vec![0xfb, 0xff, 0xbf]);
        assert_eq!(decode_lenient("QU JD\nRA"), b"ABCD".to_vec());
        assert_eq!(decode_lenient("QUJDéRA"), b"ABCD".to_vec());
    }

    #[test]
    fn lenient_stops_at_padding_and_drops_lone_sextets() {
        assert_eq!(decode_lenient("QUJD=RA"), b"ABC".to_vec());
        assert_eq!(decode_lenient("=QUJD"), Vec::<u8>::new());
        assert_eq!(decode_lenient("Q"), Vec::<u8>::new());
        assert_eq!(decode_lenient("QR=="), b"A".to_vec());
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

    #[test]
    fn hex_helpers() {
        assert_eq!(hex_lower(&[0x00, 0xab, 0xff]), "00abff");
        assert_eq!(decode_hex_lenient("abc"), vec![0xab]);
        assert_eq!(decode_hex_lenient("ABzz12"), vec![0xab]);
        assert_eq!(decode_hex_lenient("zz"), Vec::<u8>::new());
        assert_eq!(decode_hex_lenient("a"), Vec::<u8>::new());
    }
}

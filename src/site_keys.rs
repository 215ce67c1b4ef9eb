//! A site's keys: generated once by `keygen`, printed as an env fragment, and
//! read back from one environment variable at boot.

use zeroize::Zeroizing;

use crate::b64;
use crate::fingerprint;
use crate::json;
use crate::keys::StoredKeys;

/// Fresh site keys (`generateSiteKeys(now)`).
pub fn generate_site_keys(now_ms: u64) -> StoredKeys {
    StoredKeys::generate(now_ms)
}

/// What `keygen` prints: the secret env line, the public identity, and the
/// fingerprint, each under a commented header. The text is the reference's,
/// byte for byte (pinned by `keys.json#parties.site.formatSiteKeys`).
pub fn format_site_keys(keys: &StoredKeys) -> String {
    // The answer holds the secret (it is what `keygen` prints); the copies
    // made on the way to it are wiped.
    let json = Zeroizing::new(keys.to_json());
    let encoded = Zeroizing::new(b64::encode_std(json.as_bytes()));
    const VARIABLE: &str = "BYOLLM_SITE_KEYS=";
    let mut secret_line = Zeroizing::new(String::with_capacity(VARIABLE.len() + encoded.len()));
    secret_line.push_str(VARIABLE);
    secret_line.push_str(&encoded);
    let public = keys.public_identity();
    let public_json = public.to_json();
    let fingerprint = fingerprint::key_id(&public.identity);
    let fingerprint_line = format!("# {fingerprint}");
    let lines = [
        "# ── 1. SECRET — set this on your server, and nowhere else ────────────",
        "#",
        "# This is the site's identity. Anything holding it can *be* this site,",
        "# so it goes wherever your deployment keeps secrets — never in a repo,",
        "# never in a browser, never pasted into a dashboard.",
        secret_line.as_str(),
        "",
        "# ── 2. PUBLIC — paste this line into the byollm dashboard ────────────",
        "#",
        "# The public half. It proves signatures and seals nothing, so it is",
        "# safe to publish — which is the point: users pin it, and the relay",
        "# cannot forge work without the secret above.",
        &public_json,
        "",
        "# ── 3. Fingerprint — what a person compares by eye ───────────────────",
        "#",
        "# A fingerprint is not secret. Show it on your site so somebody",
        "# connecting can check it against what their daemon printed.",
        "# The dashboard derives this itself, so there is nothing to paste.",
        &fingerprint_line,
    ];
    // Sized once: the answer holds the secret, and a buffer it outgrew would
    // be left behind unwiped.
    let mut out = String::with_capacity(lines.iter().map(|l| l.len() + 1).sum());
    for line in lines {
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The three ways reading site keys from the environment fails, in the
/// reference's exact messages: they name the variable and the fix, because
/// the person reading a boot log is the one who can fix it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SiteKeysError {
    #[error(
        "{0} is not set. Generate a site identity once with \
         `npx --package @byollm/server keygen` and set it as {0}. \
         Do not generate keys at startup: every instance would get a \
         different identity and daemons would pin one and be refused by \
         another."
    )]
    NotSet(String),
    #[error(
        "{0} is not base64-encoded JSON. It should be exactly what \
         `npx --package @byollm/server keygen` printed."
    )]
    NotBase64Json(String),
    #[error(
        "{0} does not contain a valid site identity. Regenerate it \
         with `npx --package @byollm/server keygen` — and if this site \
         has already paired daemons, they will need to pair again."
    )]
    NotSiteIdentity(String),
}

/// `siteKeysFromEnv(variable, env)` given the variable's value: missing or
/// empty, then lenient base64 → UTF-8 → JSON, then the strict schema. It does
/// not check that the encryption key is signed (the handlers do).
pub fn site_keys_from_env(
    variable: &str,
    value: Option<&str>,
) -> Result<StoredKeys, SiteKeysError> {
    let raw = match value {
        Some(v) if !v.is_empty() => v,
        _ => return Err(SiteKeysError::NotSet(variable.to_string())),
    };
    // Every copy of the secret made on the way is wiped: the decoded bytes
    // (which become the text when they are UTF-8), the text, and the parsed
    // document, also when parsing stops partway.
    let text = utf8_lossy_wiped(b64::decode_lenient(raw));
    let mut doc = json::parse_secret(&text)
        .map_err(|_| SiteKeysError::NotBase64Json(variable.to_string()))?;
    let keys = StoredKeys::from_json(&doc);
    doc.wipe();
    keys.map_err(|_| SiteKeysError::NotSiteIdentity(variable.to_string()))
}

/// `Buffer#toString("utf8")` of `bytes`, owned by a wiped string: invalid
/// sequences become U+FFFD, a BOM is kept (and then fails JSON parsing, as
/// in the reference). Valid UTF-8 (the usual case) becomes the text without
/// a copy; otherwise the text is written into room reserved once (three
/// bytes for every byte in), so no buffer is left behind unwiped.
fn utf8_lossy_wiped(bytes: Vec<u8>) -> Zeroizing<String> {
    match String::from_utf8(bytes) {
        Ok(text) => Zeroizing::new(text),
        Err(error) => {
            let bytes = Zeroizing::new(error.into_bytes());
            let mut text = Zeroizing::new(String::with_capacity(bytes.len().saturating_mul(3)));
            for chunk in bytes.utf8_chunks() {
                text.push_str(chunk.valid());
                if !chunk.invalid().is_empty() {
                    text.push('\u{FFFD}');
                }
            }
            text
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_round_trip() {
        let keys = StoredKeys::from_secrets(&[1; 32], &[2; 32], 1_767_225_600_000);
        let text = format_site_keys(&keys);
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix("BYOLLM_SITE_KEYS="))
            .unwrap_or("");
        assert_eq!(site_keys_from_env("BYOLLM_SITE_KEYS", Some(line)), Ok(keys));
        assert!(text.ends_with(&format!("# {}\n", fingerprint::key_id(&keys_id(line)))));
    }

    fn keys_id(line: &str) -> String {
        site_keys_from_env("V", Some(line))
            .map(|k| k.identity_public)
            .unwrap_or_default()
    }

    #[test]
    fn text_that_is_not_utf8_reads_as_buffer_to_string_reads_it() {
        for bytes in [
            b"ok".to_vec(),
            vec![b'a', 0xff, b'b'],
            vec![0xe2, 0x82],
            vec![0xf0, 0x9f, 0x98, 0x80, 0xc0, 0x80],
            vec![0xef, 0xbb, 0xbf, b'{'],
        ] {
            assert_eq!(
                utf8_lossy_wiped(bytes.clone()).as_str(),
                String::from_utf8_lossy(&bytes)
            );
        }
    }

    #[test]
    fn the_three_failures() {
        assert!(matches!(
            site_keys_from_env("V", None),
            Err(SiteKeysError::NotSet(_))
        ));
        assert!(matches!(
            site_keys_from_env("V", Some("")),
            Err(SiteKeysError::NotSet(_))
        ));
        assert!(matches!(
            site_keys_from_env("V", Some("!!!")),
            Err(SiteKeysError::NotBase64Json(_))
        ));
        let shape = b64::encode_std(b"{\"version\":1}");
        assert!(matches!(
            site_keys_from_env("V", Some(&shape)),
            Err(SiteKeysError::NotSiteIdentity(_))
        ));
        let message = SiteKeysError::NotSet("MY_KEYS".into()).to_string();
        assert!(
            message.starts_with("MY_KEYS is not set.") && message.contains("set it as MY_KEYS.")
        );
    }
}

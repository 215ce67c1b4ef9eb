//! A site's keys: generated once by `keygen`, printed as an env fragment, and
//! read back from one environment variable at boot.

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
    let encoded = b64::encode_std(keys.to_json().as_bytes());
    let public = keys.public_identity();
    let fingerprint = fingerprint::key_id(&public.identity);
    let mut out = String::with_capacity(2048);
    for line in [
        "# ── 1. SECRET — set this on your server, and nowhere else ────────────",
        "#",
        "# This is the site's identity. Anything holding it can *be* this site,",
        "# so it goes wherever your deployment keeps secrets — never in a repo,",
        "# never in a browser, never pasted into a dashboard.",
        &format!("BYOLLM_SITE_KEYS={encoded}"),
        "",
        "# ── 2. PUBLIC — paste this line into the byollm dashboard ────────────",
        "#",
        "# The public half. It proves signatures and seals nothing, so it is",
        "# safe to publish — which is the point: users pin it, and the relay",
        "# cannot forge work without the secret above.",
        &public.to_json(),
        "",
        "# ── 3. Fingerprint — what a person compares by eye ───────────────────",
        "#",
        "# A fingerprint is not secret. Show it on your site so somebody",
        "# connecting can check it against what their daemon printed.",
        "# The dashboard derives this itself, so there is nothing to paste.",
        &format!("# {fingerprint}"),
    ] {
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The three ways reading site keys from the environment fails.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SiteKeysError {
    NotSet(String),
    NotBase64Json(String),
    NotSiteIdentity(String),
}

impl std::fmt::Display for SiteKeysError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The reference's exact messages: they name the variable and the fix,
        // because the person reading a boot log is the one who can fix it.
        match self {
            SiteKeysError::NotSet(var) => write!(
                f,
                "{var} is not set. Generate a site identity once with \
                 `npx --package @byollm/server keygen` and set it as {var}. \
                 Do not generate keys at startup: every instance would get a \
                 different identity and daemons would pin one and be refused by \
                 another."
            ),
            SiteKeysError::NotBase64Json(var) => write!(
                f,
                "{var} is not base64-encoded JSON. It should be exactly what \
                 `npx --package @byollm/server keygen` printed."
            ),
            SiteKeysError::NotSiteIdentity(var) => write!(
                f,
                "{var} does not contain a valid site identity. Regenerate it \
                 with `npx --package @byollm/server keygen` — and if this site \
                 has already paired daemons, they will need to pair again."
            ),
        }
    }
}

impl std::error::Error for SiteKeysError {}

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
    let bytes = b64::decode_lenient(raw);
    // Buffer#toString("utf8"): invalid sequences become U+FFFD; a BOM is kept
    // and then fails JSON parsing, as in the reference.
    let text = String::from_utf8_lossy(&bytes);
    let doc = json::parse(&text).map_err(|_| SiteKeysError::NotBase64Json(variable.to_string()))?;
    StoredKeys::from_json(&doc).map_err(|_| SiteKeysError::NotSiteIdentity(variable.to_string()))
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

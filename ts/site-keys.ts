// The site's identity: generated once (keygen), stored as a secret, supplied
// to every instance. Parsing and formatting are the core's.
import { native } from "./native.js";
import type { StoredKeys } from "./types.js";

/** A fresh Ed25519 + X25519 identity, the encryption key signed by the identity key. */
export function generateSiteKeys(now: number = Date.now()): StoredKeys {
  return native.generateKeys(now);
}

/**
 * Read the keys from an environment variable holding base64 JSON (what keygen
 * prints). Throws a message naming the variable and the fix when it is unset,
 * not base64 JSON, or not a valid identity.
 */
export const siteKeysFromEnv = (variable = "BYOLLM_SITE_KEYS", env: NodeJS.ProcessEnv = process.env): StoredKeys => native.siteKeysFromEnvValue(variable, env[variable]);

/** The text keygen prints: the secret env line, the public identity, the fingerprint. */
export const formatSiteKeys = (keys: StoredKeys): string => native.formatSiteKeys(keys);

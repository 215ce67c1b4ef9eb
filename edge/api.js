// The public functions of the edge module, named and shaped like
// @byollm/protocol's (and @byollm/server's id helpers). Each one is a single
// call into the Rust core; no rule is re-implemented here.

import { call } from "./core.js";

const encoder = new TextEncoder();

/** How far a request's timestamp may be from the verifier's clock. */
export const MAX_CLOCK_SKEW_MS = 120_000;
/** How long a sealed payload is worth keeping, from creation. */
export const ENVELOPE_MAX_AGE_MS = 24 * 60 * 60_000;
/** The domain separator an encryption key's signature covers. */
export const ENCRYPTION_KEY_CONTEXT = "byollm/v1/encryption-key";
/** The domain tag of the bytes an envelope's signature covers. */
export const ENVELOPE_BODY_VERSION = "byollm/v1/envelope";

/** Resolves at once: the WebAssembly core is loaded before this module finishes importing. */
export async function cryptoReady() {}

// ------------------------------------------------------------------ keys

/** A fresh identity (Ed25519) and encryption (X25519) keypair, bound together. */
export function generateKeys(now = Date.now()) {
  return call("generateKeys", [now]);
}

/** The reference server's name for the same thing. */
export const generateSiteKeys = generateKeys;

/** The public half of a StoredKeys, for the wire. */
export function publicIdentityOf(keys) {
  return call("publicIdentityOf", [keys]);
}

/** Whether the encryption key is signed by the identity key. Never throws. */
export function verifyPublicIdentity(identity) {
  try {
    return call("verifyPublicIdentity", [identity ?? null]) === true;
  } catch {
    return false;
  }
}

/** The human-comparable fingerprint of an identity key: `BYOLLM-XXXX-…`. */
export function fingerprint(identityPublic) {
  return call("fingerprint", [identityPublic]);
}

/** The key id used in envelopes and provenance (= the fingerprint). */
export function keyId(identityPublic) {
  return call("fingerprint", [identityPublic]);
}

/** StoredKeys as the one-line env value (`BYOLLM_SITE_KEYS=…`). */
export function formatSiteKeys(keys) {
  return call("formatSiteKeys", [keys]);
}

/** Parses the env value written by formatSiteKeys; throws the reference's messages. */
export function siteKeysFromEnvValue(variable, value) {
  return call("siteKeysFromEnvValue", [variable, value ?? null]);
}

// ------------------------------------------------------------------ envelopes

/** Seal a plaintext to a recipient, signed by the sender's identity. */
export async function seal(input) {
  return call("seal", [input.plaintext, input.senderKeys, input.recipientEncryptionPublic, input.context]);
}

/** Open an envelope and verify it came from the pinned sender. Failures return, never throw. */
export async function open(input) {
  return call("open", [input.envelope, input.recipientKeys, input.senderIdentityPublic, input.expected]);
}

// ------------------------------------------------------------------ request signatures

/** The exact bytes both sides sign and verify (UTF-8). */
export function canonicalRequest(input) {
  return encoder.encode(call("canonicalRequest", [input.endpoint, input.runnerId, input.issuedAt, input.body]));
}

/** Sign an outgoing request with an identity key. */
export function signRequest(keys, input) {
  const signature = call("signRequest", [keys, input.endpoint, input.runnerId, input.issuedAt, input.body]);
  return { runnerId: input.runnerId, issuedAt: input.issuedAt, signature };
}

/** Verify a signed request: null when good, else "stale" or "bad-signature". */
export function verifyRequest(input) {
  return call("verifyRequest", [
    input.identityPublic,
    input.endpoint,
    input.body,
    input.signature,
    input.now,
    input.maxSkewMs ?? MAX_CLOCK_SKEW_MS,
  ]);
}

/** A site's call to a relay: the same scheme over `site/<endpoint>`, the site id in the caller slot. */
export function signSiteRequest(keys, input) {
  const signature = call("signSiteRequest", [keys, input.endpoint, input.siteId, input.issuedAt, input.body]);
  return { runnerId: input.siteId, issuedAt: input.issuedAt, signature };
}

/** Verify a site's call (see signSiteRequest). */
export function verifySiteRequest(input) {
  return call("verifySiteRequest", [
    input.identityPublic,
    input.endpoint,
    input.body,
    input.signature,
    input.now,
    input.maxSkewMs ?? MAX_CLOCK_SKEW_MS,
  ]);
}

// ------------------------------------------------------------------ ids and secrets

export const generateDeviceCode = () => call("generateDeviceCode", []);
export const generateUserCode = () => call("generateUserCode", []);
export const generateRunnerId = () => call("generateRunnerId", []);
export const generateJobId = () => call("generateJobId", []);
export const generateLeaseId = () => call("generateLeaseId", []);

/** Hex SHA-256 of a secret, as stored. */
export const hashSecret = (secret) => call("hashSecret", [secret]);

/** Constant-time comparison of two hex hashes; false on malformed input. */
export function secretsMatch(a, b) {
  try {
    return call("secretsMatch", [a, b]) === true;
  } catch {
    return false;
  }
}

/** A user code as typed by a person, normalised for lookup. */
export const normalizeUserCode = (input) => call("normalizeUserCode", [input]);

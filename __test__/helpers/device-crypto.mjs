// A device's side of the envelopes and request signatures, for the tests and
// scripts that play a daemon (or a site the engine reseals for) without the
// reference packages: key ids, seal, open and verifyRequest over StoredKeys,
// as protocol.md spells them, written on libsodium and node:crypto. It shares
// no code with the core; the golden vectors pin the core's own, these only
// agree with it. Every function is synchronous, as the addon's were.
import { createHash } from "node:crypto";
import sodium from "libsodium-wrappers";

await sodium.ready;

const b64u = (bytes) => Buffer.from(bytes).toString("base64url");
const fromB64u = (text) => Buffer.from(text, "base64url");
const utf8 = (text) => Buffer.from(text, "utf8");
/** The 32 key bytes after a private key's 16-byte PKCS#8 header. */
const privateBytes = (pkcs8) => Buffer.from(pkcs8, "base64").subarray(16);

const CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/** BYOLLM-XXXX-…: the first 120 bits of SHA-256 over the key's bytes, in Crockford base32. */
export function keyId(identityPublic) {
  const digest = createHash("sha256").update(fromB64u(identityPublic)).digest();
  let bits = 0n;
  for (let i = 0; i < 15; i++) bits = (bits << 8n) | BigInt(digest[i]);
  let out = "";
  for (let i = 23; i >= 0; i--) out += CROCKFORD[Number((bits >> BigInt(i * 5)) & 31n)];
  return `BYOLLM-${out.match(/.{4}/g).join("-")}`;
}

/** Sign the claims with the sender's identity, then seal them to the recipient's X25519 key. */
export function seal({ plaintext, senderKeys, recipientEncryptionPublic, context }) {
  const { jobId, senderKeyId, recipientKeyId, deadlineAt, direction } = context;
  const signed = utf8(JSON.stringify({ v: "byollm/v1/envelope", jobId, senderKeyId, recipientKeyId, deadlineAt, direction, plaintext }));
  const secret = sodium.crypto_sign_seed_keypair(privateBytes(senderKeys.identityPrivate)).privateKey;
  const inner = JSON.stringify({ body: b64u(signed), signature: b64u(sodium.crypto_sign_detached(signed, secret)) });
  const ciphertext = sodium.crypto_box_seal(utf8(inner), fromB64u(recipientEncryptionPublic));
  return { ciphertext: b64u(ciphertext), recipientKeyId, senderKeyId, direction, deadlineAt };
}

/** Open an envelope with the checks a daemon makes, in protocol.md's order; never throws. */
export function open({ envelope, recipientKeys, senderIdentityPublic, expected }) {
  const fail = (reason) => ({ ok: false, reason });
  if (envelope.recipientKeyId !== expected.recipientKeyId || envelope.senderKeyId !== expected.senderKeyId || envelope.direction !== expected.direction) {
    return fail("not-for-us");
  }
  let inner;
  try {
    const secret = privateBytes(recipientKeys.encryptionPrivate);
    inner = sodium.crypto_box_seal_open(fromB64u(envelope.ciphertext), sodium.crypto_scalarmult_base(secret), secret);
  } catch {
    return fail("unopenable");
  }
  let body, claims;
  try {
    const { body: text, signature } = JSON.parse(Buffer.from(inner).toString("utf8"));
    body = fromB64u(text);
    if (!sodium.crypto_sign_verify_detached(fromB64u(signature), body, fromB64u(senderIdentityPublic))) return fail("bad-signature");
    claims = JSON.parse(body.toString("utf8"));
  } catch {
    return fail("malformed");
  }
  for (const key of ["jobId", "senderKeyId", "recipientKeyId", "direction"]) if (claims?.[key] !== expected[key]) return fail("context-mismatch");
  if (claims.deadlineAt !== envelope.deadlineAt) return fail("context-mismatch");
  return typeof claims.plaintext === "string" ? { ok: true, plaintext: claims.plaintext } : fail("malformed");
}

/** `null` when the request signature holds: fresh within `maxSkewMs`, then Ed25519 over the canonical request. */
export function verifyRequest({ identityPublic, endpoint, body, signature, now, maxSkewMs = 120_000 }) {
  if (Math.abs(now - signature.issuedAt) > maxSkewMs) return "stale";
  const hash = createHash("sha256").update(body, "utf8").digest("hex");
  const canonical = utf8(`byollm/v1/request\n${endpoint}\n${signature.runnerId}\n${signature.issuedAt}\n${hash}`);
  try {
    return /^[A-Za-z0-9_-]{86}$/.test(signature.signature) && sodium.crypto_sign_verify_detached(fromB64u(signature.signature), canonical, fromB64u(identityPublic)) ? null : "bad-signature";
  } catch {
    return "bad-signature";
  }
}

// A simulated device's crypto written directly on libsodium (the library the
// protocol's sealed box is defined by, and the one @byollm/protocol wraps),
// for bench/device-effect.mjs.
//
// It does the device's work (sign each request, open and verify the payload,
// sign and seal the result) with plain libsodium calls and Buffers, leaving
// little garbage on the thread it shares with the server: no node:crypto key
// object per call, no schema parsing. It shares no code with either server.
// The interface is the subset of @byollm/protocol's that bench/full-cycle.mjs's
// Device uses, so the two can be swapped.
import { createHash } from "node:crypto";
import sodium from "libsodium-wrappers";

await sodium.ready;

const b64u = (bytes) => Buffer.from(bytes).toString("base64url");
const fromB64u = (text) => Buffer.from(text, "base64url");
const utf8 = (text) => Buffer.from(text, "utf8");

const ENCRYPTION_KEY_PREFIX = "byollm/v1/encryption-key:";
const REQUEST_PREFIX = "byollm/v1/request";
const ENVELOPE_VERSION = "byollm/v1/envelope";
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

/** A device's key pairs. Opaque to the caller, like @byollm/protocol's StoredKeys. */
export function generateKeys() {
  const sign = sodium.crypto_sign_keypair();
  const box = sodium.crypto_box_keypair();
  const encryption = b64u(box.publicKey);
  return {
    signSecret: sign.privateKey,
    boxPublic: box.publicKey,
    boxSecret: box.privateKey,
    identity: {
      identity: b64u(sign.publicKey),
      encryption,
      encryptionSig: b64u(sodium.crypto_sign_detached(utf8(ENCRYPTION_KEY_PREFIX + encryption), sign.privateKey)),
    },
    get identityPublic() {
      return this.identity.identity;
    },
  };
}

export const publicIdentityOf = (keys) => ({ ...keys.identity });

export function signRequest(keys, { endpoint, runnerId, issuedAt, body }) {
  const bodyHash = createHash("sha256").update(body, "utf8").digest("hex");
  const canonical = `${REQUEST_PREFIX}\n${endpoint}\n${runnerId}\n${issuedAt}\n${bodyHash}`;
  return { runnerId, issuedAt, signature: b64u(sodium.crypto_sign_detached(utf8(canonical), keys.signSecret)) };
}

/** Open a payload sealed to this device, with the checks a daemon makes. */
export async function open({ envelope, recipientKeys, senderIdentityPublic, expected }) {
  if (
    envelope.recipientKeyId !== expected.recipientKeyId ||
    envelope.senderKeyId !== expected.senderKeyId ||
    envelope.direction !== expected.direction
  ) {
    return { ok: false, reason: "not-for-us" };
  }
  let inner;
  try {
    inner = sodium.crypto_box_seal_open(fromB64u(envelope.ciphertext), recipientKeys.boxPublic, recipientKeys.boxSecret);
  } catch {
    return { ok: false, reason: "unopenable" };
  }
  const { body, signature } = JSON.parse(Buffer.from(inner).toString("utf8"));
  const bodyBytes = fromB64u(body);
  if (!sodium.crypto_sign_verify_detached(fromB64u(signature), bodyBytes, fromB64u(senderIdentityPublic))) {
    return { ok: false, reason: "bad-signature" };
  }
  const claims = JSON.parse(bodyBytes.toString("utf8"));
  if (
    claims.jobId !== expected.jobId ||
    claims.senderKeyId !== expected.senderKeyId ||
    claims.recipientKeyId !== expected.recipientKeyId ||
    claims.deadlineAt !== envelope.deadlineAt ||
    claims.direction !== expected.direction ||
    typeof claims.plaintext !== "string"
  ) {
    return { ok: false, reason: "context-mismatch" };
  }
  return { ok: true, plaintext: claims.plaintext };
}

/** Sign, then seal to the recipient's X25519 key (libsodium's crypto_box_seal). */
export async function seal({ plaintext, senderKeys, recipientEncryptionPublic, context }) {
  const { jobId, senderKeyId, recipientKeyId, deadlineAt, direction } = context;
  const signed = utf8(JSON.stringify({ v: ENVELOPE_VERSION, jobId, senderKeyId, recipientKeyId, deadlineAt, direction, plaintext }));
  const inner = JSON.stringify({ body: b64u(signed), signature: b64u(sodium.crypto_sign_detached(signed, senderKeys.signSecret)) });
  const ciphertext = sodium.crypto_box_seal(utf8(inner), fromB64u(recipientEncryptionPublic));
  return { ciphertext: b64u(ciphertext), recipientKeyId, senderKeyId, direction, deadlineAt };
}

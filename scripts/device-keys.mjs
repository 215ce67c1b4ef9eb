// A device's side of the key rules, for the tests and scripts that play a
// daemon without the reference packages (which need Node >= 22.14; these run
// on Node 20, Bun and Deno too): request signatures and public identities as
// protocol.md §3 spells them, written with node:crypto. The golden vectors
// pin the core's own (src/signing.rs's unit tests); these only agree with it.
import { createHash, createPrivateKey, createPublicKey, sign, verify } from "node:crypto";

/** `{identity, encryption, encryptionSig}` of stored keys. */
export const publicIdentityOf = (keys) => ({ identity: keys.identityPublic, encryption: keys.encryptionPublic, encryptionSig: keys.encryptionSig });

/** A daemon's request signature: Ed25519 over `byollm/v1/request\n<endpoint>\n<runnerId>\n<issuedAt>\n<sha256(body) hex>`. */
export function signRequest(keys, { endpoint, runnerId, issuedAt, body }) {
  const canonical = `byollm/v1/request\n${endpoint}\n${runnerId}\n${issuedAt}\n${createHash("sha256").update(body).digest("hex")}`;
  const key = createPrivateKey({ key: Buffer.from(keys.identityPrivate, "base64"), format: "der", type: "pkcs8" });
  return { runnerId, issuedAt, signature: sign(null, Buffer.from(canonical), key).toString("base64url") };
}

/** Whether the identity key signed the encryption key (`byollm/v1/encryption-key:<encryption>`). */
export function verifyPublicIdentity({ identity, encryption, encryptionSig }) {
  const key = createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: identity }, format: "jwk" });
  return verify(null, Buffer.from(`byollm/v1/encryption-key:${encryption}`), key, Buffer.from(encryptionSig, "base64url"));
}

// How the result handler's open reads its inputs (SiteKeyring.acceptResult,
// which the engine and the cloud lane call): the ciphertext string is read
// as one-byte text when it is pure ASCII, and through UTF-8 otherwise.
// Non-ASCII characters must reach the lenient base64 decoder exactly as
// before, so envelopes with such characters spliced in must open (or fail)
// just as the reference's do. Also checks the UTF-16 output path for large
// outcomes.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as ref from "@byollm/protocol";
import * as native from "../index.js";

const T0 = 1767225600000;
await ref.cryptoReady();
const site = ref.generateKeys(T0);
const device = ref.generateKeys(T0);
const ring = new native.SiteKeyring(site);
const context = {
  jobId: "6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b",
  senderKeyId: ref.keyId(device.identityPublic),
  recipientKeyId: ring.keyId,
  deadlineAt: T0 + 86_400_000,
  direction: "result",
};
const { deadlineAt, ...expected } = context;
const ran = { model: "m", backendClass: "http", durationMs: 1 };
/** A device's result whose outcome's text is `text`. */
const sealWith = (text) =>
  ref.seal({ plaintext: JSON.stringify({ outcome: { outcome: "ok", text }, ran }), senderKeys: device, recipientEncryptionPublic: site.encryptionPublic, context });
const source = { audience: "team", runnerId: "r1", runnerOwner: "bob" };
/** Ours accepted and the reference's open, each as `{ ok, text }`. */
const openBoth = async (envelope) => {
  const ours = await ring.acceptResult(envelope, context.jobId, device.identityPublic, "ok", source);
  const theirs = await ref.open({ envelope, recipientKeys: site, senderIdentityPublic: device.identityPublic, expected });
  return [
    ours.ok ? { ok: true, text: JSON.parse(ours.accepted).outcome.text } : { ok: false },
    theirs.ok ? { ok: true, text: JSON.parse(theirs.plaintext).outcome.text } : { ok: false },
  ];
};

test("non-ASCII characters spliced into a ciphertext: same outcome as the reference", async () => {
  const envelope = await sealWith("a plaintext of some length, enough for a few base64 blocks");
  const c = envelope.ciphertext;
  // Characters whose UTF-16 units are junk to Node's decoder in every
  // reading: "é" (one byte in Latin-1, two in UTF-8), U+0100, a lone
  // surrogate, U+2028, U+00FF/U+0080.
  const inserts = ["é", "ééé", "\u0100", "\ud800", "\u2028", "\u00ff\u0080"];
  let cases = 0;
  for (const ins of inserts) {
    for (const at of [0, 1, 7, c.length >> 1, c.length - 1, c.length]) {
      const spliced = { ...envelope, ciphertext: c.slice(0, at) + ins + c.slice(at) };
      const [ours, theirs] = await openBoth(spliced);
      assert.equal(ours.ok, true, `insert ${JSON.stringify(ins)} at ${at}`);
      assert.deepEqual(ours, theirs, `insert ${JSON.stringify(ins)} at ${at}`);
      cases++;
    }
  }
  // The untouched envelope still opens, through the one-byte path.
  const [ours, theirs] = await openBoth(envelope);
  assert.equal(ours.ok, true);
  assert.deepEqual(ours, theirs);
  assert.equal(cases, inserts.length * 6);
});

test("characters above U+00FF in base64 text count as their low byte, as in Node", async () => {
  // Node's base64 decoder reads each UTF-16 unit as its low byte: "Ł" (U+0141)
  // and U+FF41 are an "A", U+013D and an emoji's high surrogate (0xD83D) are an
  // "=" that ends the text. Ours (src/b64.rs) does the same, so a ciphertext
  // with such characters spliced in gets the same verdict from both.
  const envelope = await sealWith("some plaintext");
  const c = envelope.ciphertext;
  let differentFromClean = 0;
  for (const ins of ["Ł", "\uff41", "\u0141\u0142\u0143", "\u013d", "😀", "é"]) {
    const spliced = { ...envelope, ciphertext: c.slice(0, 4) + ins + c.slice(4) };
    const [ours, theirs] = await openBoth(spliced);
    assert.deepEqual(ours, theirs, `insert ${JSON.stringify(ins)}`);
    if (!ours.ok) differentFromClean++;
  }
  // "é" is skipped (the box still opens); the others change or end the text.
  assert.equal(differentFromClean, 5);
});

test("a one-byte (Latin-1) ciphertext string with bytes >= 0x80 is not read as ASCII", async () => {
  const envelope = await sealWith("x".repeat(300));
  const c = envelope.ciphertext;
  // "\xC1" would be "A" if only its low seven bits were kept.
  for (const ins of ["\xc1", "\xe9\xe9", "\x80", "\xff"]) {
    const spliced = { ...envelope, ciphertext: c.slice(0, 40) + ins + c.slice(40) };
    const [ours, theirs] = await openBoth(spliced);
    assert.deepEqual(ours, theirs, `insert ${JSON.stringify(ins)}`);
  }
});

test("large mixed-script outcomes come back exactly", async () => {
  const unit = 'ASCII run of some length — “quoted” é 😀 \u2028 ' + "z".repeat(37);
  for (const plaintext of [unit.repeat(3000), "é".repeat(70000), "😀".repeat(20000) + "tail", "y".repeat(100000) + "é"]) {
    const [ours, theirs] = await openBoth(await sealWith(plaintext));
    assert.equal(ours.ok, true);
    assert.equal(ours.text, plaintext);
    assert.deepEqual(ours, theirs);
  }
});

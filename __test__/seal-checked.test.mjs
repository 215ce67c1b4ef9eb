// SiteKeyring.sealCheckedPayload(Async): enqueue's validation and at-rest seal
// in one native call. It must answer exactly what validatePayload followed by
// sealPayload of the canonical text would: the same refusal messages, the same
// size class, and an envelope that opens to the canonical text. No reference
// package, so it also runs on Node 20.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as native from "../index.js";

const T0 = 1767225600000;
const site = native.generateKeys(T0);
const ring = new native.SiteKeyring(site);

/** The at-rest envelope's plaintext, opened as the fetch path opens it. */
function openAtRest(envelope, jobId) {
  const opened = native.open({
    envelope,
    recipientKeys: site,
    senderIdentityPublic: site.identityPublic,
    expected: { jobId, senderKeyId: ring.keyId, recipientKeyId: ring.keyId, direction: "payload" },
  });
  assert.equal(opened.ok, true, `at-rest envelope opens (${opened.reason})`);
  return opened.plaintext;
}

const cases = [
  ["llm.generate", { prompt: "hello" }],
  // Keys out of schema order and an unknown-spelling normalisation are the
  // validator's business; the sealed text must be its canonical form.
  ["llm.generate", { system: "be brief", prompt: "é \u2028 \"q\" \n" }],
  ["llm.generate", { prompt: "x".repeat(70_000) }],
  ["llm.chat", { messages: [{ role: "user", content: "hi" }] }],
  ["llm.generate", { prompt: 3 }],
  ["llm.generate", {}],
  ["no.such.kind", { prompt: "x" }],
  [42, { prompt: "x" }],
  ["llm.generate", undefined],
];

test("sealCheckedPayload answers as validatePayload + sealPayload", async () => {
  let n = 0;
  for (const [kind, payload] of cases) {
    const json = payload === undefined ? undefined : JSON.stringify(payload);
    const separate = native.validatePayload(kind, json);
    for (const fused of [
      ring.sealCheckedPayload(kind, json, `job-${n}`, T0 + 86_400_000),
      await ring.sealCheckedPayloadAsync(kind, json, `job-${n}`, T0 + 86_400_000),
    ]) {
      assert.equal(fused.ok, separate.ok, `verdict for ${String(kind)} ${json?.slice(0, 40)}`);
      if (!separate.ok) {
        assert.equal(fused.message, separate.message);
        assert.equal(fused.envelope, undefined);
        continue;
      }
      assert.equal(fused.sizeClass, separate.sizeClass);
      assert.deepEqual(Object.keys(fused.envelope), ["ciphertext", "recipientKeyId", "senderKeyId", "direction", "deadlineAt"]);
      assert.equal(fused.envelope.deadlineAt, T0 + 86_400_000);
      assert.equal(openAtRest(fused.envelope, `job-${n}`), separate.canonical);
    }
    n += 1;
  }
  assert.ok(n === cases.length);
});

test("sealCheckedPayload: a kind that cannot become a string throws like validatePayload", () => {
  assert.throws(() => native.validatePayload(Symbol("k"), "{}"));
  assert.throws(() => ring.sealCheckedPayload(Symbol("k"), "{}", "job", T0));
});

// SiteKeyring.sealChecked: enqueue's validation and at-rest seal in one
// native call, inline or on the thread pool by the payload's size: the
// validator's refusal messages, the size class, and an envelope that opens to
// the canonical text. No reference package, so it also runs on Node 20.
import { test } from "node:test";
import * as dev from "./helpers/device-crypto.mjs";
import assert from "node:assert/strict";
import * as native from "../index.js";
import { xorshift32 } from "../scripts/prng.mjs";

const T0 = 1767225600000;
const site = native.generateKeys(T0);
const ring = new native.SiteKeyring(site);

/** The at-rest envelope's plaintext, opened as the fetch path opens it. */
function openAtRest(envelope, jobId) {
  const opened = dev.open({
    envelope,
    recipientKeys: site,
    senderIdentityPublic: site.identityPublic,
    expected: { jobId, senderKeyId: ring.keyId, recipientKeyId: ring.keyId, direction: "payload" },
  });
  assert.equal(opened.ok, true, `at-rest envelope opens (${opened.reason})`);
  return opened.plaintext;
}

/** Each case with the validator's answer: `[kind, payload, message]` refused, `[kind, payload, canonical, sizeClass]` accepted. */
const cases = [
  ["llm.generate", { prompt: "hello" }, '{"prompt":"hello"}', "small"],
  // Keys out of schema order and an unknown-spelling normalisation are the
  // validator's business; the sealed text must be its canonical form.
  ["llm.generate", { system: "be brief", prompt: "é \u2028 \"q\" \n" }, '{"prompt":"é \u2028 \\"q\\" \\n","system":"be brief"}', "small"],
  ["llm.generate", { prompt: "x".repeat(70_000) }, `{"prompt":"${"x".repeat(70_000)}"}`, "large"],
  ["llm.chat", { messages: [{ role: "user", content: "hi" }] }, '{"messages":[{"role":"user","content":"hi"}]}', "small"],
  ["llm.generate", { prompt: 3 }, "invalid llm.generate payload — payload.prompt: Invalid input: expected string, received number"],
  ["llm.generate", {}, "invalid llm.generate payload — payload.prompt: Invalid input: expected string, received undefined"],
  ["no.such.kind", { prompt: "x" }, "invalid no.such.kind payload — kind: Invalid discriminator value. Expected 'llm.generate' | 'llm.chat'"],
  [42, { prompt: "x" }, "invalid 42 payload — kind: Invalid discriminator value. Expected 'llm.generate' | 'llm.chat'"],
  ["llm.generate", undefined, "invalid llm.generate payload — payload: Invalid input: expected object, received undefined"],
];

test("sealChecked: the validator's verdict and the sealed canonical text, on the thread pool past 64 KiB", async () => {
  let n = 0;
  for (const [kind, payload, text, sizeClass] of cases) {
    const json = payload === undefined ? undefined : JSON.stringify(payload);
    const answer = ring.sealChecked(kind, json, undefined, undefined, `job-${n}`, T0 + 86_400_000);
    assert.equal(answer instanceof Promise, (json?.length ?? 0) > 64 * 1024, `inline or pooled for ${json?.length} units`);
    const fused = await answer;
    assert.equal(fused.ok, sizeClass !== undefined, `verdict for ${String(kind)} ${json?.slice(0, 40)}`);
    if (!fused.ok) {
      assert.equal(fused.message, text);
      assert.equal(fused.envelope, undefined);
    } else {
      assert.equal(fused.sizeClass, sizeClass);
      assert.deepEqual(Object.keys(fused.envelope), ["ciphertext", "recipientKeyId", "senderKeyId", "direction", "deadlineAt"]);
      assert.equal(fused.envelope.deadlineAt, T0 + 86_400_000);
      assert.equal(openAtRest(fused.envelope, `job-${n}`), text);
    }
    n += 1;
  }
  assert.ok(n === cases.length);
});

test("sealChecked: a kind that cannot become a string throws", () => {
  assert.throws(() => ring.sealChecked(Symbol("k"), "{}", undefined, undefined, "job", T0));
});


/** Text JSON.stringify has work to do on: quotes, escapes, controls, lone and paired surrogates, astral and Latin-1. */
function awkwardText(next, length) {
  const pieces = ['"', "\\", "\n", "\u0000", "\u001f", "\u007f", "é", "✓", "😀", "\ud800", "\udfff", "\u2028", "a", "plain words "];
  let out = "";
  while (out.length < length) out += next() < 0.7 ? "p".repeat(1 + Math.floor(next() * 50)) : pieces[Math.floor(next() * pieces.length)];
  return out;
}

test("sealChecked of keys and values seals exactly what JSON.stringify of the same object would", async () => {
  const next = xorshift32(6);
  const payloads = [
    { prompt: "p".repeat(70_000) },
    { prompt: awkwardText(next, 80_000), system: awkwardText(next, 300) },
    { system: "é".repeat(40_000), prompt: "q".repeat(40_000) },
    { prompt: awkwardText(next, 70_000), extra: "refused by the schema" },
    { 2: "x", 1: "y", prompt: "z".repeat(70_000) },
  ];
  for (const [n, payload] of payloads.entries()) {
    const keys = Object.keys(payload);
    const values = keys.map((k) => payload[k]);
    const viaJson = await ring.sealChecked("llm.generate", JSON.stringify(payload), undefined, undefined, `job-${n}`, T0);
    const viaFields = await ring.sealChecked("llm.generate", undefined, keys, values, `job-${n}`, T0);
    assert.equal(viaFields.ok, viaJson.ok, `verdict ${n}`);
    if (!viaJson.ok) {
      assert.equal(viaFields.message, viaJson.message);
      continue;
    }
    assert.equal(viaFields.sizeClass, viaJson.sizeClass);
    assert.equal(openAtRest(viaFields.envelope, `job-${n}`), openAtRest(viaJson.envelope, `job-${n}`), `payload ${n}`);
  }
  assert.throws(() => ring.sealChecked("llm.generate", undefined, ["a"], [], "job", T0), /differ in length/);
});

test("largeStringFields takes only plain objects of string data properties, large enough", async () => {
  const { largeStringFields } = await import("../dist/app.js");
  const big = "p".repeat(70_000);
  assert.deepEqual(largeStringFields({ prompt: big, system: "s" }), [["prompt", "system"], [big, "s"]]);
  assert.deepEqual(largeStringFields(Object.assign(Object.create(null), { prompt: big })), [["prompt"], [big]]);
  assert.equal(largeStringFields({ prompt: "small" }), undefined, "small payloads keep JSON.stringify");
  assert.equal(largeStringFields({ prompt: big, n: 1 }), undefined, "a number");
  assert.equal(largeStringFields({ prompt: big, toJSON: () => ({}) }), undefined, "toJSON");
  assert.equal(largeStringFields({ get prompt() { return big; } }), undefined, "a getter");
  assert.equal(largeStringFields(new (class P { prompt = big })()), undefined, "a class instance");
  assert.equal(largeStringFields([big]), undefined, "an array");
  assert.equal(largeStringFields(big), undefined, "a string");
  assert.equal(largeStringFields(null), undefined);
});

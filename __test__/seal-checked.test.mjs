// SiteKeyring.sealChecked: enqueue's validation and at-rest seal in one
// native call, inline or on the thread pool by the payload's size. It must answer exactly what validatePayload followed by
// sealPayload of the canonical text would: the same refusal messages, the same
// size class, and an envelope that opens to the canonical text. No reference
// package, so it also runs on Node 20.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as native from "../index.js";
import { xorshift32 } from "../scripts/prng.mjs";

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

test("sealChecked answers as validatePayload + sealPayload, on the thread pool past 64 KiB", async () => {
  let n = 0;
  for (const [kind, payload] of cases) {
    const json = payload === undefined ? undefined : JSON.stringify(payload);
    const separate = native.validatePayload(kind, json);
    const answer = ring.sealChecked(kind, json, undefined, undefined, `job-${n}`, T0 + 86_400_000);
    assert.equal(answer instanceof Promise, (json?.length ?? 0) > 64 * 1024, `inline or pooled for ${json?.length} units`);
    const fused = await answer;
    assert.equal(fused.ok, separate.ok, `verdict for ${String(kind)} ${json?.slice(0, 40)}`);
    if (!separate.ok) {
      assert.equal(fused.message, separate.message);
      assert.equal(fused.envelope, undefined);
    } else {
      assert.equal(fused.sizeClass, separate.sizeClass);
      assert.deepEqual(Object.keys(fused.envelope), ["ciphertext", "recipientKeyId", "senderKeyId", "direction", "deadlineAt"]);
      assert.equal(fused.envelope.deadlineAt, T0 + 86_400_000);
      assert.equal(openAtRest(fused.envelope, `job-${n}`), separate.canonical);
    }
    n += 1;
  }
  assert.ok(n === cases.length);
});

test("sealChecked: a kind that cannot become a string throws like validatePayload", () => {
  assert.throws(() => native.validatePayload(Symbol("k"), "{}"));
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

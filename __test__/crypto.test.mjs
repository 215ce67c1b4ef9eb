// The crypto section of the native binding, seen from JavaScript: shapes, key
// order, semantics, error messages, and the deliberate differences from the
// reference. Imports no reference package, so it also runs on Node 20. The
// core's key ids, envelopes and request signatures are pinned by the golden
// vectors in tests/vectors_crypto.rs; the device's side here is
// helpers/device-crypto.mjs.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import * as deviceKeys from "../scripts/device-keys.mjs";
import * as native from "../index.js";
import * as dev from "./helpers/device-crypto.mjs";

const vectors = (name) => JSON.parse(readFileSync(new URL(`../tests/vectors/${name}`, import.meta.url), "utf8"));
const fx = vectors("keys.fixture.json");
const keysJson = vectors("keys.json");
const signatures = vectors("signatures.json");
const T0 = 1767225600000;

const STORED_KEYS_ORDER = [
  "version",
  "identityPublic",
  "identityPrivate",
  "encryptionPublic",
  "encryptionPrivate",
  "encryptionSig",
  "createdAt",
];

test("generateKeys: shape, key order, consistency, fresh every call", () => {
  const a = native.generateKeys(T0);
  assert.deepEqual(Object.keys(a), STORED_KEYS_ORDER);
  assert.equal(a.version, 1);
  assert.equal(a.createdAt, T0);
  assert.match(a.identityPublic, /^[A-Za-z0-9_-]{43}$/);
  assert.match(a.identityPrivate, /^MC4CAQAwBQYDK2VwBCIEI[A-Za-z0-9+/]{43}$/);
  assert.match(a.encryptionPrivate, /^MC4CAQAwBQYDK2VuBCIEI[A-Za-z0-9+/]{43}$/);
  assert.match(a.encryptionSig, /^[A-Za-z0-9_-]{86}$/);
  assert.equal(deviceKeys.verifyPublicIdentity(deviceKeys.publicIdentityOf(a)), true);
  assert.notEqual(native.generateKeys(T0).identityPublic, a.identityPublic);
  assert.throws(() => native.generateKeys(-1), /positive integer/);
});

test("formatSiteKeys matches the vectors", () => {
  assert.equal(native.formatSiteKeys(keysJson.parties.site.storedKeys), keysJson.parties.site.formatSiteKeys);
});

test("siteKeysFromEnvValue: the reference's three messages, and the valid cases", () => {
  const misc = vectors("misc.json");
  for (const c of misc.siteKeysFromEnv) {
    const variable = c.variable ?? "BYOLLM_SITE_KEYS";
    const value = c.env[variable];
    if (c.result.ok) {
      const keys = native.siteKeysFromEnvValue(variable, value);
      assert.deepEqual(keys, c.result.value, c.name);
      assert.deepEqual(Object.keys(keys), STORED_KEYS_ORDER);
    } else {
      assert.throws(() => native.siteKeysFromEnvValue(variable, value), { message: c.result.error.message }, c.name);
    }
  }
  assert.throws(() => native.siteKeysFromEnvValue("X", null), /^Error: X is not set\./);
});

test("request signatures: the site plane's signature", () => {
  const s = signatures.siteSigned;
  const ring = new native.SiteKeyring(fx.site);
  assert.equal(ring.signSiteRequest(s.input.endpoint, s.input.siteId, s.input.issuedAt, s.input.body), s.signature.signature);
});

test("ids, codes and secrets", () => {
  const hs = vectors("hash-secret.json");
  for (const c of hs.hashSecret) {
    const input = Buffer.from(c.inputUtf16Hex, "hex").toString("utf16le");
    assert.equal(native.hashSecret(input), c.expected);
  }
  const strictHex = /^(?:[0-9a-fA-F]{2})+$/;
  for (const c of hs.secretsMatch) {
    // Deliberate differences: malformed hex is never equal, and where Node's
    // timingSafeEqual throws, we say false.
    const wellFormed = strictHex.test(c.a) && strictHex.test(c.b);
    assert.equal(native.secretsMatch(c.a, c.b), wellFormed && c.result.ok ? c.result.value : false, c.name);
  }
  for (const c of vectors("user-codes.json").normalizeUserCode) {
    assert.equal(native.normalizeUserCode(c.input), c.expected, JSON.stringify(c.input));
  }
  const seen = new Set();
  for (let i = 0; i < 200; i++) {
    const code = native.generateUserCode();
    assert.match(code, /^[ABCDEFGHJKMNPQRTWXYZ2346789]{4}-[ABCDEFGHJKMNPQRTWXYZ2346789]{4}$/);
    seen.add(code);
  }
  assert.ok(seen.size > 190);
  assert.match(native.generateDeviceCode(), /^[A-Za-z0-9_-]{43}$/);
  const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
  assert.match(native.generateJobId(), uuid);
  assert.match(native.generateRunnerId().slice("runner_".length), uuid);
  assert.ok(native.generateRunnerId().startsWith("runner_"));
});

test("SiteKeyring: seal at rest, reseal to a device (inline when small)", async () => {
  const ring = new native.SiteKeyring(fx.site);
  assert.equal(ring.keyId, keysJson.parties.site.keyId);

  const jobId = "6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b";
  const { envelope: atRest } = ring.sealChecked("llm.generate", '{"prompt":"hi"}', undefined, undefined, jobId, T0 + 86_400_000);
  assert.equal(atRest.senderKeyId, ring.keyId);
  assert.equal(atRest.recipientKeyId, ring.keyId);
  assert.equal(atRest.direction, "payload");

  const device = deviceKeys.publicIdentityOf(fx.device);
  const answer = ring.resealForDevice(atRest, jobId, T0, device);
  assert.equal(answer instanceof Promise, false, "a small envelope is resealed inline");
  const env = answer.envelope;
  assert.equal(answer.text, JSON.stringify({ envelope: env }), "the core's fetch answer is JSON.stringify's");
  assert.equal(env.recipientKeyId, dev.keyId(fx.device.identityPublic));
  assert.equal(env.deadlineAt, T0 + 86_400_000);
  const opened = dev.open({
    envelope: env,
    recipientKeys: fx.device,
    senderIdentityPublic: fx.site.identityPublic,
    expected: { jobId, senderKeyId: ring.keyId, recipientKeyId: env.recipientKeyId, direction: "payload" },
  });
  assert.deepEqual(opened, { ok: true, plaintext: '{"prompt":"hi"}' });
  // An at-rest envelope for another job does not open: null, not a throw.
  assert.equal(ring.resealForDevice(atRest, "other-job", T0, device), null);

});

test("SiteKeyring.acceptResult: the outcome and the site's provenance, or the reference's refusal", async () => {
  const ring = new native.SiteKeyring(fx.site);
  const jobId = "job-accept";
  const device = fx.device.identityPublic;
  const source = { audience: "team", runnerId: "r1", runnerOwner: "bob" };
  const sealOutcome = (plaintext) =>
    dev.seal({
      plaintext,
      senderKeys: fx.device,
      recipientEncryptionPublic: fx.site.encryptionPublic,
      context: { jobId, senderKeyId: dev.keyId(device), recipientKeyId: ring.keyId, deadlineAt: T0 + 5, direction: "result" },
    });
  // The sealed outcome, and the site's provenance (pinned by provenance.json in rules.test.mjs).
  const composed = (text) => {
    const { outcome, ran } = JSON.parse(text);
    // zod's url() reads the URL trimmed, as rules-parity.test.mjs holds it to.
    if (outcome.artifactUrl !== undefined) outcome.artifactUrl = outcome.artifactUrl.trim();
    const { backendClass, model, stop, stopReported } = ran;
    const provenance = { ...source, backendClass, model, untrusted: source.audience !== "private" };
    if (stop !== undefined) provenance.stop = stop;
    if (stopReported !== undefined) provenance.stopReported = stopReported;
    return { outcome, provenance };
  };
  const ran = { model: "m", backendClass: "http", durationMs: 3, stop: "end", stopReported: true };
  const big = "x".repeat(70_000);
  for (const text of [
    JSON.stringify({ outcome: { outcome: "ok", text: "done é \"x\"" }, ran }),
    JSON.stringify({ ran: { model: "m", backendClass: "process", durationMs: 3 }, outcome: { outcome: "ok", text: "t" } }),
    JSON.stringify({ outcome: { outcome: "ok", text: "t", artifactUrl: " https://x.test/a\n" }, ran }),
    // Opened on the thread pool; its URL is checked back on the main thread.
    JSON.stringify({ outcome: { outcome: "ok", text: big, artifactUrl: " https://x.test/a\n" }, ran }),
    JSON.stringify({ outcome: { outcome: "ok", text: big }, ran }),
  ]) {
    const answer = await ring.acceptResult(sealOutcome(text), jobId, device, "ok", source);
    assert.equal(answer.ok, true, text.slice(0, 80));
    assert.equal(answer.accepted, JSON.stringify(composed(text)));
  }
  const refused = async (envelope, disposition, why, id = jobId, identity = device) =>
    assert.deepEqual({ ...(await ring.acceptResult(envelope, id, identity, disposition, source)) }, { ok: false, why });
  const plain = sealOutcome(JSON.stringify({ outcome: { outcome: "ok", text: "t" }, ran }));
  await refused(plain, "error", "the declared disposition is not the one that was sealed");
  await refused(plain, 5, "the declared disposition is not the one that was sealed");
  await refused(plain, "ok", "the result did not verify as coming from this device", "other");
  await refused(plain, "ok", "the result did not verify as coming from this device", jobId, fx.stranger.identityPublic);
  // Values a relay sent that are not even strings are refused, not thrown.
  await refused({ ...plain, ciphertext: 7 }, "ok", "the result did not verify as coming from this device");
  await refused(plain, "ok", "the result did not verify as coming from this device", 7);
  await refused(sealOutcome("{"), "ok", "the sealed result was not valid JSON");
  for (const text of ["null", "x".repeat(70_000)]) await refused(sealOutcome(text), "ok", text === "null" ? "the sealed result was not an outcome" : "the sealed result was not valid JSON");
  const badUrl = JSON.stringify({ outcome: { outcome: "ok", text: big, artifactUrl: "not a url" }, ran });
  await refused(sealOutcome(badUrl), "ok", "the sealed result was not an outcome");
});

test("SiteKeyring: malformed keys throw clear errors; inconsistent keys construct", () => {
  assert.throws(() => new native.SiteKeyring({ ...fx.site, identityPrivate: "nope" }), /identityPrivate is not a base64 PKCS#8 Ed25519 private key/);
  assert.throws(() => new native.SiteKeyring({ ...fx.site, encryptionPrivate: fx.site.identityPrivate }), /encryptionPrivate/);
  assert.throws(() => new native.SiteKeyring({ ...fx.site, version: 2 }), /version must be 1/);
  assert.throws(() => new native.SiteKeyring({ ...fx.site, createdAt: 1.5 }), /createdAt/);
  assert.throws(() => new native.SiteKeyring({ ...fx.site, identityPublic: undefined }));
  assert.ok(new native.SiteKeyring({ ...fx.site, encryptionPublic: fx.device.encryptionPublic }));
});

test("large payloads go through the thread pool", async () => {
  const ring = new native.SiteKeyring(fx.site);
  const big = JSON.stringify({ prompt: "x".repeat(999_000) + "🙂" });
  const sealing = ring.sealChecked("llm.generate", big, undefined, undefined, "job", T0);
  assert.ok(sealing instanceof Promise);
  const { envelope: env } = await sealing;
  const resealing = ring.resealForDevice(env, "job", T0, deviceKeys.publicIdentityOf(fx.device));
  assert.ok(resealing instanceof Promise);
  const { envelope: toDevice, text } = await resealing;
  assert.equal(text, JSON.stringify({ envelope: toDevice }));
  const opened = dev.open({
    envelope: toDevice,
    recipientKeys: fx.device,
    senderIdentityPublic: fx.site.identityPublic,
    expected: { jobId: "job", senderKeyId: ring.keyId, recipientKeyId: dev.keyId(fx.device.identityPublic), direction: "payload" },
  });
  assert.equal(opened.ok, true);
  assert.equal(opened.plaintext.length, big.length);
  assert.equal(opened.plaintext, big);
});

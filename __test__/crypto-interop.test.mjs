// Randomised interop against the real @byollm/protocol@0.1.1 (Node 22): its
// envelopes open with us and ours with it, request signatures verify both
// ways, keys load both ways, and tampered variants fail with the same reason
// in both. "Us" is what ships: the addon's SiteKeyring (a site's seals, a
// result accepted) and the edge package's seal, open and verifyRequest (the
// same core, built for WebAssembly). A seeded PRNG makes every run the same;
// set BYOLLM_SEED to explore.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as ref from "@byollm/protocol";
import * as edge from "../edge/index.js";
import * as native from "../index.js";

const SEED = Number(process.env.BYOLLM_SEED ?? 20260101);
const CASES = 1000;
const T0 = 1767225600000;

/** mulberry32: small, fast, good enough to pick test inputs. */
function prng(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (lo, hi) => lo + Math.floor(next() * (hi - lo + 1));
  const pick = (list) => list[int(0, list.length - 1)];
  return { next, int, pick };
}

/** A random JS string mixing ASCII, JSON-special and control characters,
 * U+2028/2029, BOM, BMP and astral characters, and (optionally) lone surrogates. */
function randomText(r, { lone = false, max = 200 } = {}) {
  const len = r.next() < 0.02 ? r.int(10_000, 60_000) : r.int(0, max);
  let out = "";
  while (out.length < len) {
    const kind = r.int(0, lone ? 9 : 8);
    switch (kind) {
      case 0:
      case 1:
      case 2:
        out += String.fromCharCode(r.int(0x20, 0x7e));
        break;
      case 3:
        out += r.pick(['"', "\\", "/", "\u2028", "\u2029", "\ufeff", "\u007f", "\ufffd"]);
        break;
      case 4:
        out += String.fromCharCode(r.int(0, 0x1f));
        break;
      case 5:
        out += String.fromCharCode(r.int(0xa0, 0xd7ff));
        break;
      case 6:
        out += String.fromCharCode(r.int(0xe000, 0xfffd));
        break;
      case 7:
      case 8:
        out += String.fromCodePoint(r.int(0x10000, 0x10ffff));
        break;
      default:
        out += String.fromCharCode(r.int(0xd800, 0xdfff));
    }
  }
  return out;
}

function keyPool(make, n) {
  return Array.from({ length: n }, (_, i) => make(T0 + i));
}

const refKeys = keyPool((t) => ref.generateKeys(t), 6);
const ourKeys = keyPool((t) => native.generateKeys(t), 6);
const everyone = [...refKeys, ...ourKeys];

function randomContext(r, sender, recipient, direction) {
  return {
    jobId: r.next() < 0.8 ? native.generateJobId() : randomText(r, { max: 40 }),
    senderKeyId: ref.keyId(sender.identityPublic),
    recipientKeyId: ref.keyId(recipient.identityPublic),
    deadlineAt: T0 + r.int(0, 10 * 86_400_000),
    direction: direction ?? r.pick(["payload", "result"]),
  };
}

const expectedOf = ({ deadlineAt, ...rest }) => rest;

const refOpen = (envelope, recipientKeys, senderIdentityPublic, expected) =>
  ref.open({ envelope, recipientKeys, senderIdentityPublic, expected });
const ourOpen = (envelope, recipientKeys, senderIdentityPublic, expected) =>
  edge.open({ envelope, recipientKeys, senderIdentityPublic, expected });

test(`keys load both ways (${CASES} each)`, () => {
  for (let i = 0; i < CASES; i++) {
    const theirs = ref.generateKeys(T0 + i);
    const ring = new native.SiteKeyring(theirs);
    assert.equal(ring.keyId, ref.keyId(theirs.identityPublic));

    const ours = native.generateKeys(T0 + i);
    assert.equal(ref.StoredKeys.safeParse(ours).success, true);
    assert.equal(ref.verifyPublicIdentity(ref.publicIdentityOf(ours)), true);
    assert.equal(ref.keyId(ours.identityPublic), new native.SiteKeyring(ours).keyId);
    assert.deepEqual(Object.keys(ours), Object.keys(theirs));
  }
});

test(`reference seals → we open (${CASES}, lone surrogates included)`, async () => {
  const r = prng(SEED);
  for (let i = 0; i < CASES; i++) {
    const sender = r.pick(everyone);
    const recipient = r.pick(everyone);
    const plaintext = randomText(r, { lone: true });
    const context = randomContext(r, sender, recipient);
    const envelope = await ref.seal({ plaintext, senderKeys: sender, recipientEncryptionPublic: recipient.encryptionPublic, context });
    const got = await ourOpen(envelope, recipient, sender.identityPublic, expectedOf(context));
    assert.equal(got.ok, true, `case ${i}`);
    // Exact, lone surrogates and all (they travel as \udxxx escapes).
    assert.equal(got.plaintext, plaintext, `case ${i}`);
  }
});

test(`we seal → reference opens (${CASES})`, async () => {
  const r = prng(SEED + 1);
  for (let i = 0; i < CASES; i++) {
    const sender = r.pick(everyone);
    const recipient = r.pick(everyone);
    // Lone surrogates travel to the core as \udxxx escapes and are sealed as such.
    const plaintext = randomText(r, { lone: r.next() < 0.1 });
    const context = randomContext(r, sender, recipient);
    const envelope = await edge.seal({ plaintext, senderKeys: sender, recipientEncryptionPublic: recipient.encryptionPublic, context });
    assert.equal(ref.SealedEnvelope.safeParse(envelope).success, true);
    const got = await refOpen(envelope, recipient, sender.identityPublic, expectedOf(context));
    assert.deepEqual(got, { ok: true, plaintext }, `case ${i}`);
  }
});

test(`SiteKeyring reseal and result round trips against the reference (${CASES / 10})`, async () => {
  const r = prng(SEED + 2);
  for (let i = 0; i < CASES / 10; i++) {
    const site = r.pick(everyone);
    const device = r.pick(everyone);
    const ring = new native.SiteKeyring(site);
    const jobId = native.generateJobId();
    const createdAt = T0 + r.int(0, 1e9);
    const payload = randomText(r);
    // At rest sealed by the reference app's rule; resealed by us; opened by the "daemon" (reference).
    const atRest = await ref.seal({
      plaintext: payload,
      senderKeys: site,
      recipientEncryptionPublic: site.encryptionPublic,
      context: { jobId, senderKeyId: ring.keyId, recipientKeyId: ring.keyId, deadlineAt: createdAt + 86_400_000, direction: "payload" },
    });
    const { envelope: toDevice } = await ring.resealForDevice(atRest, jobId, createdAt, ref.publicIdentityOf(device));
    const opened = await refOpen(toDevice, device, site.identityPublic, {
      jobId,
      senderKeyId: ring.keyId,
      recipientKeyId: ref.keyId(device.identityPublic),
      direction: "payload",
    });
    assert.deepEqual(opened, { ok: true, plaintext: payload });
    // The device's result, sealed by the reference, opened and accepted by the core with the site's keys.
    const text = randomText(r, { lone: true });
    const result = await ref.seal({
      plaintext: JSON.stringify({ outcome: { outcome: "ok", text }, ran: { model: "m", backendClass: "http", durationMs: 1 } }),
      senderKeys: device,
      recipientEncryptionPublic: site.encryptionPublic,
      context: { jobId, senderKeyId: ref.keyId(device.identityPublic), recipientKeyId: ring.keyId, deadlineAt: T0, direction: "result" },
    });
    const got = await ring.acceptResult(result, jobId, device.identityPublic, "ok", { audience: "team", runnerId: "r1", runnerOwner: "bob" });
    assert.equal(got.ok, true);
    assert.equal(JSON.parse(got.accepted).outcome.text, text);
  }
});

/** Ways to spoil an envelope or the opening parameters. */
const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
const tamperings = [
  ["flip a ciphertext character", (r, t) => {
    const at = r.int(0, t.envelope.ciphertext.length - 1);
    const c = t.envelope.ciphertext[at];
    const replacement = B64[(B64.indexOf(c) + r.int(1, 63)) % 64];
    t.envelope.ciphertext = t.envelope.ciphertext.slice(0, at) + replacement + t.envelope.ciphertext.slice(at + 1);
  }],
  ["truncate the ciphertext", (r, t) => {
    t.envelope.ciphertext = t.envelope.ciphertext.slice(0, r.int(0, t.envelope.ciphertext.length - 1));
  }],
  ["insert junk / padding", (r, t) => {
    const at = r.int(0, t.envelope.ciphertext.length);
    const junk = r.pick(["!", " ", "\n", "==", "é", "=x"]);
    t.envelope.ciphertext = t.envelope.ciphertext.slice(0, at) + junk + t.envelope.ciphertext.slice(at);
  }],
  ["standard alphabet", (_r, t) => {
    t.envelope.ciphertext = t.envelope.ciphertext.replaceAll("-", "+").replaceAll("_", "/");
  }],
  ["deadline changed", (r, t) => {
    t.envelope.deadlineAt += r.pick([1, -1, 1000]);
  }],
  ["expected jobId changed", (_r, t) => {
    t.expected.jobId += "x";
  }],
  ["envelope direction flipped", (_r, t) => {
    t.envelope.direction = t.envelope.direction === "payload" ? "result" : "payload";
  }],
  ["both directions flipped", (_r, t) => {
    t.envelope.direction = t.envelope.direction === "payload" ? "result" : "payload";
    t.expected.direction = t.envelope.direction;
  }],
  ["wrong sender identity", (r, t) => {
    t.sender = r.pick(everyone).identityPublic;
  }],
  ["wrong recipient keys", (r, t) => {
    t.recipient = r.pick(everyone);
  }],
  ["key ids rewritten consistently", (r, t) => {
    const other = ref.keyId(r.pick(everyone).identityPublic);
    t.envelope.senderKeyId = other;
    t.expected.senderKeyId = other;
  }],
];

test(`tampered envelopes fail with the same reason in both (${CASES})`, async () => {
  const r = prng(SEED + 3);
  const reasons = new Map();
  for (let i = 0; i < CASES; i++) {
    const sender = r.pick(everyone);
    const recipient = r.pick(everyone);
    const context = randomContext(r, sender, recipient);
    const plaintext = randomText(r, { max: 60 });
    const envelope = r.next() < 0.5
      ? await ref.seal({ plaintext, senderKeys: sender, recipientEncryptionPublic: recipient.encryptionPublic, context })
      : await edge.seal({ plaintext, senderKeys: sender, recipientEncryptionPublic: recipient.encryptionPublic, context });
    const t = { envelope: { ...envelope }, expected: expectedOf(context), sender: sender.identityPublic, recipient };
    const [name, spoil] = r.pick(tamperings);
    spoil(r, t);
    if (r.next() < 0.2) r.pick(tamperings)[1](r, t);
    const theirs = await refOpen(t.envelope, t.recipient, t.sender, t.expected);
    const ours = await ourOpen(t.envelope, t.recipient, t.sender, t.expected);
    assert.deepEqual(ours, theirs, `case ${i}: ${name}`);
    const key = theirs.ok ? "ok" : theirs.reason;
    reasons.set(key, (reasons.get(key) ?? 0) + 1);
  }
  // The cases must actually exercise every reason (and some still opening).
  for (const reason of ["ok", "not-for-us", "unopenable", "bad-signature", "context-mismatch"]) {
    assert.ok((reasons.get(reason) ?? 0) > 10, `too few ${reason}: ${JSON.stringify([...reasons])}`);
  }
});

const ENDPOINTS = ["pair", "claim", "fetch", "heartbeat", "result", "release", "site/enqueue"];

function randomRequest(r) {
  const issuedAt = r.next() < 0.9 ? T0 + r.int(0, 1e9) : r.pick([1.5, 2 ** 53 + 2, 1.5e21, 1e-7, 123456789.125]);
  return {
    endpoint: r.next() < 0.9 ? r.pick(ENDPOINTS) : randomText(r, { lone: true, max: 20 }),
    runnerId: r.next() < 0.8 ? native.generateRunnerId() : randomText(r, { lone: true, max: 30 }),
    issuedAt,
    body: randomText(r, { lone: true }),
  };
}

test(`request signatures verify both ways (${CASES} each), tampering agrees`, () => {
  const r = prng(SEED + 4);
  for (let i = 0; i < CASES; i++) {
    const keys = r.pick(everyone);
    const req = randomRequest(r);
    const theirs = ref.signRequest(keys, req);
    // Ed25519 is deterministic: the same bytes both ways (the site plane's signature is the one we make).
    const site = { endpoint: req.endpoint, siteId: req.runnerId, issuedAt: req.issuedAt, body: req.body };
    const ours = new native.SiteKeyring(keys).signSiteRequest(site.endpoint, site.siteId, site.issuedAt, site.body);
    assert.equal(ours, ref.signSiteRequest(keys, site).signature, `case ${i}`);

    const now = req.issuedAt + r.pick([0, 1, -1, 120_000, -120_000, 120_001, -120_001, r.int(-200_000, 200_000)]);
    const args = { identityPublic: keys.identityPublic, endpoint: req.endpoint, body: req.body, signature: theirs, now };
    assert.equal(edge.verifyRequest(args), ref.verifyRequest(args), `case ${i}`);

    // Tamper one thing and compare the verdicts.
    const bad = { ...args, signature: { ...theirs } };
    const tamper = r.int(0, 5);
    switch (tamper) {
      case 0: bad.body += r.pick([" ", "x", "\ud800"]); break;
      case 1: bad.signature.runnerId += "x"; break;
      case 2: bad.signature.signature = bad.signature.signature.slice(0, -1); break;
      case 3: bad.signature.signature += r.pick(["==", "!", " "]); break;
      case 4: bad.identityPublic = r.pick(everyone).identityPublic; break;
      default: bad.endpoint = r.pick(ENDPOINTS); break;
    }
    const refVerdict = ref.verifyRequest(bad);
    // Deliberate difference (docs/security.md): junk after a valid signature
    // still verifies in the reference; only the canonical spelling does here.
    const expected = tamper === 3 && refVerdict === null ? "bad-signature" : refVerdict;
    assert.equal(edge.verifyRequest(bad), expected, `tampered case ${i}`);
  }
});

// Every runtime export of the reference's `.` and `./next` entries exists in
// ours with the same kind, compared programmatically against the reference
// modules themselves.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as referenceMain from "@byollm/server";
import * as referenceNext from "@byollm/server/next";
import * as ourMain from "../dist/index.js";
import * as ourNext from "../dist/next.js";

/** class / function / the primitive type / object. */
function kindOf(value) {
  if (typeof value === "function") {
    const source = Function.prototype.toString.call(value);
    if (/^class[\s{]/.test(source)) return "class";
    // A native (napi) class prints as `function X() { [native code] }`; it is
    // a class to its users if it has methods on its prototype.
    if (/\[native code\]/.test(source) && Object.getOwnPropertyNames(value.prototype ?? {}).length > 1) return "class";
    return "function";
  }
  if (value === null) return "null";
  return typeof value;
}

function surface(module) {
  return Object.fromEntries(Object.keys(module).sort().map((name) => [name, kindOf(module[name])]));
}

test("entry `.`: the same 24 runtime exports with the same kinds", () => {
  const reference = surface(referenceMain);
  assert.equal(Object.keys(reference).length, 24);
  assert.deepEqual(surface(ourMain), reference);
});

test("entry `./next`: the same runtime exports with the same kinds", () => {
  assert.deepEqual(surface(ourNext), surface(referenceNext));
  assert.deepEqual(Object.keys(ourNext), ["createHandler"]);
});

test("constants and error classes carry the reference's values and names", () => {
  assert.equal(ourMain.SERVED_PROTOCOL_VERSION, referenceMain.SERVED_PROTOCOL_VERSION);
  for (const [name, args] of [
    ["NoRunnerAvailableError", ["job-1", "no-runner-online"]],
    ["ResultTimeoutError", ["job-1", 1234]],
    ["RelayUnavailable", ["pending: refused — nope", false, "unauthorized"]],
    ["EnqueueRefused", ["no", "slot-waiting"]],
  ]) {
    const ours = new ourMain[name](...args);
    const theirs = new referenceMain[name](...args);
    assert.ok(ours instanceof Error, name);
    assert.equal(ours.name, theirs.name, name);
    assert.equal(ours.message, theirs.message, name);
    assert.deepEqual({ ...ours }, { ...theirs }, `${name} own fields`);
  }
});

test("pure helpers agree with the reference", () => {
  for (const input of ["abcd-efgh", "ab cd ef gh", "ß", "x", "ﬁ1234567", ""]) {
    assert.equal(ourMain.normalizeUserCode(input), referenceMain.normalizeUserCode(input), input);
  }
  for (const input of ["", "abc", "héllo 🙂"]) {
    assert.equal(ourMain.hashSecret(input), referenceMain.hashSecret(input));
  }
  for (const [a, b] of [["abc", "abd"], ["zz", "yy"], ["ab", "ab"], ["ab", "ac"], ["ab", "abc"]]) {
    assert.equal(ourMain.secretsMatch(a, b), referenceMain.secretsMatch(a, b), `${a} ${b}`);
  }
  assert.throws(() => ourMain.secretsMatch("zz", "ab"), RangeError);
  assert.throws(() => referenceMain.secretsMatch("zz", "ab"), RangeError);
  const caps = [
    { kind: "llm.chat", model: "a" },
    { kind: "llm.generate", model: "b" },
    { kind: "llm.generate", model: "c" },
  ];
  assert.equal(ourMain.capabilityFor(caps, "llm.generate"), caps[1]);
  assert.equal(ourMain.capabilityFor(caps, "llm.embed"), undefined);
  assert.match(ourMain.generateDeviceCode(), /^[A-Za-z0-9_-]{43}$/);
  assert.match(ourMain.generateRunnerId(), /^runner_[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  assert.match(ourMain.generateJobId(), /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  assert.match(ourMain.generateUserCode(), /^[ABCDEFGHJKMNPQRTWXYZ2346789]{4}-[ABCDEFGHJKMNPQRTWXYZ2346789]{4}$/);
});

test("site keys: generated keys round-trip through formatSiteKeys/siteKeysFromEnv, and the reference reads ours", () => {
  const keys = ourMain.generateSiteKeys(1767225600000);
  assert.equal(keys.createdAt, 1767225600000);
  assert.deepEqual(Object.keys(keys), [
    "version",
    "identityPublic",
    "identityPrivate",
    "encryptionPublic",
    "encryptionPrivate",
    "encryptionSig",
    "createdAt",
  ]);
  const text = ourMain.formatSiteKeys(keys);
  assert.equal(text, referenceMain.formatSiteKeys(keys));
  const line = text.split("\n").find((l) => l.startsWith("BYOLLM_SITE_KEYS="));
  const env = { BYOLLM_SITE_KEYS: line.slice("BYOLLM_SITE_KEYS=".length) };
  assert.deepEqual(ourMain.siteKeysFromEnv("BYOLLM_SITE_KEYS", env), keys);
  assert.deepEqual(referenceMain.siteKeysFromEnv("BYOLLM_SITE_KEYS", env), keys);
  for (const bad of [{}, { BYOLLM_SITE_KEYS: "" }, { BYOLLM_SITE_KEYS: "!!!" }, { BYOLLM_SITE_KEYS: "e30=" }]) {
    let theirs;
    try {
      referenceMain.siteKeysFromEnv("BYOLLM_SITE_KEYS", bad);
    } catch (error) {
      theirs = error.message;
    }
    assert.throws(() => ourMain.siteKeysFromEnv("BYOLLM_SITE_KEYS", bad), (error) => error.message === theirs);
  }
});

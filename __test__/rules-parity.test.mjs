// Parity of the native protocol rules with @byollm/protocol@0.1.1 itself:
// the same accept/reject decision and the same parsed body for every request
// endpoint over generated bodies, the same provenance, and the same
// enqueue payload verdicts and error messages. Inputs come from a seeded PRNG
// so a failure reproduces; the seed and the offending input are printed.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as native from "../index.js";
import { inspect, keptRan, payloadVerdict, provenance, sealedOutcome } from "./helpers/inspect.mjs";
import {
  PairRequest,
  ClaimRequest,
  FetchRequest,
  HeartbeatRequest,
  ResultRequest,
  ReleaseRequest,
  SealedOutcome,
  KindedPayload,
  checkProtocolVersion,
  provenanceFor,
  payloadTextLength,
  sizeClassOf,
  BACKENDS,
} from "@byollm/protocol";
import { DUP, RAW, dupKey, prng, raw, toText } from "./helpers/raw-json.mjs";

const SEED = Number(process.env.RULES_SEED ?? 20261130);
const PER_ENDPOINT = Number(process.env.RULES_PER_ENDPOINT ?? 10_000);

// ---------------------------------------------------------------- raw JSON

// ---------------------------------------------------------------- generators
function makeGen(rand) {
  const int = (n) => Math.floor(rand() * n);
  const pick = (xs) => xs[int(xs.length)];
  const chance = (p) => rand() < p;
  const ALPH = ["a", "b", "Z", "0", "-", "_", " ", "é", "🙂", "\u2028", "\\", '"', "\n", "\u0000"];
  const str = (min = 1, max = 12) => {
    const n = min + int(max - min + 1);
    let s = "";
    for (let i = 0; i < n; i++) s += pick(ALPH);
    return s;
  };
  const backendIds = Object.keys(BACKENDS);
  const capability = () => {
    const c = {
      kind: pick(["llm.generate", "llm.chat"]),
      service: str(),
      backendId: pick(backendIds),
      backendClass: pick(["http", "process"]),
      model: str(),
    };
    if (chance(0.4)) c.knownModels = Array.from({ length: int(3) }, () => str());
    c.offerScope = pick(["private", "team"]);
    return c;
  };
  const grant = () => ({ jobId: str(), leaseId: str() });
  const identity = () => ({ identity: str(1, 43), encryption: str(1, 43), encryptionSig: str(1, 86) });
  const envelope = () => ({
    ciphertext: str(1, 40),
    recipientKeyId: str(),
    senderKeyId: str(),
    direction: pick(["payload", "result"]),
    deadlineAt: 1 + int(2 ** 40),
  });
  const valid = {
    pair: () =>
      chance(0.5)
        ? {
            protocolVersion: "2",
            action: "start",
            daemon: { version: str(), label: str(1, 120), platform: pick(["darwin", "linux", "win32"]) },
            device: identity(),
            capabilities: Array.from({ length: int(3) }, capability),
          }
        : { protocolVersion: "2", action: "poll", deviceCode: str(20, 50) },
    claim: () => ({
      protocolVersion: "2",
      runnerId: str(),
      capabilities: Array.from({ length: int(3) }, capability),
      max: 1 + int(64),
    }),
    fetch: () => ({ protocolVersion: "2", runnerId: str(), jobId: str(), leaseId: str() }),
    heartbeat: () => {
      const b = { protocolVersion: "2", runnerId: str(), daemonVersion: str(), capabilities: Array.from({ length: int(3) }, capability) };
      if (chance(0.5))
        b.withheld = Array.from({ length: int(2) }, () => ({
          kind: pick(["llm.generate", "llm.chat"]),
          claimants: Array.from({ length: 2 + int(2) }, () => ({ service: str(), offer: pick(["private", "team"]) })),
        }));
      b.activeLeases = Array.from({ length: int(3) }, grant);
      return b;
    },
    result: () => ({
      protocolVersion: "2",
      runnerId: str(),
      jobId: str(),
      leaseId: str(),
      envelope: envelope(),
      disposition: pick(["ok", "error", "canceled"]),
    }),
    release: () => ({
      protocolVersion: "2",
      runnerId: str(),
      leases: Array.from({ length: int(3) }, grant),
      reason: pick(["shutdown", "pause", "revoked", "backend-down", "refused"]),
    }),
  };

  const junk = () =>
    pick([
      null,
      true,
      0,
      -1,
      raw("-0"),
      raw("1e400"),
      raw("-1e400"),
      raw("5.0"),
      "",
      "x",
      "\ud800",
      raw('"\\ud800"'),
      raw('"\\udc00x\\ud83d"'),
      [],
      [1, [2, [3]]],
      {},
      { length: int(300) },
      { length: "7" },
      { length: [] },
      { length: null },
      { a: { b: { c: [] } } },
      raw("[".repeat(500) + "]".repeat(500)),
      "🙂".repeat(int(3)),
    ]);
  const numberSpelling = (n) => pick([raw(`${n}.0`), raw(`${n}e0`), raw(`${n * 10}e-1`), raw(`${n}.000`), n]);

  // Every path to a value inside `v`, for mutations.
  const paths = (v, at = []) => {
    const out = [at];
    if (Array.isArray(v)) v.forEach((x, i) => out.push(...paths(x, [...at, i])));
    else if (v && typeof v === "object" && !(RAW in v) && !(DUP in v))
      for (const k of Object.keys(v)) out.push(...paths(v[k], [...at, k]));
    return out;
  };
  const getAt = (v, p) => p.reduce((o, k) => o[k], v);
  const setAt = (v, p, x) => {
    if (p.length === 0) return x;
    getAt(v, p.slice(0, -1))[p[p.length - 1]] = x;
    return v;
  };

  const mutate = (body) => {
    const ps = paths(body);
    const p = pick(ps);
    const target = getAt(body, p);
    switch (int(14)) {
      case 0: // extra key somewhere
        if (target && typeof target === "object" && !Array.isArray(target) && !(RAW in target))
          target[pick(["x", "__proto__", "0", "constructor", "protocolversion", "length"])] = junk();
        return body;
      case 1: // drop a key
        if (p.length) {
          const parent = getAt(body, p.slice(0, -1));
          if (Array.isArray(parent)) parent.splice(p[p.length - 1], 1);
          else delete parent[p[p.length - 1]];
        }
        return body;
      case 2: // wrong type / junk
        return setAt(body, p, junk());
      case 3: // null for an optional or required key
        return setAt(body, p, null);
      case 4: // boundary-length strings, astral counted as one code point by zod
        if (typeof target === "string") {
          const n = pick([0, 1, 19, 20, 21, 119, 120, 121]);
          const unit = pick(["a", "🙂", "\ud800"]);
          return setAt(body, p, unit.repeat(n));
        }
        return setAt(body, p, pick(["", "a".repeat(20), "🙂".repeat(60), "🙂".repeat(61), "x".repeat(121)]));
      case 5: // odd number spellings
        if (typeof target === "number") return setAt(body, p, numberSpelling(target));
        return setAt(body, p, pick([raw("64"), raw("65"), raw("0"), raw("-0"), raw("1.5"), raw("9007199254740993"), raw("1e400")]));
      case 6: // duplicate key: valid then invalid, or the reverse
        if (p.length && typeof p[p.length - 1] === "string") {
          const parent = getAt(body, p.slice(0, -1));
          const k = p[p.length - 1];
          parent[k] = chance(0.5) ? dupKey(junk(), parent[k]) : dupKey(parent[k], junk());
        }
        return body;
      case 7: // the protocol version
        if (!body || typeof body !== "object" || Array.isArray(body) || RAW in body) return body;
        body.protocolVersion = pick(["1", "10", "3", "", 2, null, "2 ", "v2", "\ud800", raw('"\\ud800"'), undefined, "2"]);
        return body;
      case 8: // a lone surrogate inside a string
        if (typeof target === "string") return setAt(body, p, raw(JSON.stringify(target).slice(0, -1) + '\\udbff"'));
        return body;
      case 9: // array length boundaries
        if (Array.isArray(target) && target.length) {
          while (target.length < 2 + int(3)) target.push(structuredClone(target[0]));
        }
        return body;
      case 10: // not an object at all
        return pick([[], "2", 5, null, [body]]);
      case 11: // enums in another case / neighbouring values
        if (typeof target === "string") return setAt(body, p, pick([target.toUpperCase(), target + " ", "openai-http", "ollama ", "team", "Team", "start", "poll"]));
        return body;
      case 12: // withheld with too few claimants / empty arrays
        if (Array.isArray(target)) return setAt(body, p, chance(0.5) ? [] : [target[0]]);
        return body;
      default: // several at once
        return mutate(mutate(body));
    }
  };
  return { valid, mutate, int, pick, chance, str, junk };
}

const SCHEMAS = {
  pair: PairRequest,
  claim: ClaimRequest,
  fetch: FetchRequest,
  heartbeat: HeartbeatRequest,
  result: ResultRequest,
  release: ReleaseRequest,
};

/** What the reference's HTTP layer plus handler decide for a raw body. */
function reference(endpoint, text) {
  let body;
  try {
    body = JSON.parse(text);
  } catch {
    return { stage: "json" };
  }
  const refusal = checkProtocolVersion(body);
  if (refusal) return { stage: "version", error: refusal };
  const parsed = SCHEMAS[endpoint].safeParse(body);
  if (parsed.success && endpoint === "pair" && parsed.data.action === "start" && overPairStartBounds(parsed.data)) {
    return { stage: "schema" };
  }
  return parsed.success ? { stage: "ok", body: parsed.data } : { stage: "schema" };
}

/**
 * Where we are stricter on purpose (docs/differences.md, docs/security.md):
 * a pair start is kept, so ours bounds it; the reference accepts any size.
 */
function overPairStartBounds(start) {
  const chars = (text) => [...text].length;
  return (
    chars(start.daemon.version) > 64 ||
    ["identity", "encryption", "encryptionSig"].some((key) => chars(start.device[key]) > 128) ||
    start.capabilities.length > 32 ||
    Buffer.byteLength(JSON.stringify(start)) > 8192
  );
}

/** Whether a JSON text's arrays and objects nest deeper than `limit` (brackets inside strings skipped). */
function nestsDeeperThan(text, limit) {
  let depth = 0;
  let inString = false;
  for (let at = 0; at < text.length; at += 1) {
    const c = text[at];
    if (inString) {
      if (c === "\\") at += 1;
      else if (c === '"') inString = false;
    } else if (c === '"') inString = true;
    else if (c === "[" || c === "{") {
      depth += 1;
      if (depth > limit) return true;
    } else if (c === "]" || c === "}") depth -= 1;
  }
  return false;
}

for (const endpoint of Object.keys(SCHEMAS)) {
  test(`inspectRequest(${endpoint}) decides like JSON.parse + checkProtocolVersion + zod over ${PER_ENDPOINT} bodies`, () => {
    const rand = prng(SEED ^ endpoint.length * 7919 ^ endpoint.charCodeAt(0));
    const g = makeGen(rand);
    const stages = { ok: 0, json: 0, version: 0, schema: 0 };
    for (let i = 0; i < PER_ENDPOINT; i++) {
      let body = g.valid[endpoint]();
      if (i % 4 !== 0) body = g.mutate(body);
      let text = toText(body);
      if (i % 97 === 0) text = text.slice(0, g.int(text.length)); // truncated JSON
      // Nested deeper than 64 levels: ours refuses it as JSON (a deliberate
      // difference, docs/security.md), whatever the reference then says.
      const theirs = nestsDeeperThan(text, 64) ? { stage: "json" } : reference(endpoint, text);
      const ours = inspect(endpoint, text);
      const where = `seed ${SEED} #${i}: ${text.slice(0, 400)}`;
      // A list or text over one of our bounds is a schema refusal naming the
      // field and the bound (deliberate differences, docs/security.md).
      if (theirs.stage === "ok" && ours.stage === "schema" && /and the limit is \d+$/.test(ours.error.message)) continue;
      assert.equal(ours.stage, theirs.stage, where);
      stages[ours.stage]++;
      if (theirs.stage === "version") {
        assert.deepEqual(ours.error, { ...theirs.error, supported: [...theirs.error.supported] }, where);
        assert.equal(ours.status, 400);
      }
      if (theirs.stage === "ok") {
        assert.deepStrictEqual(ours.body, theirs.body, where);
        assert.equal(JSON.stringify(ours.body), JSON.stringify(theirs.body), `key order, ${where}`);
      }
    }
    // The generator must exercise every stage, or the comparison proves little.
    for (const [stage, n] of Object.entries(stages)) assert.ok(n > PER_ENDPOINT / 100, `${endpoint}: only ${n} bodies reached stage ${stage}`);
  });
}

test("a sealed outcome is accepted, rejected and rewritten like SealedOutcome.safeParse", async () => {
  const rand = prng(SEED + 1);
  const g = makeGen(rand);
  const urls = ["https://a.example/x", " https://a.example/x\n", "http:example.com", "not a url", "mailto:x@y", "https://exa\tmple.com/", "https://[::1]/", "file:///etc", "", "https://", "\u00a0http://a/\u3000"];
  let accepted = 0;
  for (let i = 0; i < 5_000; i++) {
    const outcome = g.pick([
      () => ({ outcome: "ok", text: g.str(0, 5), ...(g.chance(0.5) ? { artifactUrl: g.pick(urls) } : {}) }),
      () => ({ outcome: "error", code: g.str(), message: g.str(), retryable: g.chance(0.5) }),
      () => ({ outcome: "canceled" }),
    ])();
    const ran = { model: g.str(), backendClass: g.pick(["http", "process"]), durationMs: g.int(5000) };
    if (g.chance(0.3)) ran.stop = g.pick(["end", "length", "stop-sequence", "unknown"]);
    if (g.chance(0.3)) ran.stopReported = g.chance(0.5);
    let sealed = { outcome, ran };
    if (i % 3 === 0) sealed = g.mutate(sealed);
    const text = i % 101 === 0 ? "{nope" : toText(sealed);
    let theirs;
    try {
      const parsed = SealedOutcome.safeParse(JSON.parse(text));
      // The provenance's model is written as UTF-8: a lone surrogate in it reads back as U+FFFD.
      const ran = parsed.success && { ...parsed.data.ran, model: parsed.data.ran.model.toWellFormed() };
      theirs = parsed.success ? { ok: true, outcome: parsed.data.outcome, ran: keptRan(ran) } : { ok: false, message: "the sealed result was not an outcome" };
    } catch {
      theirs = { ok: false, message: "the sealed result was not valid JSON" };
    }
    // A device's plaintext nested deeper than 64 levels is not read (a deliberate difference).
    if (nestsDeeperThan(text, 64)) theirs = { ok: false, message: "the sealed result was not valid JSON" };
    const ours = await sealedOutcome(text);
    // The outcome is kept as JSON text (the store's record), as JSON.stringify writes it (-0 as 0).
    assert.deepStrictEqual(ours, JSON.parse(JSON.stringify(theirs)), `#${i}: ${text}`);
    if (ours.ok) accepted++;
  }
  assert.ok(accepted > 1000, `only ${accepted} outcomes accepted`);
});

test("inspectRequest's version refusals over odd versions and bodies match the reference's checkProtocolVersion", () => {
  const versions = ["2", "1", "10", "3", "", "2 ", " 2", "1.5", "v2", "\ud800", "\uffff", "!", "20", "02"];
  for (const v of versions) {
    for (const body of [{ protocolVersion: v }, [], 5, null, "2", { protocolVersion: 2 }, { protocolVersion: null }, {}]) {
      const text = JSON.stringify(body);
      const theirs = checkProtocolVersion(JSON.parse(text));
      const ours = inspect("claim", text);
      if (theirs) assert.deepEqual(ours, { stage: "version", status: 400, error: { ...theirs, supported: [...theirs.supported] } }, text);
      else assert.equal(ours.stage, "schema", text);
    }
  }
});

test("the provenance the site writes matches provenanceFor, including key order", async () => {
  const rand = prng(SEED + 3);
  const g = makeGen(rand);
  for (let i = 0; i < 2_000; i++) {
    const input = { audience: g.pick(["private", "team"]), runnerId: g.str(), runnerOwner: g.str(), backendClass: g.pick(["http", "process"]), model: g.str() };
    if (g.chance(0.5)) input.stop = g.pick(["end", "length", "stop-sequence", "unknown"]);
    if (g.chance(0.5)) input.stopReported = g.chance(0.5);
    const theirs = provenanceFor(input);
    const ours = await provenance(input);
    assert.equal(JSON.stringify(ours), JSON.stringify(theirs));
    assert.deepStrictEqual(ours, theirs);
  }
});

// ---------------------------------------------------------------- payloads
function referencePayload(kind, payload) {
  const parsed = KindedPayload.safeParse({ kind, payload });
  if (!parsed.success) {
    const detail = parsed.error.issues.map((issue) => `${issue.path.join(".") || "(root)"}: ${issue.message}`).join("; ");
    return { ok: false, message: `invalid ${kind} payload — ${detail}` };
  }
  return { ok: true, canonical: JSON.stringify(parsed.data.payload), sizeClass: sizeClassOf(payloadTextLength(parsed.data)) };
}

test("an enqueue's payload: verdicts, canonical text and zod's exact messages", async () => {
  const rand = prng(SEED + 4);
  const g = makeGen(rand);
  const text = () =>
    g.pick([
      () => g.str(0, 8),
      () => "a".repeat(g.pick([999_999, 1_000_000, 1_000_001])),
      () => "🙂".repeat(g.pick([999_999, 1_000_000, 1_000_001])),
      () => "\ud800".repeat(g.pick([1, 2])),
    ])();
  // Megabyte strings are what the limits are about, but they are slow to
  // build and compare; a few dozen cover every boundary.
  let bigLeft = 30;
  const bigText = () => (bigLeft > 0 && g.chance(0.02) ? (bigLeft--, text()) : g.str(0, 8));
  const messages = () =>
    Array.from({ length: g.pick([0, 1, 2, 3, 256, 257, 300]) }, () => ({ role: g.pick(["system", "user", "assistant"]), content: g.chance(0.001) ? text() : g.str(0, 4) }));
  let refusals = 0;
  for (let i = 0; i < 4_000; i++) {
    let kind = g.pick(["llm.generate", "llm.chat", "llm.generate", "llm.chat", "llm.embed", 5, undefined]);
    let payload =
      kind === "llm.chat" || (kind !== "llm.generate" && g.chance(0.5))
        ? { messages: messages(), ...(g.chance(0.5) ? { system: bigText() } : {}) }
        : { prompt: bigText(), ...(g.chance(0.5) ? { system: bigText() } : {}) };
    if (i % 2 === 1) payload = g.mutate(payload);
    if (g.chance(0.02)) payload = g.pick([undefined, null, "x", 5, []]);
    // Values the app hands over are JS values, so take the generator's
    // markers through JSON first; both sides then see the same value.
    const json = payload === undefined ? undefined : toText(payload);
    // (`1e400` becomes null here: the TS shell hands payloads over as
    // JSON.stringify text, see the deliberate difference below.)
    const value = json === undefined ? undefined : JSON.parse(JSON.stringify(JSON.parse(json)));
    const theirs = referencePayload(kind, value);
    const ours = await payloadVerdict(kind, value === undefined ? undefined : JSON.stringify(value));
    if (!theirs.ok) refusals++;
    // Deliberate difference: an enqueue refuses what, sealed, would exceed one envelope's limit (no runner could fetch it).
    if (theirs.ok && ours.message?.includes("so no runner could ever receive it")) continue;
    assert.deepStrictEqual(ours, theirs, `#${i} kind=${String(kind)} ${String(json).slice(0, 300)}`);
  }
  assert.ok(refusals > 500 && refusals < 3_800, `refusals ${refusals}`);
});

// ---------------------------------------------------------------- deliberate differences
test("deliberate difference: an unknown audience word is matched as private, an unknown scope word is refused", () => {
  // The reference's matcher silently skips its audience rules for a word it
  // does not know, admitting strangers; a stored job with such a word (an
  // older deployment's) is matched as `private` here, so it fails closed.
  const runner = (owner, offerScope) => ({
    id: "r", owner, revokedAt: null, lastHeartbeatAt: 1000,
    capabilities: [{ kind: "llm.chat", service: "s", backendId: "ollama", backendClass: "http", model: "m", offerScope }],
  });
  const ask = (runnerOwner, audience, offerScope = "team") =>
    native.runnerAvailability([runner(runnerOwner, offerScope)], { kind: "llm.chat", owner: "a", audience }, 1000, 35000);
  for (const audience of ["public", "Private", "", " team"]) {
    assert.equal(ask("b", audience).reason, "audience-admits-nobody", audience);
    assert.equal(ask("a", audience).available, true, audience);
  }
  assert.equal(ask("b", "team").available, true);
  assert.throws(() => ask("b", "team", "everyone"), /unknown offer scope/);
});

test("deliberate difference: an unregistered backendId reads as metered instead of throwing", () => {
  // The wire schemas refuse such ids, so only a hand-written store record can
  // carry one; the reference would throw a TypeError from inside the claim.
  const runner = {
    id: "r", owner: "b", revokedAt: null, lastHeartbeatAt: 1000,
    capabilities: [{ kind: "llm.chat", service: "s", backendId: "nope", backendClass: "http", model: "m", offerScope: "team" }],
  };
  const query = { kind: "llm.chat", owner: "a", audience: "team" };
  assert.deepEqual({ ...native.runnerAvailability([runner], query, 1000, 35000) }, { available: true, candidates: 1 });
});

test("deliberate difference: a lone surrogate inside an unknown key's name prints as U+FFFD in the enqueue message", async () => {
  // Messages cross into JavaScript as UTF-8; the verdict is the same.
  const payload = JSON.parse('{"prompt":"x","\\ud800":1}');
  const ours = await payloadVerdict("llm.generate", JSON.stringify(payload));
  const theirs = referencePayload("llm.generate", payload);
  assert.equal(ours.ok, false);
  assert.equal(theirs.ok, false);
  assert.equal(ours.message, theirs.message.replace("\ud800", "\ufffd"));
});

test("deliberate difference: payload values JSON cannot carry are seen as JSON.stringify leaves them", async () => {
  // The TS shell hands payloads to the core as JSON.stringify text, so an
  // Infinity prompt arrives as null (the reference names it "Infinity"); the
  // verdict, a refusal, is the same. Payloads are the app's own typed input.
  const ours = await payloadVerdict("llm.generate", JSON.stringify({ prompt: Infinity }));
  const theirs = referencePayload("llm.generate", { prompt: Infinity });
  assert.equal(ours.ok, false);
  assert.equal(theirs.ok, false);
  assert.equal(ours.message, theirs.message.replace("received Infinity", "received null"));
});

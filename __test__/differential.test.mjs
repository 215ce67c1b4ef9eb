// Differential adversarial suite: the reference @byollm/server@0.1.1 and ours
// side by side in one process (helpers/differential.mjs), each with its own
// store (the reference's MemoryStore; ours on DIFF_STORE's), app and fetch
// handler under one fake clock, driven by a
// simulated daemon that signs, seals and opens with @byollm/protocol. Every
// answer (status, error code, body) and every resulting job record is
// compared after ids are normalised. A difference passes only if it is in
// DELIBERATE (documented in docs/differences.md "Where this package differs from the reference, on
// purpose" or docs/security.md, with the line) or in OPEN_DIVERGENCES (found,
// not yet fixed: each is a bug to fix and then remove from the list). Any 5xx
// or rejected promise from ours, and any unhandled rejection, fails the suite.
//
// DIFF_STORE picks ours's store: memory (default), plain, postgres or
// supabase (differential-stores.test.mjs runs the last three). DIFF_SEED picks
// the seed of the mutation run (printed with each failure), DIFF_MUTATIONS its
// size (3,200 by default); DIFF_ALL=1 prints every divergence instead of the
// first 25.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import * as protocol from "@byollm/protocol";
import sodium from "libsodium-wrappers";
import * as H from "./helpers/differential.mjs";
import { DUP, RAW, prng, raw, toText } from "./helpers/raw-json.mjs";
import { closeStores, STORE } from "./helpers/diff-stores.mjs";
import { PROTOCOL } from "../dist/native.js";

// DIFF_STORE (helpers/diff-stores.mjs) names the store ours runs on; the
// reference always runs on its MemoryStore.
after(closeStores);

const { both, pair, claim, fetchJob, result, sealResult, jobState, appCall, observe, compareLogs, fatal, unhandledRejections } = H;

const wellFormed = (v) => JSON.stringify(v, (_, x) => (typeof x === "string" ? x.toWellFormed() : x));
const is = (status, error) => (v) => v.status === status && (error === undefined || v.body?.error === error);

/**
 * Differences we keep on purpose. `doc` (and `also`) quote the line of
 * docs/differences.md "Where this package differs from the reference, on purpose" or
 * docs/security.md that states it (checked below; the line numbers are
 * printed); `label` matches "<scenario> / <step>" (or a mutation's label);
 * `ref` and `ours(value, referenceValue)` check each side's normalised answer,
 * so an entry cannot hide a different divergence.
 */
const DELIBERATE = [
  {
    // Exactly the reference's value with each lone surrogate as U+FFFD.
    id: "a lone surrogate in a stored device string comes back as U+FFFD",
    doc: ["docs/differences.md", "A lone surrogate (`\"\\ud800\"`) in a string a device sends (a label, a version, a capability's model)"],
    label: /(runners after the variants|pair: start label lone surrogates|pendingPairing|approve|: runners|end: runners of \w+)$/,
    ours: (v, r) => wellFormed(v) === wellFormed(r) && JSON.stringify(v) !== JSON.stringify(r),
  },
  {
    id: "strict request signatures",
    doc: ["docs/differences.md", "A request signature with junk, padding or the other base64 alphabet does not verify."],
    also: ["docs/security.md", "a request signature (the `x-byollm-signature` header) must be exactly the unpadded base64url of 64 bytes"],
    label: /signature (padded|junk|standard alphabet|whitespace inside|stray trailing bits)|mutation .* signature/,
    // The reference's signature check passed, whatever it answered next.
    ref: (v) => v.status !== undefined && v.status !== 401,
    ours: (v) => v.status === 401 && v.body?.message === "this request's signature is not valid",
  },
  {
    id: "a box holding JSON null is a malformed result (400), not a rejected handler",
    doc: ["docs/differences.md", "`open` returns `malformed` for a sealed JSON `null` (the reference throws, and its `/result` then"],
    also: ["docs/security.md", "`open()` throws a `TypeError` when the inner text or signed body is JSON `null`"],
    label: /^sealed null \/ result whose box holds JSON null$/,
    ref: (v) => typeof v.rejects === "string",
    ours: (v) => v.status === 400 && v.body?.message === "the result did not verify as coming from this device",
  },
  {
    id: "/fetch compares the body's runnerId with the signer",
    doc: ["docs/differences.md", "`/fetch` checks that the body's runner is the signer (401 otherwise)"],
    also: ["docs/security.md", "`/fetch` does not compare the body's `runnerId` with the signer"],
    label: /fetch/,
    ref: (v) => v.status === 200 || v.status === 404,
    ours: (v) => v.status === 401 && v.body?.message === "runner id does not match the signing key",
  },
  {
    id: "a result on a lapsed lease is refused before any sweep",
    doc: ["docs/differences.md", "and a lease that has expired even before a sweep ran"],
    also: ["docs/security.md", "A result after lease expiry is accepted until a sweep runs"],
    label: /^lease edge: result (at expiry|1 ms after expiry|an hour after expiry) \/ |^mutation #\d+ result .*time jump (60000|60001|3660000)/,
    // (The lease is checked before the envelope is opened: a result on a
    // lapsed lease whose envelope does not verify is "not accepted" on ours,
    // 400 on the reference, which opens first.)
    ref: (v) => v.body?.accepted === true || v.state === "ok" || (v.status === 400 && v.body?.message === "the result did not verify as coming from this device"),
    ours: (v) => (v.status === 200 && v.body?.accepted === false && v.body.state === "claimed") || (v.state === "claimed" && v.outcome === null),
  },
  {
    // Matched as `private`: the other owner's team runner is no candidate, so
    // ours counts fewer candidates (or none) where the reference counts it.
    id: "an unknown audience already stored is matched as private (runnerAvailability)",
    doc: ["docs/differences.md", "A job already stored with such a spelling is matched as `private`"],
    also: ["docs/security.md", "is matched as `private` by the claim and by `runnerAvailability`"],
    label: /^runnerAvailability \/ availability .*"audience":"(Private||public|TEAM| team|team |everyone)"/,
    ref: (v) => v.value?.available === true,
    ours: (v, r) =>
      v.value !== undefined &&
      (v.value.candidates ?? 0) < r.value.candidates &&
      (v.value.available || v.value.reason === "audience-admits-nobody"),
  },
  {
    // The same rule at claim: another owner's team runner never gets a job
    // stored with an odd audience; its owner's runner does, and the result
    // is recorded as untrusted.
    id: "an unknown audience already stored is matched as private (claim) and completes untrusted",
    doc: ["docs/differences.md", "A job already stored with such a spelling is matched as `private` and completes as `untrusted`."],
    also: ["docs/security.md", "completes with provenance echoing the stored word, `untrusted: true`"],
    label: /^stored audience /,
    ours: (v, r) => {
      if (v.status === 200 && Array.isArray(v.body?.jobs)) return v.body.jobs.every((j) => j.lease.runnerId === "<runner#1>") && r.body.jobs.every((j) => j.lease.runnerId === "<runner#2>");
      if (v.status === 404) return v.body.error === "not-found";
      if (v.status === 200 && v.body?.envelope) return v.body.opened === '{"prompt":"stored earlier"}';
      if (v.status === 200 && "accepted" in (v.body ?? {})) return true;
      return v.state === "ok" && v.provenance?.runnerOwner === "alice" && v.provenance.untrusted === true;
    },
  },
  {
    // A body over the cap in UTF-8 bytes but under it in UTF-16 units: the
    // reference parses it and answers as for any body; ours refuses it with
    // the size message (a streamed one with the size read when reading
    // stopped).
    id: "the body cap counts bytes as they arrive",
    doc: ["docs/differences.md", "The HTTP body cap counts bytes as they arrive and stops reading at the cap"],
    also: ["docs/security.md", "bytes are counted as they arrive and reading stops at the cap"],
    label: /^limit: (2-byte|3-byte|astral|chunked 3-byte)/,
    ref: (v) => v.status === 404,
    ours: (v) => v.status === 400 && /^this message is [0-9.]+ MB and the limit is 6\.5 MB/.test(v.body?.message ?? ""),
  },
  {
    // A pair start with a long version, many capabilities or device keys not
    // spelled exactly: ours refuses it (400 bad-request); what follows in the
    // same scenario or mutation step (approve, poll, pendingPairing of a code
    // that was never handed out) finds nothing.
    id: "pair start keeps at most 8 KiB and only exactly spelled device keys",
    doc: ["docs/differences.md", "`pair start` (unauthenticated) keeps at most 8 KiB"],
    also: ["docs/security.md", "at most 8 KiB kept, exact key spellings"],
    label: /^pairing: (large fields at start: .*|identity keys padded or respelled) \/ |^mutation #\d+ pair-start /,
    // (Or the reference refused it for another reason first: a key text over
    // the bound gets the schema answer here, the unsigned-key one there.)
    ref: (v) => v.status === 200 || (v.status === 400 && v.body?.error === "bad-request") || v.value !== undefined,
    ours: (v) => (v.status === 400 && v.body?.error === "bad-request") || v.value === null || v.error !== undefined || (v.status === 404 && v.body?.error === "not-found"),
  },
  {
    id: "enqueue refuses a payload whose envelope would be over the envelope cap",
    doc: ["docs/differences.md", "refuses a payload whose envelope would be over the 6 MiB envelope"],
    also: ["docs/security.md", "`enqueue` refuses it: `invalid <kind> payload — sealed for its runner it would be"],
    label: /^enqueue size: a million astral characters \/ /,
    ours: (v) => v === null || /sealed for its runner it would be/.test(v.error?.message ?? ""),
  },
  {
    // The sweep drops a pairing 120 s after its expiry; a poll then answers
    // 404 "unknown device code" where the reference answers `expired` (and,
    // for an approval its daemon never collected, still hands it out).
    id: "the sweep prunes expired pairings",
    doc: ["docs/differences.md", "`MemoryStore` prunes"],
    also: ["docs/security.md", "The sweep (`expireDue`) drops a pairing once its `expiresAt` is more than 120 s"],
    label: /^pairing: expired pairings after a sweep \/ poll /,
    ours: is(404, "not-found"),
  },
  {
    id: "/fetch refuses a lapsed lease before any sweep",
    doc: ["docs/differences.md", "`/fetch` refuses a lease that has lapsed even before a sweep ran (404 `not-found`)"],
    also: ["docs/security.md", "`/fetch` hands out the payload on a lease that lapsed but was not swept"],
    label: /^lease edge: fetch (at expiry|1 ms after expiry|an hour after expiry) \/ |^mutation #\d+ fetch .*time jump (60000|60001|3660000)/,
    ref: (v) => v.status === 200,
    ours: is(404, "not-found"),
  },
  {
    id: "ByollmApp refuses an empty owner and wrong argument types with a TypeError naming the field",
    doc: ["docs/differences.md", "`approvePairing` refuses an empty `owner`, and every `ByollmApp` method refuses an argument of the"],
    also: ["docs/security.md", "every `ByollmApp` method refuses a wrong argument with a `TypeError` naming the method and the field"],
    label: /approve owner |^audience (type number|type null|owner number|allow a string) \/ |^enqueue mutation #/,
    ours: (v) => v === null || (v.error?.name === "TypeError" && /^\w+: `\w+` must be /.test(v.error.message)),
  },
  {
    id: "a cancel then a release ends the job canceled",
    doc: ["docs/differences.md", "A cancel asked for a job that its runner then releases ends the job `canceled` instead of reaching"],
    also: ["docs/security.md", "A cancel request survives a release and hits the next runner"],
    label: /^cancel then release \/ (after|the other runner claims)$/,
    ref: (v) => v.state === "queued" || v.body?.jobs?.length === 1,
    ours: (v) => v.state === "canceled" || (v.status === 200 && v.body?.jobs?.length === 0),
  },
  {
    // Issue 25 items 1-2: an audience other than exactly "private"/"team" is
    // refused at enqueue with an error naming the allowed values (the
    // reference accepts it and treats it as team-wide: any owner's team
    // runner gets the prompt). What follows on our side is that there is
    // no job: no claim hands it out, fetch and result find nothing.
    id: "an unknown audience is refused at enqueue",
    doc: ["docs/differences.md", 'An audience other than exactly `"private"` or `"team"` is refused at `enqueue`'],
    also: ["docs/security.md", "`enqueue` refuses it with a `TypeError` naming the allowed values"],
    label: /^audience odd /,
    ours: (v) =>
      (v?.error?.name === "TypeError" && /audience/.test(v.error.message) && /private/.test(v.error.message) && /team/.test(v.error.message)) ||
      v === null ||
      (v.status === 200 && Array.isArray(v.body?.jobs) && v.body.jobs.length === 0) ||
      (v.status === 404 && v.body?.error === "not-found"),
  },
  {
    // Ours refuses a list or a kept text over its bound (after the signature
    // check); the reference takes any length.
    id: "every list a request carries is bounded",
    doc: ["docs/differences.md", "Every list a request carries has a bound far above what a daemon sends"],
    also: ["docs/security.md", "Every list in a request body (leases, capabilities, models, withheld kinds)"],
    // (In a mutation step, what the reference then holds, a claimed job or a
    // touched runner, is the step's consequence.)
    label: /^body variants \/ (claim: 200 chat capabilities|heartbeat: daemonVersion 100,000 chars)$|^mutation #\d+ (claim|heartbeat|release|pair-start) \[[^\]]*(array of \d+ at |at daemonVersion)/,
    ref: (v) => v.status === 200,
    ours: (v) =>
      v.status === 400 &&
      v.body?.error === "bad-request" &&
      /^[\w.[\]]+ (has \d+ (items|characters)|is \d+ bytes as JSON) and the limit is \d+$/.test(v.body.message),
  },
  {
    // Refused where the 65th level opens, at the JSON stage; the reference
    // parses any depth and answers the version, signature or schema refusal.
    id: "JSON nested deeper than 64 levels is refused",
    doc: ["docs/differences.md", "JSON nested deeper than 64 levels is refused where it opens"],
    also: ["docs/security.md", "nesting of arrays and objects in any JSON the core parses | 64 levels"],
    label: /^body variants \/ claim: depth (64 extra key|200 extra key|5000 extra key|200 objects|5000 in model)$|^mutation #\d+ .*deep nesting/,
    ours: (v) => v.status === 400 && v.body?.error === "bad-request" && v.body.message === "request body nests arrays and objects deeper than 64 levels",
  },
  {
    // A SQL store writes liveness coalesced: the record read back after a
    // heartbeat may hold an older lastHeartbeatAt, by less than the core's
    // LIVENESS_SLACK_MS (60 s); everything else is the reference's.
    id: "SQL stores write a heartbeat's liveness at most every 45 s",
    doc: ["docs/differences.md", "a heartbeat writes the runner's liveness (`lastHeartbeatAt`) only when"],
    label: /^mutation #\d+ heartbeat .*: runners$/,
    ours: (v, r) => {
      const strip = (x) => JSON.stringify(x.value.map(({ lastHeartbeatAt: _, ...rest }) => rest));
      return (
        Array.isArray(v?.value) &&
        v.value.length === r.value.length &&
        strip(v) === strip(r) &&
        v.value.every((x, i) => x.lastHeartbeatAt <= r.value[i].lastHeartbeatAt && r.value[i].lastHeartbeatAt - x.lastHeartbeatAt < PROTOCOL.livenessSlackMs)
      );
    },
  },
];

/**
 * Divergences found by this suite that no document explains: bugs in ours
 * (or undocumented decisions). Each is reported to be fixed; remove the entry
 * when it is.
 */
const OPEN_DIVERGENCES = [];

/** Ours on a SQL store (postgresStore, supabaseStore): its schema's own limits. */
const SQL = STORE === "postgres" || STORE === "supabase";
if (SQL) {
  // What the SQL stores keep of an enqueue whose optional fields are not of
  // the type the API declares (the reference and MemoryStore keep any value):
  // found by this suite on a SQL store, not yet decided.
  OPEN_DIVERGENCES.push(
    {
      id: "SQL stores: a purpose that is not a string is kept as its text (null as absent)",
      label: /^enqueue mutation #\d+ \[.*purpose=/,
      ref: (v) => v?.value !== undefined && typeof v.value.purpose !== "string",
      ours: (v) => v?.value !== undefined && (v.value.purpose === undefined || typeof v.value.purpose === "string"),
    },
    {
      id: "SQL stores: a ttlMs that is not a 32-bit integer is refused by the column",
      label: /^enqueue mutation #\d+ \[.*ttlMs=/,
      ref: (v) => v?.value !== undefined && !(Number.isInteger(v.value.ttlMs) && Math.abs(v.value.ttlMs) < 2 ** 31),
      ours: (v) => typeof v?.error?.message === "string",
    },
    {
      id: "SQL stores: a fractional time is rounded to a whole millisecond",
      label: /^enqueue mutation #\d+ \[.*(deadlineAt|ttlMs)=/,
      ref: (v) => typeof v?.value?.deadlineAt === "number" && !Number.isInteger(v.value.deadlineAt),
      ours: (v, r) => Number.isInteger(v?.value?.deadlineAt) && Math.abs(v.value.deadlineAt - r.value.deadlineAt) < 1,
    },
    {
      // The reference keeps ±Infinity (the sweep then expires the job at once
      // or never); the column keeps no deadline.
      id: "SQL stores: a deadlineAt that is not a finite number is kept as none",
      label: /^enqueue mutation #\d+ \[.*deadlineAt=(-?Infinity|NaN)/,
      ours: (v) => v?.value?.deadlineAt === null,
    },
  );
}

/**
 * The entries in force: those whose every quoted line is in its document
 * (docs/differences.md or docs/security.md as they are in this checkout). One whose
 * line is missing excuses nothing, so the difference it describes fails.
 */
const ACTIVE = DELIBERATE.filter((d) => {
  const where = [];
  for (const [file, quote] of [d.doc, d.also].filter(Boolean)) {
    const lines = readFileSync(new URL(`../${file}`, import.meta.url), "utf8").split("\n");
    const at = lines.findIndex((l) => l.includes(quote));
    if (at < 0) {
      d.missing = `${file} does not say "${quote}"`;
      return false;
    }
    where.push(`${file}:${at + 1}`);
  }
  d.where = where.join("; ");
  return true;
});

const seen = { deliberate: new Map(), open: new Map() };

async function scenario(name, script, options) {
  const { ref, ours } = await both(script, options);
  return compareLogs(name, ref, ours, { deliberate: ACTIVE, open: OPEN_DIVERGENCES, seen });
}

/**
 * A test whose body returns its comparison failures; it fails on any of them
 * and on any 5xx or rejection from ours during it.
 */
function dtest(name, a, b) {
  const [options, body] = typeof a === "function" ? [{}, a] : [a, b];
  test(name, options, async () => {
    const mark = fatal.length;
    const failures = await body();
    const fatals = fatal.slice(mark).map((f) => `${f.label}: ${JSON.stringify(f.answer)} <- ${JSON.stringify(f.request).slice(0, 400)}`);
    assert.ok(
      failures.length === 0 && fatals.length === 0,
      `${fatals.length} 5xx/rejections from ours:\n${fatals.slice(0, 10).join("\n")}\n` +
        `${failures.length} undocumented divergences:\n${failures.slice(0, process.env.DIFF_ALL ? Infinity : 25).join("\n")}`,
    );
  });
}

/** No 5xx or rejection from ours since `mark` (a position in `fatal`). */
function assertNoFatal(mark = 0) {
  assert.deepEqual(
    fatal.slice(mark).map((f) => `${f.label}: ${JSON.stringify(f.answer)} <- ${JSON.stringify(f.request).slice(0, 400)}`),
    [],
    "ours answered a 5xx or rejected",
  );
}

const enqueue = (s, id, extra = {}) =>
  appCall(s, `enqueue ${id}`, (app) => app.enqueue({ kind: "llm.generate", payload: { prompt: `prompt of ${id}` }, owner: "alice", id, ...extra }).then((h) => h.record));

// First in the file on purpose: ours reads a body's UTF-8 into a buffer
// that grows to the largest body seen in the process (4,096 bytes before
// any), so these sizes sit at its edge only while nothing larger has come.
dtest("multibyte text across the edge of the native read buffer", async () => {
  const failures = [];
  const head = '{"protocolVersion":"2","runnerId":"';
  const tail = '","capabilities":[],"max":1}';
  const pollHead = '{"protocolVersion":"2","action":"poll","deviceCode":"';
  // (The straddling sizes first: what the buffer holds after a read that
  // fitted can change where the next one stops.)
  for (const bytes of [4092, 4093, 4094, 4090, 4091, 4095, 4096, 4097]) {
    // A canonical claim of `bytes` bytes, then one 4-byte character: not
    // JSON (text after the value).
    const canonical = head + "r".repeat(bytes - head.length - tail.length) + tail;
    // A valid poll whose device code is astral characters from `bytes` on.
    const pad = "a".repeat(bytes - pollHead.length);
    failures.push(
      ...(await scenario(`read buffer edge ${bytes}`, async (s) => {
        await H.record(s, "canonical claim then an astral character", await H.send(s, "canonical claim then an astral character", { path: `${H.BASE}/claim`, headers: { "content-type": "application/json" }, body: `${canonical}🙂` }));
        await H.record(s, "poll with astral characters", await H.send(s, "poll with astral characters", { path: `${H.BASE}/pair`, headers: { "content-type": "application/json" }, body: `${pollHead}${pad}${"🙂".repeat(8)}"}` }));
      })),
    );
  }
  return failures;
});

dtest("a valid full cycle answers the same on both sides", async () => {
  const env = await sealResult("job-1");
  const failures = await scenario("full cycle", async (s) => {
    await pair(s);
    await enqueue(s, "job-1");
    await jobState(s, "queued", "job-1");
    await claim(s, "claim");
    await jobState(s, "claimed", "job-1");
    await fetchJob(s, "fetch", "job-1");
    await call(s, "heartbeat", "heartbeat", H.heartbeatBody([["job-1", "lease:job-1"]]));
    await result(s, "result", "job-1", env);
    await result(s, "result again", "job-1", env);
    await jobState(s, "done", "job-1");
    await appCall(s, "app.result", (app) => app.result("job-1"));
  });
  return failures;
});

const call = H.call;


// ---------------------------------------------------------------- signatures

/** A paired runner (and a second one of another owner) and one queued job. */
async function paired(s, { second = true } = {}) {
  await pair(s);
  if (second) await pair(s, { owner: "bob", device: H.DEVICE2, as: "runner2", label: "pair bob" });
  await enqueue(s, "job-1");
}

dtest("signature and issued-at spellings at the window's edges", async () => {
  const hb = H.heartbeatBody([]);
  const WINDOW = 120_000;
  // [name, issuedAt offset signed over, header spelling of it]
  const spellings = [
    ["now", 0, (t) => `${t}`],
    ["window -120000", -WINDOW, (t) => `${t}`],
    ["window -120001", -WINDOW - 1, (t) => `${t}`],
    ["window -119999", -WINDOW + 1, (t) => `${t}`],
    ["window +120000", WINDOW, (t) => `${t}`],
    ["window +120001", WINDOW + 1, (t) => `${t}`],
    ["window +119999", WINDOW - 1, (t) => `${t}`],
    ["spaces around", 0, (t) => ` ${t} `],
    ["tab after", 0, (t) => `${t}\t`],
    [".0", 0, (t) => `${t}.0`],
    [".000", 0, (t) => `${t}.000`],
    [".5", 0, (t) => `${t}.5`],
    ["hex", 0, (t) => `0x${t.toString(16)}`],
    ["octal-looking 0o", 0, (t) => `0o${t.toString(8)}`],
    ["binary 0b", 0, (t) => `0b${t.toString(2)}`],
    ["exponent", 0, (t) => `${t / 1000}e3`],
    ["exponent E+", 0, (t) => `${t / 1e5}E+5`],
    ["leading plus", 0, (t) => `+${t}`],
    ["leading zeros", 0, (t) => `000${t}`],
    ["negative", 0, (t) => `-${t}`],
    ["empty", 0, () => ""],
    ["letters", 0, () => "soon"],
    ["Infinity", 0, () => "Infinity"],
    ["NaN", 0, () => "NaN"],
    ["1e400", 0, () => "1e400"],
    ["bigint n", 0, (t) => `${t}n`],
    ["underscore", 0, (t) => `${String(t).slice(0, 4)}_${String(t).slice(4)}`],
    ["seconds not ms", 0, (t) => `${Math.floor(t / 1000)}`],
    ["zero", 0, () => "0"],
    ["no-break space after", 0, (t) => `${t}\u00a0`],
    ["superscript digit", 0, (t) => `${t}\u00b2`],
  ];
  const sigSpellings = [
    ["canonical", (x) => x],
    ["padded ==", (x) => `${x}==`],
    ["padded =", (x) => `${x}=`],
    ["junk appended", (x) => `${x}!`],
    ["junk inside", (x) => `${x.slice(0, 10)}*${x.slice(10)}`],
    ["standard alphabet", (x) => x.replace(/-/g, "+").replace(/_/g, "/")],
    ["one char short", (x) => x.slice(0, -1)],
    ["one char more", (x) => `${x}A`],
    ["last char flipped", (x) => x.slice(0, -1) + (x.endsWith("A") ? "Q" : "A")],
    ["stray trailing bits", (x) => x.slice(0, -1) + String.fromCharCode(x.charCodeAt(x.length - 1) ^ 1)],
    ["whitespace inside", (x) => `${x.slice(0, 20)} ${x.slice(20)}`],
    ["empty", () => ""],
    ["hex of nothing", () => "00".repeat(64)],
    ["uppercase", (x) => x.toUpperCase()],
    ["duplicated", (x) => `${x}, ${x}`],
  ];
  const failures = await scenario("signatures", async (s) => {
    await paired(s);
    let step = 0;
    for (const [name, offset, spell] of spellings) {
      H.clock.t = H.T0 + 1000 * ++step;
      const issuedAt = H.clock.t + offset;
      await call(s, `issued-at ${name}`, "heartbeat", hb, {
        issuedAt: Number.isFinite(issuedAt) ? issuedAt : H.clock.t,
        mutateHeaders: (h) => ({ ...h, "x-byollm-issued-at": spell(issuedAt) }),
      });
    }
    for (const [name, spell] of sigSpellings) {
      H.clock.t = H.T0 + 1000 * ++step;
      await call(s, `signature ${name}`, "heartbeat", hb, { mutateHeaders: (h) => ({ ...h, "x-byollm-signature": spell(h["x-byollm-signature"]) }) });
    }
    // What the signature covers: endpoint, runner, time, exact body bytes.
    H.clock.t = H.T0 + 1000 * ++step;
    const other = (endpoint) => (h, side) => ({ ...h, "x-byollm-signature": H.signHeaders({ endpoint, runnerId: side.vars.runner, body: H.fill(side, hb) })["x-byollm-signature"] });
    await call(s, "signed for claim, sent to heartbeat", "heartbeat", hb, { mutateHeaders: other("claim") });
    await call(s, "signed over the body plus a space", "heartbeat", hb, {
      mutateHeaders: (h, side) => ({ ...h, "x-byollm-signature": H.signHeaders({ endpoint: "heartbeat", runnerId: side.vars.runner, body: `${H.fill(side, hb)} ` })["x-byollm-signature"] }),
    });
    await call(s, "signed by the stranger", "heartbeat", hb, { keys: H.STRANGER });
    await call(s, "signed by bob's device as alice's runner", "heartbeat", hb, { keys: H.DEVICE2 });
    await call(s, "runner header names bob, body alice", "heartbeat", hb, { runner: "runner2", keys: H.DEVICE2 });
    await call(s, "unknown runner header", "heartbeat", hb, { mutateHeaders: (h) => ({ ...h, "x-byollm-runner": "runner_00000000-0000-0000-0000-000000000000" }) });
    await call(s, "runner header with spaces", "heartbeat", hb, { mutateHeaders: (h) => ({ ...h, "x-byollm-runner": ` ${h["x-byollm-runner"]} ` }) });
    await call(s, "runner header uppercased", "heartbeat", hb, { mutateHeaders: (h) => ({ ...h, "x-byollm-runner": h["x-byollm-runner"].toUpperCase() }) });
    for (const drop of ["x-byollm-runner", "x-byollm-issued-at", "x-byollm-signature"]) {
      await call(s, `without ${drop}`, "heartbeat", hb, { mutateHeaders: (h) => Object.fromEntries(Object.entries(h).filter(([k]) => k !== drop)) });
    }
    await call(s, "header names in capitals", "heartbeat", hb, { mutateHeaders: (h) => Object.fromEntries(Object.entries(h).map(([k, v]) => [k.toUpperCase(), v])) });
    await call(s, "unsigned claim", "claim", H.claimBody(), { sign: false });
    await call(s, "authorization bearer instead", "claim", H.claimBody(), { sign: false, extraHeaders: { authorization: "Bearer x" } });
    // A signature from a revoked runner, then from the live one.
    await appCall(s, "revoke bob", (app) => app.revokeRunner(s.vars.runner2));
    await call(s, "revoked runner, valid signature", "heartbeat", H.heartbeatBody([], "runner2"), { runner: "runner2", keys: H.DEVICE2 });
    await call(s, "revoked runner, stale signature", "heartbeat", H.heartbeatBody([], "runner2"), { runner: "runner2", keys: H.DEVICE2, issuedAt: H.clock.t - 200_000 });
    await call(s, "revoked runner, bad schema", "heartbeat", "{\"protocolVersion\":\"2\"}", { runner: "runner2", keys: H.DEVICE2 });
    await call(s, "live runner, bad schema", "heartbeat", "{\"protocolVersion\":\"2\"}");
    await call(s, "live runner, body names bob", "heartbeat", H.heartbeatBody([], "runner2"));
    await call(s, "a valid heartbeat still works", "heartbeat", hb);
  });
  return failures;
});

// ---------------------------------------------------------------- body variants

dtest("body variants: order, whitespace, escapes, duplicates, extra keys, types, sizes, depth, surrogates", async () => {
  const cap = JSON.stringify(H.CAP);
  const claimV = (inner) => `{"protocolVersion":"2","runnerId":"{{runner}}",${inner}}`;
  const variants = [
    ["claim: key order reversed", `{"max":1,"capabilities":[${cap}],"runnerId":"{{runner}}","protocolVersion":"2"}`],
    ["claim: pretty printed", JSON.stringify({ protocolVersion: "2", runnerId: "{{runner}}", capabilities: [H.CAP], max: 1 }, null, 2)],
    ["claim: CRLF and tabs", `{\r\n\t"protocolVersion" : "2" ,\r\n\t"runnerId":"{{runner}}",\t"capabilities":[${cap}],"max":1}`],
    ["claim: leading and trailing whitespace", ` \n${H.claimBody("runner", [H.CAP], 1)}\n `],
    ["claim: BOM", `\uFEFF${H.claimBody("runner", [H.CAP], 1)}`],
    ["claim: escaped key", `{"protocolVersion":"2","\\u0072unnerId":"{{runner}}","capabilities":[${cap}],"max":1}`],
    ["claim: escaped value", `{"protocolVersion":"\\u0032","runnerId":"{{runner}}","capabilities":[${cap}],"max":1}`],
    ["claim: escaped slash in model", claimV(`"capabilities":[${cap.replace('"m1"', '"m\\/1"')}],"max":1`)],
    ["claim: duplicate max, last wins", claimV(`"capabilities":[${cap}],"max":1,"max":70`)],
    ["claim: duplicate max, valid last", claimV(`"capabilities":[${cap}],"max":70,"max":1`)],
    ["claim: duplicate runnerId, foreign first", `{"protocolVersion":"2","runnerId":"runner_x","runnerId":"{{runner}}","capabilities":[${cap}],"max":1}`],
    ["claim: duplicate runnerId, foreign last", `{"protocolVersion":"2","runnerId":"{{runner}}","runnerId":"runner_x","capabilities":[${cap}],"max":1}`],
    ["claim: duplicate protocolVersion", `{"protocolVersion":"1","protocolVersion":"2","runnerId":"{{runner}}","capabilities":[${cap}],"max":1}`],
    ["claim: extra top-level key", claimV(`"capabilities":[${cap}],"max":1,"extra":true`)],
    ["claim: __proto__ key", claimV(`"capabilities":[${cap}],"max":1,"__proto__":{"x":1}`)],
    ["claim: extra key in a capability", claimV(`"capabilities":[${JSON.stringify({ ...H.CAP, extra: 1 })}],"max":1`)],
    ["claim: max as string", claimV(`"capabilities":[${cap}],"max":"1"`)],
    ["claim: max 0", claimV(`"capabilities":[${cap}],"max":0`)],
    ["claim: max 64", claimV(`"capabilities":[${cap}],"max":64`)],
    ["claim: max 65", claimV(`"capabilities":[${cap}],"max":65`)],
    ["claim: max 1.0", claimV(`"capabilities":[${cap}],"max":1.0`)],
    ["claim: max 1e0", claimV(`"capabilities":[${cap}],"max":1e0`)],
    ["claim: max -0", claimV(`"capabilities":[${cap}],"max":-0`)],
    ["claim: max 1e400", claimV(`"capabilities":[${cap}],"max":1e400`)],
    ["claim: max null", claimV(`"capabilities":[${cap}],"max":null`)],
    ["claim: capabilities object", claimV(`"capabilities":${cap},"max":1`)],
    ["claim: capabilities empty", claimV(`"capabilities":[],"max":1`)],
    // Of a kind with no job queued: the reference claims nothing, so the queue stays the same on both sides.
    ["claim: 200 chat capabilities", claimV(`"capabilities":[${Array(200).fill(JSON.stringify({ ...H.CAP, kind: "llm.chat" })).join(",")}],"max":1`)],
    ["claim: model 10,000 chars", claimV(`"capabilities":[${JSON.stringify({ ...H.CAP, model: "m".repeat(10_000) })}],"max":1`)],
    ["claim: service empty", claimV(`"capabilities":[${JSON.stringify({ ...H.CAP, service: "" })}],"max":1`)],
    ["claim: kind uppercase", claimV(`"capabilities":[${JSON.stringify({ ...H.CAP, kind: "LLM.GENERATE" })}],"max":1`)],
    ["claim: offerScope public", claimV(`"capabilities":[${JSON.stringify({ ...H.CAP, offerScope: "public" })}],"max":1`)],
    ["claim: knownModels nested", claimV(`"capabilities":[${JSON.stringify({ ...H.CAP, knownModels: [["a"]] })}],"max":1`)],
    ["claim: depth 64 extra key", claimV(`"capabilities":[${cap}],"max":1,"x":${"[".repeat(64)}${"]".repeat(64)}`)],
    ["claim: depth 200 extra key", claimV(`"capabilities":[${cap}],"max":1,"x":${"[".repeat(200)}${"]".repeat(200)}`)],
    ["claim: depth 5000 extra key", claimV(`"capabilities":[${cap}],"max":1,"x":${"[".repeat(5000)}${"]".repeat(5000)}`)],
    ["claim: depth 200 objects", claimV(`"capabilities":[${cap}],"max":1,"x":${'{"a":'.repeat(200)}1${"}".repeat(200)}`)],
    ["claim: depth 5000 in model", claimV(`"capabilities":[${JSON.stringify({ ...H.CAP, model: "§" }).replace('"§"', "[".repeat(5000) + "]".repeat(5000))}],"max":1`)],
    ["claim: lone high surrogate in model", claimV(`"capabilities":[${cap.replace('"m1"', '"m\\ud800"')}],"max":1`)],
    ["claim: lone low surrogate in service", claimV(`"capabilities":[${cap.replace('"local"', '"\\udc00local"')}],"max":1`)],
    ["claim: reversed pair in model", claimV(`"capabilities":[${cap.replace('"m1"', '"\\udc00\\ud800"')}],"max":1`)],
    ["claim: lone surrogate in a key", claimV(`"capabilities":[${cap}],"max":1,"\\ud800":1`)],
    ["claim: lone surrogate runnerId", `{"protocolVersion":"2","runnerId":"\\ud800","capabilities":[${cap}],"max":1}`],
    ["claim: NUL in model", claimV(`"capabilities":[${cap.replace('"m1"', '"m\\u0000"')}],"max":1`)],
    ["claim: raw control character", claimV(`"capabilities":[${cap.replace('"m1"', '"m\u0001"')}],"max":1`)],
    ["claim: trailing comma", claimV(`"capabilities":[${cap}],"max":1,`)],
    ["claim: single quotes", `{'protocolVersion':'2'}`],
    ["claim: comment", `/* hi */${H.claimBody("runner", [H.CAP], 1)}`],
    ["claim: two documents", `${H.claimBody("runner", [H.CAP], 1)}${H.claimBody("runner", [H.CAP], 1)}`],
    ["claim: NaN", claimV(`"capabilities":[${cap}],"max":NaN`)],
    ["claim: hex number", claimV(`"capabilities":[${cap}],"max":0x1`)],
    ["claim: number with plus", claimV(`"capabilities":[${cap}],"max":+1`)],
    ["claim: leading zero number", claimV(`"capabilities":[${cap}],"max":01`)],
    ["claim: array body", `[${H.claimBody("runner", [H.CAP], 1)}]`],
    ["claim: string body", `"2"`],
    ["claim: null body", `null`],
    ["claim: empty body", ``],
    ["claim: only whitespace", `   `],
    ["claim: protocolVersion 2 number", `{"protocolVersion":2,"runnerId":"{{runner}}","capabilities":[${cap}],"max":1}`],
    ["claim: protocolVersion missing", `{"runnerId":"{{runner}}","capabilities":[${cap}],"max":1}`],
    ["claim: protocolVersion 3", `{"protocolVersion":"3","runnerId":"{{runner}}","capabilities":[${cap}],"max":1}`],
    ["claim: protocolVersion 1", `{"protocolVersion":"1","runnerId":"{{runner}}","capabilities":[${cap}],"max":1}`],
    ["claim: protocolVersion lone surrogate", `{"protocolVersion":"\\ud800","runnerId":"{{runner}}","capabilities":[${cap}],"max":1}`],
    ["heartbeat: withheld one claimant", `{"protocolVersion":"2","runnerId":"{{runner}}","daemonVersion":"1","capabilities":[],"withheld":[{"kind":"llm.generate","claimants":[{"service":"a","offer":"team"}]}],"activeLeases":[]}`],
    ["heartbeat: withheld two claimants", `{"protocolVersion":"2","runnerId":"{{runner}}","daemonVersion":"1","capabilities":[],"withheld":[{"kind":"llm.generate","claimants":[{"service":"a","offer":"team"},{"service":"b","offer":"private"}]}],"activeLeases":[]}`],
    ["heartbeat: daemonVersion 100,000 chars", `{"protocolVersion":"2","runnerId":"{{runner}}","daemonVersion":"${"9".repeat(100_000)}","capabilities":[],"activeLeases":[]}`],
    ["heartbeat: 1,000 unknown leases", `{"protocolVersion":"2","runnerId":"{{runner}}","daemonVersion":"1","capabilities":[],"activeLeases":[${Array.from({ length: 1000 }, (_, i) => `{"jobId":"j${i}","leaseId":"l${i}"}`).join(",")}]}`],
    ["heartbeat: daemonVersion lone surrogate", `{"protocolVersion":"2","runnerId":"{{runner}}","daemonVersion":"0.1.1\\ud800","capabilities":[${JSON.stringify({ ...H.CAP, model: "m\ud800" })}],"activeLeases":[]}`],
    ["heartbeat: activeLeases object", `{"protocolVersion":"2","runnerId":"{{runner}}","daemonVersion":"1","capabilities":[],"activeLeases":{}}`],
    ["fetch: jobId number", `{"protocolVersion":"2","runnerId":"{{runner}}","jobId":1,"leaseId":"x"}`],
    ["fetch: jobId empty", `{"protocolVersion":"2","runnerId":"{{runner}}","jobId":"","leaseId":"x"}`],
    ["fetch: extra key", `{"protocolVersion":"2","runnerId":"{{runner}}","jobId":"job-1","leaseId":"x","x":1}`],
    ["fetch: 1 MB jobId", `{"protocolVersion":"2","runnerId":"{{runner}}","jobId":"${"j".repeat(1 << 20)}","leaseId":"x"}`],
    ["release: empty leases", `{"protocolVersion":"2","runnerId":"{{runner}}","leases":[],"reason":"refused"}`],
    ["release: reason uppercase", `{"protocolVersion":"2","runnerId":"{{runner}}","leases":[],"reason":"REFUSED"}`],
    ["release: lease missing leaseId", `{"protocolVersion":"2","runnerId":"{{runner}}","leases":[{"jobId":"job-1"}],"reason":"refused"}`],
    ["result: envelope missing", `{"protocolVersion":"2","runnerId":"{{runner}}","jobId":"job-1","leaseId":"x","disposition":"ok"}`],
    ["result: envelope string", `{"protocolVersion":"2","runnerId":"{{runner}}","jobId":"job-1","leaseId":"x","envelope":"e","disposition":"ok"}`],
    ["result: envelope direction payload", `{"protocolVersion":"2","runnerId":"{{runner}}","jobId":"job-1","leaseId":"x","envelope":{"ciphertext":"x","recipientKeyId":"a","senderKeyId":"b","direction":"payload","deadlineAt":1},"disposition":"ok"}`],
    ["result: deadlineAt negative", `{"protocolVersion":"2","runnerId":"{{runner}}","jobId":"job-1","leaseId":"x","envelope":{"ciphertext":"x","recipientKeyId":"a","senderKeyId":"b","direction":"result","deadlineAt":-1},"disposition":"ok"}`],
    ["result: deadlineAt 2^53", `{"protocolVersion":"2","runnerId":"{{runner}}","jobId":"job-1","leaseId":"x","envelope":{"ciphertext":"x","recipientKeyId":"a","senderKeyId":"b","direction":"result","deadlineAt":9007199254740993},"disposition":"ok"}`],
    ["result: ciphertext not base64", `{"protocolVersion":"2","runnerId":"{{runner}}","jobId":"job-1","leaseId":"x","envelope":{"ciphertext":"!!!!","recipientKeyId":"a","senderKeyId":"b","direction":"result","deadlineAt":1},"disposition":"ok"}`],
  ];
  const pairVariants = [
    ["pair: poll code too short", `{"protocolVersion":"2","action":"poll","deviceCode":"short"}`],
    ["pair: poll code lone surrogate", `{"protocolVersion":"2","action":"poll","deviceCode":"${"a".repeat(42)}\\ud800"}`],
    ["pair: poll code 10,000 chars", `{"protocolVersion":"2","action":"poll","deviceCode":"${"a".repeat(10_000)}"}`],
    ["pair: action uppercase", `{"protocolVersion":"2","action":"POLL","deviceCode":"${"a".repeat(43)}"}`],
    ["pair: both actions duplicate", `{"protocolVersion":"2","action":"start","action":"poll","deviceCode":"${"a".repeat(43)}"}`],
    ["pair: start reordered", (() => { const b = JSON.parse(H.pairStartBody()); return JSON.stringify({ capabilities: b.capabilities, device: b.device, daemon: b.daemon, action: "start", protocolVersion: "2" }); })()],
    ["pair: start extra key", H.pairStartBody(H.DEVICE, [H.CAP], { extra: 1 })],
    ["pair: start label 120", H.pairStartBody().replace('"label":"diff"', `"label":"${"l".repeat(120)}"`)],
    ["pair: start label 121", H.pairStartBody().replace('"label":"diff"', `"label":"${"l".repeat(121)}"`)],
    ["pair: start label 120 astral", H.pairStartBody().replace('"label":"diff"', `"label":"${"🙂".repeat(120)}"`)],
    ["pair: start label 121 astral", H.pairStartBody().replace('"label":"diff"', `"label":"${"🙂".repeat(121)}"`)],
    ["pair: start label lone surrogates", H.pairStartBody().replace('"label":"diff"', `"label":"${"\\ud800".repeat(120)}"`)],
    ["pair: start platform beos", H.pairStartBody().replace('"platform":"linux"', '"platform":"beos"')],
    ["pair: start escaped everything", H.pairStartBody().replace(/"action":"start"/, '"\\u0061ction":"\\u0073tart"')],
  ];
  const failures = await scenario("body variants", async (s) => {
    await paired(s);
    await enqueue(s, "job-2");
    let step = 0;
    for (const [name, template] of variants) {
      H.clock.t = H.T0 + 10 * ++step;
      const endpoint = name.split(":")[0];
      const r = await call(s, name, endpoint, template);
      if (endpoint === "claim" && r.raw.status === 200) {
        // Put claimed work back, so the next variant sees the same queue.
        for (const stub of r.raw.body.jobs) {
          s.vars.back = stub.lease.id;
          await call(s, `${name}: release`, "release", H.releaseBody([[stub.id, "back"]], "shutdown"));
        }
      }
    }
    await appCall(s, "runners after the variants", (app) => app.runners("alice"));
    await appCall(s, "availability after the variants", (app) => app.runnerAvailability({ kind: "llm.generate", owner: "alice" }));
    await appCall(s, "availability for another owner after the variants", (app) => app.runnerAvailability({ kind: "llm.generate", owner: "bob" }));
    await jobState(s, "job-1 after the variants", "job-1");
    await jobState(s, "job-2 after the variants", "job-2");
  });
  // Transport: methods, paths and content types around a valid signed claim.
  failures.push(
    ...(await scenario("transport", async (s) => {
      await paired(s, { second: false });
      const body = H.fill(s, H.claimBody("runner", [H.CAP], 0 + 1));
      const signed = H.signHeaders({ endpoint: "claim", runnerId: s.vars.runner, body });
      const variants = [
        ["GET", `${H.BASE}/claim`, signed, undefined],
        ["PUT", `${H.BASE}/claim`, signed, body],
        ["DELETE", `${H.BASE}/claim`, signed, body],
        ["OPTIONS", `${H.BASE}/claim`, signed, undefined],
        ["POST", `${H.BASE}/claim/`, signed, body],
        ["POST", `${H.BASE}//claim`, signed, body],
        ["POST", `${H.BASE}/CLAIM`, signed, body],
        ["POST", `${H.BASE}/%63laim`, signed, body],
        ["POST", `${H.BASE}/claim?x=1`, signed, body],
        ["POST", `${H.BASE}/claim#frag`, signed, body],
        ["POST", `${H.BASE}/./claim`, signed, body],
        ["POST", `${H.BASE}/x/../claim`, signed, body],
        ["POST", `/other/claim`, signed, body],
        ["POST", `${H.BASE}`, signed, body],
        ["POST", `${H.BASE}/`, signed, body],
        ["POST", `${H.BASE}/claim`, { ...signed, "content-type": "text/plain" }, body],
        ["POST", `${H.BASE}/claim`, Object.fromEntries(Object.entries(signed).filter(([k]) => k !== "content-type")), body],
        ["POST", `${H.BASE}/claim`, { ...signed, "content-encoding": "gzip" }, body],
        ["POST", `${H.BASE}/claim`, signed, new TextEncoder().encode(body)],
      ];
      for (const [method, path, headers, b] of variants) {
        const label = `${method} ${path} ${headers["content-type"] ?? "(no type)"}${headers["content-encoding"] ? " gzip" : ""}${b instanceof Uint8Array ? " bytes" : ""}`;
        await H.record(s, label, await H.send(s, label, { method, path, headers, body: b }));
        const r = s.log[s.log.length - 1].value;
        if (r.status === 200) {
          // Put any claimed job back for the next variant.
          const job = await s.store.get("job-1");
          if (job?.lease) {
            s.vars.back = job.lease.id;
            await call(s, `${label}: release`, "release", H.releaseBody([["job-1", "back"]], "shutdown"));
          }
        }
      }
    })),
  );
  // Each pairing variant on a fresh site, so one refusal cannot shift the
  // codes of the next.
  for (const [name, template] of pairVariants) {
    failures.push(
      ...(await scenario(name, async (s) => {
        const r = await call(s, name, "pair", template, { sign: false });
        await appCall(s, `${name}: pendingPairing`, (app) => app.pendingPairing(r.raw.body?.userCode ?? "NONE-NONE"));
        await appCall(s, `${name}: approve`, (app) => app.approvePairing({ userCode: r.raw.body?.userCode ?? "NONE-NONE", owner: "alice" }));
      })),
    );
  }
  return failures;
});

// ---------------------------------------------------------------- fetch, result, leases

dtest("fetch and result refusals, lease edges", async () => {
  const ok = await sealResult("job-1");
  const ok2 = await sealResult("job-2");
  const byBob = await sealResult("job-1", { keys: H.DEVICE2 });
  const byStranger = await sealResult("job-1", { keys: H.STRANGER });
  const otherJob = await sealResult("job-2");
  const errorOutcome = await sealResult("job-1", { outcome: { outcome: "error", code: "backend-down", message: "m", retryable: true } });
  const canceled = await sealResult("job-1", { outcome: { outcome: "canceled" } });
  const sealedNull = await sealResult("job-1", { plaintext: "null" });
  const notJson = await sealResult("job-1", { plaintext: "{nope" });
  const notOutcome = await sealResult("job-1", { plaintext: JSON.stringify({ outcome: { outcome: "maybe" } }) });
  const tampered = { ...ok, ciphertext: ok.ciphertext.slice(0, -4) + (ok.ciphertext.endsWith("AAAA") ? "BBBB" : "AAAA") };
  const wrongDirection = { ...ok, direction: "payload" };
  const wrongRecipient = { ...ok, recipientKeyId: "BYOLLM-XXXX" };
  const failures = [];
  // Refusals before and around a live lease.
  failures.push(
    ...(await scenario("fetch/result refusals", async (s) => {
      await paired(s);
      s.vars.nolease = "00000000-0000-4000-8000-000000000000";
      await fetchJob(s, "fetch before any claim", "job-1", { lease: "nolease" });
      await result(s, "result before any claim", "job-1", ok, { lease: "nolease" });
      await fetchJob(s, "fetch unknown job", "job-404", { lease: "nolease" });
      await result(s, "result unknown job", "job-404", ok, { lease: "nolease" });
      await claim(s, "claim");
      await fetchJob(s, "fetch with another lease id", "job-1", { lease: "nolease" });
      await fetchJob(s, "fetch by bob with alice's lease", "job-1", { runner: "runner2", keys: H.DEVICE2 });
      await fetchJob(s, "fetch naming job-2 with job-1's lease", "job-2", { lease: "lease:job-1" });
      await fetchJob(s, "fetch signed for result", "job-1", { mutateHeaders: (h, side) => ({ ...h, "x-byollm-signature": H.signHeaders({ endpoint: "result", runnerId: side.vars.runner, body: H.fill(side, H.fetchBody("job-1", "lease:job-1")) })["x-byollm-signature"] }) });
      await fetchJob(s, "fetch", "job-1");
      await fetchJob(s, "fetch again", "job-1");
      await result(s, "result with another lease id", "job-1", ok, { lease: "nolease" });
      await result(s, "result for job-2 with job-1's lease", "job-2", ok2, { lease: "lease:job-1" });
      await result(s, "result sealed for job-2 sent for job-1", "job-1", otherJob);
      await result(s, "result sealed by bob's device", "job-1", byBob);
      await result(s, "result sealed by a stranger", "job-1", byStranger);
      await result(s, "result tampered", "job-1", tampered);
      await result(s, "result wrong direction", "job-1", wrongDirection);
      await result(s, "result wrong recipient key id", "job-1", wrongRecipient);
      await result(s, "result not JSON inside", "job-1", notJson);
      await result(s, "result not an outcome inside", "job-1", notOutcome);
      await result(s, "result disposition error for an ok seal", "job-1", ok, { disposition: "error" });
      await result(s, "result disposition canceled for an error seal", "job-1", errorOutcome, { disposition: "canceled" });
      await jobState(s, "after the refused results", "job-1");
      await result(s, "result error outcome", "job-1", errorOutcome, { disposition: "error" });
      await result(s, "result again, ok this time", "job-1", ok);
      await jobState(s, "after the error result", "job-1");
      await fetchJob(s, "fetch after the result", "job-1");
      await appCall(s, "app.result", (app) => app.result("job-1"));
    })),
  );
  // A sealed outcome of JSON null inside a valid envelope, and a box whose
  // whole content is JSON null (the weak spot: the reference's open throws).
  await sodium.ready;
  const nullBox = {
    ciphertext: Buffer.from(sodium.crypto_box_seal(Buffer.from("null"), Buffer.from(H.SITE.encryptionPublic, "base64url"))).toString("base64url"),
    recipientKeyId: H.SITE_KEY_ID,
    senderKeyId: H.keyIdOf(H.DEVICE),
    direction: "result",
    deadlineAt: H.T0 + 86_400_000,
  };
  failures.push(
    ...(await scenario("sealed null", async (s) => {
      await paired(s, { second: false });
      await claim(s, "claim");
      await result(s, "result sealing JSON null", "job-1", sealedNull);
      await result(s, "result whose box holds JSON null", "job-1", nullBox);
      await jobState(s, "after", "job-1");
    })),
  );
  // Lease edges under the shared clock.
  const leaseEdges = async (name, at, steps) =>
    scenario(`lease edge: ${name}`, async (s) => {
      await paired(s);
      await claim(s, "claim");
      const stub = (await s.store.get("job-1")).lease;
      H.clock.t = stub.expiresAt + at;
      await steps(s);
      await jobState(s, "job-1 after", "job-1");
    });
  for (const [name, at] of [["1 ms before expiry", -1], ["at expiry", 0], ["1 ms after expiry", 1], ["an hour after expiry", 3_600_000]]) {
    failures.push(...(await leaseEdges(`fetch ${name}`, at, (s) => fetchJob(s, `fetch ${name}`, "job-1"))));
    failures.push(...(await leaseEdges(`result ${name}`, at, (s) => result(s, `result ${name}`, "job-1", ok))));
    failures.push(...(await leaseEdges(`heartbeat ${name}`, at, (s) => call(s, `heartbeat ${name}`, "heartbeat", H.heartbeatBody([["job-1", "lease:job-1"]])))));
    failures.push(...(await leaseEdges(`release ${name}`, at, (s) => call(s, `release ${name}`, "release", H.releaseBody([["job-1", "lease:job-1"]], "shutdown")))));
    failures.push(
      ...(await leaseEdges(`bob claims ${name}`, at, async (s) => {
        await claim(s, `bob claims ${name}`, { runner: "runner2", keys: H.DEVICE2, caps: [H.TEAM_CAP] });
        await claim(s, `alice claims again ${name}`);
      })),
    );
    failures.push(
      ...(await leaseEdges(`sweep then fetch ${name}`, at, async (s) => {
        await appCall(s, "sweep", (app) => app.sweep());
        await fetchJob(s, `fetch ${name} after sweep`, "job-1");
        await result(s, `result ${name} after sweep`, "job-1", ok);
      })),
    );
  }
  // Renewal keeps a lease; a re-claim after lapse hands out a new lease, and
  // the old one is dead.
  failures.push(
    ...(await scenario("renew and reclaim", async (s) => {
      await paired(s);
      await claim(s, "claim");
      const first = (await s.store.get("job-1")).lease;
      H.clock.t = first.expiresAt - 1;
      await call(s, "heartbeat renews", "heartbeat", H.heartbeatBody([["job-1", "lease:job-1"]]));
      await jobState(s, "renewed", "job-1");
      H.clock.t = first.expiresAt + 30_000;
      await fetchJob(s, "fetch inside the renewed lease", "job-1");
      H.clock.t += 120_000;
      await appCall(s, "sweep", (app) => app.sweep());
      s.vars.old = s.vars["lease:job-1"];
      await claim(s, "claim again after lapse");
      await fetchJob(s, "fetch with the old lease", "job-1", { lease: "old" });
      await result(s, "result with the old lease", "job-1", ok, { lease: "old" });
      await call(s, "heartbeat with the old lease", "heartbeat", H.heartbeatBody([["job-1", "old"]]));
      await result(s, "result with the new lease", "job-1", ok);
      await jobState(s, "done", "job-1");
    })),
  );
  return failures;
});

// ---------------------------------------------------------------- pairing abuse

dtest("pairing abuse", async () => {
  const failures = [];
  const caseOf = (name, fn) => scenario(`pairing: ${name}`, fn);
  const start = (s, label = "start", body = H.pairStartBody()) => call(s, label, "pair", body, { sign: false });
  const poll = (s, label, code = "{{dc}}") => call(s, label, "pair", `{"protocolVersion":"2","action":"poll","deviceCode":"${code}"}`, { sign: false });
  const started = async (s, body) => {
    const r = await start(s, "start", body);
    s.vars.dc = r.raw.body.deviceCode;
    s.vars.uc = r.raw.body.userCode;
    return r;
  };
  const cases = {
    "poll an unknown code": (s) => poll(s, "poll", "x".repeat(43)),
    "poll pending, approve, poll twice": async (s) => {
      await started(s);
      await poll(s, "poll pending");
      await appCall(s, "pendingPairing", (app) => app.pendingPairing(s.vars.uc));
      await appCall(s, "approve", (app) => app.approvePairing({ userCode: s.vars.uc, owner: "alice" }));
      await poll(s, "poll approved");
      await poll(s, "poll collected");
      await appCall(s, "approve again", (app) => app.approvePairing({ userCode: s.vars.uc, owner: "mallory" }));
      await appCall(s, "pendingPairing after approval", (app) => app.pendingPairing(s.vars.uc));
    },
    "user code spellings": async (s) => {
      await started(s);
      const uc = s.vars.uc;
      for (const spelled of [uc.toLowerCase(), uc.replace("-", ""), ` ${uc} `, uc.replace("-", " - "), uc.toLowerCase().replace("-", ".")]) {
        await appCall(s, "pendingPairing spelled", (app) => app.pendingPairing(spelled));
      }
      await appCall(s, "approve lowercase without dash", (app) => app.approvePairing({ userCode: uc.toLowerCase().replace("-", ""), owner: "alice" }));
      await poll(s, "poll");
    },
    "approve unknown or malformed codes": async (s) => {
      for (const code of ["AAAA-AAAA", "", "????", "A".repeat(1000), "\ud800"]) {
        await appCall(s, "approve", (app) => app.approvePairing({ userCode: code, owner: "alice" }));
        await appCall(s, "pendingPairing", (app) => app.pendingPairing(code));
        await appCall(s, "deny", (app) => app.denyPairing(code));
      }
    },
    "deny then poll and approve": async (s) => {
      await started(s);
      await appCall(s, "deny", (app) => app.denyPairing(s.vars.uc));
      await poll(s, "poll denied");
      await appCall(s, "approve denied", (app) => app.approvePairing({ userCode: s.vars.uc, owner: "alice" }));
      await poll(s, "poll again");
    },
    "expiry edges": async (s) => {
      const r = await started(s);
      H.clock.t = r.raw.body.expiresAt - 1;
      await appCall(s, "pendingPairing 1 ms before", (app) => app.pendingPairing(s.vars.uc));
      await poll(s, "poll 1 ms before");
      H.clock.t = r.raw.body.expiresAt;
      await appCall(s, "pendingPairing at expiry", (app) => app.pendingPairing(s.vars.uc));
      await poll(s, "poll at expiry");
      await appCall(s, "approve at expiry", (app) => app.approvePairing({ userCode: s.vars.uc, owner: "alice" }));
      await poll(s, "poll after a late approval");
    },
    "approve then expire then poll": async (s) => {
      const r = await started(s);
      await appCall(s, "approve", (app) => app.approvePairing({ userCode: s.vars.uc, owner: "alice" }));
      H.clock.t = r.raw.body.expiresAt + 1;
      await poll(s, "poll approved after expiry");
    },
    "owners of every shape": async (s) => {
      for (const owner of ["alice", " alice", "ALICE", "\u00e9", "🙂", "a".repeat(10_000)]) {
        await started(s);
        await appCall(s, `approve for ${owner.slice(0, 12)}`, (app) => app.approvePairing({ userCode: s.vars.uc, owner }));
        await poll(s, "poll");
      }
      await appCall(s, "runners for alice", (app) => app.runners("alice"));
    },
    "the same device paired twice": async (s) => {
      await pair(s, { as: "one" });
      await pair(s, { as: "two", owner: "bob" });
      await appCall(s, "runners alice", (app) => app.runners("alice"));
      await appCall(s, "runners bob", (app) => app.runners("bob"));
      await enqueue(s, "job-1");
      await claim(s, "claim as alice's runner", { runner: "one" });
      await claim(s, "claim as bob's runner", { runner: "two" });
    },
    "identity not signing the encryption key": (s) => {
      const device = protocol.publicIdentityOf(H.DEVICE);
      const other = protocol.publicIdentityOf(H.STRANGER);
      return Promise.all([
        start(s, "encryption key of another", JSON.stringify({ ...JSON.parse(H.pairStartBody()), device: { ...device, encryption: other.encryption } })),
      ]);
    },
    "identity keys padded or respelled": async (s) => {
      const device = protocol.publicIdentityOf(H.DEVICE);
      for (const [name, d] of [
        ["identity padded", { ...device, identity: `${device.identity}=` }],
        ["identity junk", { ...device, identity: `${device.identity}!!` }],
        ["encryption padded", { ...device, encryption: `${device.encryption}=` }],
        ["sig standard alphabet", { ...device, encryptionSig: device.encryptionSig.replace(/-/g, "+").replace(/_/g, "/") }],
        ["sig padded", { ...device, encryptionSig: `${device.encryptionSig}==` }],
        ["identity empty", { ...device, identity: "" }],
        ["extra key in device", { ...device, x: 1 }],
      ]) {
        // The same steps whatever the start answered.
        const r = await start(s, name, JSON.stringify({ ...JSON.parse(H.pairStartBody()), device: d }));
        s.vars.dc = r.raw.body?.deviceCode ?? "x".repeat(43);
        await appCall(s, `${name}: approve`, (app) => app.approvePairing({ userCode: r.raw.body?.userCode ?? "NONE-NONE", owner: "alice" }));
        await poll(s, `${name}: poll`);
      }
    },
    "expired pairings after a sweep": async (s) => {
      const r = await started(s);
      s.vars.dc1 = s.vars.dc;
      await started(s);
      await appCall(s, "approve the second", (app) => app.approvePairing({ userCode: s.vars.uc, owner: "alice" }));
      H.clock.t = r.raw.body.expiresAt + 3_600_000;
      await appCall(s, "sweep", (app) => app.sweep());
      await poll(s, "poll the expired one", "{{dc1}}");
      await poll(s, "poll the approved one", "{{dc}}");
      await poll(s, "poll the approved one again", "{{dc}}");
      await appCall(s, "pendingPairing of the expired one", (app) => app.pendingPairing(s.vars.uc));
    },
    "revoke, then pair the same device again": async (s) => {
      await pair(s, { as: "old" });
      await appCall(s, "revoke", (app) => app.revokeRunner(s.vars.old));
      await pair(s, { as: "runner" });
      await enqueue(s, "job-1");
      await claim(s, "the old runner claims", { runner: "old" });
      await claim(s, "the new runner claims");
      await appCall(s, "runners", (app) => app.runners("alice"));
    },
    "many starts from one device": async (s) => {
      for (let i = 0; i < 50; i++) await start(s, `start ${i}`);
      await appCall(s, "runners", (app) => app.runners("alice"));
    },
    "approve with odd owners": async (s) => {
      for (const owner of ["", 7, null, undefined, { id: "alice" }]) {
        await started(s);
        await appCall(s, `approve owner ${JSON.stringify(owner)}`, (app) => app.approvePairing({ userCode: s.vars.uc, owner }));
      }
    },
  };
  for (const [name, fn] of Object.entries(cases)) failures.push(...(await caseOf(name, fn)));
  // Large fields at start, each on a fresh site (a refusal hands out no code,
  // which would shift the placeholders of the next).
  const body = JSON.parse(H.pairStartBody());
  for (const [name, b] of [
    ["version 64", { ...body, daemon: { ...body.daemon, version: "v".repeat(64) } }],
    ["version 65", { ...body, daemon: { ...body.daemon, version: "v".repeat(65) } }],
    ["version 100 KB", { ...body, daemon: { ...body.daemon, version: "v".repeat(100_000) } }],
    ["32 capabilities", { ...body, capabilities: Array(32).fill(H.CAP) }],
    ["33 capabilities", { ...body, capabilities: Array(33).fill(H.CAP) }],
    ["1,000 capabilities", { ...body, capabilities: Array(1000).fill(H.CAP) }],
    ["model 100 KB", { ...body, capabilities: [{ ...H.CAP, model: "m".repeat(100_000) }] }],
    ["knownModels 1,000", { ...body, capabilities: [{ ...H.CAP, knownModels: Array(1000).fill("k") }] }],
  ]) {
    failures.push(
      ...(await caseOf(`large fields at start: ${name}`, async (s) => {
        const r = await start(s, name, JSON.stringify(b));
        await appCall(s, `${name}: pendingPairing`, (app) => app.pendingPairing(r.raw.body?.userCode ?? "NONE-NONE"));
      })),
    );
  }
  return failures;
});

// ---------------------------------------------------------------- audiences

const ODD_AUDIENCES = ["Private", "", "public", "TEAM", " team", "team ", "everyone"];

dtest("audiences: enqueue, claim across owners, result, availability", async () => {
  const failures = [];
  const cycle = (name, enqueueExtra) =>
    scenario(`audience ${name}`, async (s) => {
      await pair(s);
      await pair(s, { owner: "bob", device: H.DEVICE2, as: "runner2", label: "pair bob", caps: [H.TEAM_CAP] });
      // The same steps on both sides whatever each answers, so a refusal
      // on one side shows as a difference, not as a shorter log.
      s.vars["lease:job-a"] = "00000000-0000-4000-8000-00000000000a";
      await enqueue(s, "job-a", enqueueExtra);
      await jobState(s, "stored", "job-a");
      await claim(s, "bob claims with a team offer", { runner: "runner2", keys: H.DEVICE2, caps: [H.TEAM_CAP] });
      await fetchJob(s, "bob fetches", "job-a", { runner: "runner2", keys: H.DEVICE2 });
      await result(s, "bob reports", "job-a", await sealResult("job-a", { keys: H.DEVICE2 }), { runner: "runner2", keys: H.DEVICE2 });
      await jobState(s, "after bob", "job-a");
      await claim(s, "alice claims");
      await result(s, "alice reports", "job-a", await sealResult("job-a"));
      await jobState(s, "end", "job-a");
    });
  const cases = [
    ["omitted", {}],
    ["private", { audience: "private" }],
    ["team", { audience: "team" }],
    ["team, allow bob", { audience: "team", audienceAllow: ["bob"] }],
    ["team, allow carol", { audience: "team", audienceAllow: ["carol"] }],
    ["team, allow nobody", { audience: "team", audienceAllow: [] }],
    ["team, allow BOB", { audience: "team", audienceAllow: ["BOB"] }],
    ["private, allow bob", { audience: "private", audienceAllow: ["bob"] }],
    ...ODD_AUDIENCES.map((a) => [`odd ${JSON.stringify(a)}`, { audience: a }]),
    ...ODD_AUDIENCES.slice(0, 3).map((a) => [`odd ${JSON.stringify(a)}, allow bob`, { audience: a, audienceAllow: ["bob"] }]),
  ];
  for (const [name, extra] of cases) failures.push(...(await cycle(name, extra)));
  // A job an older deployment stored with an odd audience (written straight
  // into each store): it must still complete, never with a 5xx. (The SQL
  // stores' audience column is an enum: no such job can be stored there.)
  for (const audience of SQL ? [] : ["public", "Private", ""]) {
    const id = `job-stored-${audience || "empty"}`;
    const envelope = await protocol.seal({
      plaintext: JSON.stringify({ prompt: "stored earlier" }),
      senderKeys: H.SITE,
      recipientEncryptionPublic: H.SITE.encryptionPublic,
      context: { jobId: id, senderKeyId: H.SITE_KEY_ID, recipientKeyId: H.SITE_KEY_ID, deadlineAt: H.T0 + 86_400_000, direction: "payload" },
    });
    const bobEnv = await sealResult(id, { keys: H.DEVICE2 });
    const aliceEnv = await sealResult(id);
    failures.push(
      ...(await scenario(`stored audience ${JSON.stringify(audience)}`, async (s) => {
        await pair(s);
        await pair(s, { owner: "bob", device: H.DEVICE2, as: "runner2", label: "pair bob", caps: [H.TEAM_CAP] });
        s.vars[`lease:${id}`] = "00000000-0000-4000-8000-00000000000b";
        await s.store.create({ kind: "llm.generate", owner: "alice", audience, id, envelope, sizeClass: "small" }, H.clock.t);
        await jobState(s, "stored", id);
        await claim(s, "bob claims with a team offer", { runner: "runner2", keys: H.DEVICE2, caps: [H.TEAM_CAP] });
        await fetchJob(s, "bob fetches", id, { runner: "runner2", keys: H.DEVICE2 });
        await result(s, "bob reports", id, bobEnv, { runner: "runner2", keys: H.DEVICE2 });
        await claim(s, "alice claims");
        await fetchJob(s, "alice fetches", id);
        await result(s, "alice reports", id, aliceEnv);
        await jobState(s, "end", id);
      })),
    );
  }
  // Wrong types are refused by ours with a TypeError naming the field
  // (issue 25 item 4); compared here for what each side answers.
  for (const [name, extra] of [
    ["type number", { audience: 5 }],
    ["type null", { audience: null }],
    ["owner number", { owner: 7 }],
    ["allow a string", { audience: "team", audienceAllow: "bob" }],
  ]) failures.push(...(await scenario(`audience ${name}`, async (s) => {
    await enqueue(s, "job-t", extra);
    await jobState(s, "stored", "job-t");
  })));
  failures.push(
    ...(await scenario("runnerAvailability", async (s) => {
      await appCall(s, "nobody paired", (app) => app.runnerAvailability({ kind: "llm.generate", owner: "alice" }));
      await pair(s);
      await pair(s, { owner: "bob", device: H.DEVICE2, as: "runner2", label: "pair bob", caps: [H.TEAM_CAP] });
      for (const owner of ["alice", "bob", "carol"]) {
        for (const kind of ["llm.generate", "llm.chat"]) {
          for (const audience of [undefined, "private", "team", ...ODD_AUDIENCES]) {
            for (const audienceAllow of [undefined, ["bob"], []]) {
              const q = { kind, owner, ...(audience === undefined ? {} : { audience }), ...(audienceAllow ? { audienceAllow } : {}) };
              await appCall(s, `availability ${JSON.stringify(q)}`, (app) => app.runnerAvailability(q));
            }
          }
        }
      }
      H.clock.t += 10 * 60_000;
      await appCall(s, "nobody online", (app) => app.runnerAvailability({ kind: "llm.generate", owner: "alice" }));
    })),
  );
  return failures;
});

// ---------------------------------------------------------------- body limits

const CAP_BYTES = 6 * 1024 * 1024 + 512 * 1024;

/** A pair-poll body of exactly `units` UTF-16 units, padded with `unit`. */
function padded(units, unit = "x") {
  const head = '{"protocolVersion":"2","action":"poll","deviceCode":"';
  const tail = '"}';
  const n = Math.floor((units - head.length - tail.length) / unit.length);
  return head + unit.repeat(n) + "x".repeat(units - head.length - tail.length - n * unit.length) + tail;
}

function streamOf(text, chunk = 65_536, { declared } = {}) {
  const bytes = Buffer.from(text, "utf8");
  let at = 0;
  return {
    body: new ReadableStream({
      pull(controller) {
        if (at >= bytes.length) return controller.close();
        controller.enqueue(new Uint8Array(bytes.subarray(at, at + chunk)));
        at += chunk;
      },
    }),
    headers: { "content-type": "application/json", ...(declared === undefined ? {} : { "content-length": String(declared) }) },
  };
}

dtest("body limits: declared, actual, lying content-length, chunked, multibyte", { timeout: 60_000 }, async () => {
  const path = `${H.BASE}/pair`;
  const small = '{"protocolVersion":"2","action":"poll","deviceCode":"' + "y".repeat(43) + '"}';
  const cases = [
    ["declared cap+1, small body", () => ({ headers: { "content-type": "application/json", "content-length": String(CAP_BYTES + 1) }, body: small })],
    ["declared cap, small body", () => ({ headers: { "content-type": "application/json", "content-length": String(CAP_BYTES) }, body: small })],
    ["declared 1e9", () => ({ headers: { "content-type": "application/json", "content-length": "1e9" }, body: small })],
    ["declared 0x800000", () => ({ headers: { "content-type": "application/json", "content-length": "0x800000" }, body: small })],
    ["declared -1", () => ({ headers: { "content-type": "application/json", "content-length": "-1" }, body: small })],
    ["declared words", () => ({ headers: { "content-type": "application/json", "content-length": "lots" }, body: small })],
    ["declared two values", () => ({ headers: { "content-type": "application/json", "content-length": `10, ${CAP_BYTES + 1}` }, body: small })],
    ["declared 10, body cap+1", () => ({ headers: { "content-type": "application/json", "content-length": "10" }, body: padded(CAP_BYTES + 1) })],
    ["body exactly the cap", () => ({ headers: { "content-type": "application/json" }, body: padded(CAP_BYTES) })],
    ["body cap+1", () => ({ headers: { "content-type": "application/json" }, body: padded(CAP_BYTES + 1) })],
    ["body twice the cap", () => ({ headers: { "content-type": "application/json" }, body: padded(2 * CAP_BYTES) })],
    ["2-byte chars: units under, bytes over", () => ({ headers: { "content-type": "application/json" }, body: padded(CAP_BYTES - 10, "é") })],
    ["3-byte chars: units a third of bytes", () => ({ headers: { "content-type": "application/json" }, body: padded(Math.floor(CAP_BYTES / 2), "€") })],
    ["astral chars: units half of bytes", () => ({ headers: { "content-type": "application/json" }, body: padded(Math.floor(CAP_BYTES * 0.9), "🙂") })],
    ["2-byte chars just under the cap in bytes", () => ({ headers: { "content-type": "application/json" }, body: padded(Math.floor(CAP_BYTES / 2) - 40, "é") })],
    ["chunked small", () => streamOf(small)],
    ["chunked exactly the cap", () => streamOf(padded(CAP_BYTES))],
    ["chunked cap+1", () => streamOf(padded(CAP_BYTES + 1))],
    ["chunked cap+1 in 1-byte-odd chunks", () => streamOf(padded(CAP_BYTES + 1), 65_537)],
    ["chunked 3-byte chars over the cap in bytes", () => streamOf(padded(Math.floor(CAP_BYTES / 2), "€"))],
    ["chunked, declared small", () => streamOf(padded(CAP_BYTES + 1), 65_536, { declared: 10 })],
    ["invalid UTF-8 in the body", () => ({ headers: { "content-type": "application/json" }, body: Buffer.concat([Buffer.from('{"protocolVersion":"2","action":"poll","deviceCode":"'), Buffer.from([0xc3, 0xff, 0xfe]), Buffer.from("y".repeat(43) + '"}')]) })],
  ];
  const failures = [];
  for (const [name, make] of cases) {
    failures.push(
      ...(await scenario(`limit: ${name}`, async (s) => {
        const { headers, body } = make();
        const answer = await H.send(s, name, { path, headers, body });
        await H.record(s, name, answer);
      })),
    );
  }
  // Payloads at enqueue whose envelope would be near or over the 6 MiB
  // envelope cap (astral characters count one each in the length rules).
  for (const [name, prompt] of [
    ["a 4 MB ASCII prompt", "a".repeat(4_000_000)],
    ["a million astral characters", "🙂".repeat(1_000_000)],
  ]) {
    failures.push(
      ...(await scenario(`enqueue size: ${name}`, async (s) => {
        await appCall(s, "enqueue", (app) => app.enqueue({ kind: "llm.generate", payload: { prompt }, owner: "alice", id: "job-big" }).then((h) => ({ id: h.id, sizeClass: h.record.sizeClass })));
        const job = await s.store.get("job-big");
        observe(s, "stored", job && { state: job.state, sizeClass: job.sizeClass, ciphertextChars: job.envelope.ciphertext.length });
      })),
    );
  }
  // A signed claim streamed in chunks is served like any other.
  failures.push(
    ...(await scenario("limit: chunked signed claim", async (s) => {
      await paired(s, { second: false });
      const body = H.fill(s, H.claimBody());
      const headers = H.signHeaders({ endpoint: "claim", runnerId: s.vars.runner, body });
      const answer = await H.send(s, "chunked claim", { path: `${H.BASE}/claim`, headers, body: streamOf(body, 7).body });
      await H.record(s, "chunked claim", answer);
      await jobState(s, "claimed", "job-1");
    })),
  );
  return failures;
});

// ---------------------------------------------------------------- sequences and races

/**
 * Await calls started together. Their own log entries are dropped (the order
 * racers finish in is scheduling); the race returns what must hold instead.
 */
async function together(s, promises) {
  const mark = s.log.length;
  const out = await Promise.all(promises);
  s.log.splice(mark);
  return out;
}

dtest("claim / release / revoke / cancel sequences and races", async () => {
  const failures = [];
  const two = async (s) => {
    await pair(s);
    await pair(s, { owner: "alice", device: H.DEVICE2, as: "runner2", label: "pair alice's second" });
  };
  const asB = { runner: "runner2", keys: H.DEVICE2 };
  for (const reason of ["shutdown", "pause", "revoked", "backend-down", "refused"]) {
    failures.push(
      ...(await scenario(`release ${reason}`, async (s) => {
        await two(s);
        await enqueue(s, "job-1");
        await claim(s, "claim");
        await call(s, "release", "release", H.releaseBody([["job-1", "lease:job-1"]], reason));
        await jobState(s, "released", "job-1");
        await call(s, "release again", "release", H.releaseBody([["job-1", "lease:job-1"]], reason));
        await claim(s, "the same runner claims again");
        await claim(s, "the other runner claims", asB);
        await jobState(s, "end", "job-1");
      })),
    );
  }
  const scripts = {
    "release a lease held by the other runner": async (s) => {
      await two(s);
      await enqueue(s, "job-1");
      await claim(s, "claim");
      await call(s, "foreign release", "release", H.releaseBody([["job-1", "lease:job-1"]], "refused", "runner2"), asB);
      await jobState(s, "still held", "job-1");
      await call(s, "release naming the wrong job", "release", H.releaseBody([["job-2", "lease:job-1"]], "refused"));
      await call(s, "release a mix", "release", H.releaseBody([["job-1", "lease:job-1"], ["job-9", "lease:job-1"]], "shutdown"));
    },
    "release after the result": async (s) => {
      await two(s);
      await enqueue(s, "job-1");
      await claim(s, "claim");
      await result(s, "result", "job-1", await sealResult("job-1"));
      await call(s, "release", "release", H.releaseBody([["job-1", "lease:job-1"]], "shutdown"));
      await jobState(s, "end", "job-1");
    },
    "revoke while holding a lease": async (s) => {
      await two(s);
      await enqueue(s, "job-1");
      await claim(s, "claim");
      await appCall(s, "revoke", (app) => app.revokeRunner(s.vars.runner));
      await jobState(s, "after revoke", "job-1");
      await call(s, "heartbeat", "heartbeat", H.heartbeatBody([["job-1", "lease:job-1"]]));
      await fetchJob(s, "fetch", "job-1");
      await result(s, "result", "job-1", await sealResult("job-1"));
      await call(s, "release", "release", H.releaseBody([["job-1", "lease:job-1"]], "revoked"));
      await claim(s, "claim");
      await claim(s, "the other runner claims before lapse", asB);
      H.clock.t += 61_000;
      await claim(s, "the other runner claims after lapse", asB);
      await jobState(s, "end", "job-1");
      await appCall(s, "runners", (app) => app.runners("alice"));
      await appCall(s, "revoke again", (app) => app.revokeRunner(s.vars.runner));
      await appCall(s, "revoke unknown", (app) => app.revokeRunner("runner_nobody"));
    },
    "cancel queued, claimed, fetched": async (s) => {
      await two(s);
      for (const id of ["job-1", "job-2", "job-3"]) await enqueue(s, id);
      await appCall(s, "cancel queued", (app) => app.cancel("job-1"));
      await claim(s, "claim");
      await appCall(s, "cancel claimed", (app) => app.cancel("job-2"));
      await call(s, "heartbeat lists the cancel", "heartbeat", H.heartbeatBody([["job-2", "lease:job-2"], ["job-3", "lease:job-3"]]));
      await fetchJob(s, "fetch a cancelled job", "job-2");
      await result(s, "report canceled", "job-2", await sealResult("job-2", { outcome: { outcome: "canceled" } }), { disposition: "canceled" });
      await appCall(s, "cancel done", (app) => app.cancel("job-2"));
      await appCall(s, "cancel unknown", (app) => app.cancel("job-404"));
      for (const id of ["job-1", "job-2", "job-3"]) await jobState(s, id, id);
    },
    "cancel then release": async (s) => {
      await two(s);
      await enqueue(s, "job-1");
      await claim(s, "claim");
      await appCall(s, "cancel", (app) => app.cancel("job-1"));
      await call(s, "release", "release", H.releaseBody([["job-1", "lease:job-1"]], "shutdown"));
      await jobState(s, "after", "job-1");
      await claim(s, "the other runner claims", asB);
    },
    "dependent jobs": async (s) => {
      await two(s);
      await enqueue(s, "job-1");
      await enqueue(s, "job-2", { dependsOn: ["job-1"] });
      await enqueue(s, "job-3", { dependsOn: ["job-404"] });
      await claim(s, "claim");
      await result(s, "result", "job-1", await sealResult("job-1", { outcome: { outcome: "error", code: "x", message: "m", retryable: false } }), { disposition: "error" });
      await claim(s, "claim again");
      for (const id of ["job-1", "job-2", "job-3"]) await jobState(s, id, id);
    },
    "max 64 over 70 jobs": async (s) => {
      await two(s);
      for (let i = 0; i < 70; i++) await enqueue(s, `job-${String(i).padStart(2, "0")}`);
      const r = await claim(s, "claim 64", { max: 64 });
      observe(s, "claimed ids", r.raw.body.jobs?.map((j) => j.id));
      await claim(s, "claim the rest", { ...asB, max: 64 });
    },
    "ttl and deadline expiry": async (s) => {
      await two(s);
      await enqueue(s, "job-1", { ttlMs: 1000 });
      await enqueue(s, "job-2", { deadlineAt: H.T0 + 500 });
      H.clock.t += 1000;
      await claim(s, "claim at the edge");
      await appCall(s, "sweep", (app) => app.sweep());
      for (const id of ["job-1", "job-2"]) await jobState(s, id, id);
    },
  };
  for (const [name, fn] of Object.entries(scripts)) failures.push(...(await scenario(name, fn)));
  // Races: the same calls started together. Which racer finishes first is
  // scheduling, not behaviour (ours answers a result in one native call, the
  // reference awaits several times), so what is compared is what must hold
  // whoever wins: one holder, one accepted result, an end state that matches
  // the winner, never an error.
  const status = (r) => r.raw?.status ?? (r.ok === false ? "threw" : 200);
  const races = {
    "two runners claim one job": async (s) => {
      await two(s);
      await enqueue(s, "job-1");
      const [a, b] = await together(s, [claim(s, "claim a"), claim(s, "claim b", asB)]);
      const job = await s.store.get("job-1");
      return { handed: a.raw.body.jobs.length + b.raw.body.jobs.length, state: job.state, attempts: job.attempts };
    },
    "two results for one lease": async (s) => {
      await two(s);
      await enqueue(s, "job-1");
      await claim(s, "claim");
      const env = await sealResult("job-1");
      const rs = await together(s, [result(s, "result a", "job-1", env), result(s, "result b", "job-1", env)]);
      const job = await s.store.get("job-1");
      return { statuses: rs.map(status), accepted: rs.filter((r) => r.raw.body.accepted).length, state: job.state };
    },
    "result and release together": async (s) => {
      await two(s);
      await enqueue(s, "job-1");
      await claim(s, "claim");
      const env = await sealResult("job-1");
      const [r, l] = await together(s, [result(s, "result", "job-1", env), call(s, "release", "release", H.releaseBody([["job-1", "lease:job-1"]], "shutdown"))]);
      const job = await s.store.get("job-1");
      const resultWon = r.raw.body.accepted === true;
      return {
        statuses: [status(r), status(l)],
        oneWinner: resultWon !== (l.raw.body.released.length === 1),
        stateMatches: job.state === (resultWon ? "ok" : "queued"),
      };
    },
    "claim and revoke together": async (s) => {
      await two(s);
      await enqueue(s, "job-1");
      const [c] = await together(s, [claim(s, "claim"), appCall(s, "revoke", (app) => app.revokeRunner(s.vars.runner))]);
      const job = await s.store.get("job-1");
      const got = c.raw.status === 200 && c.raw.body.jobs.length === 1;
      return { consistent: got ? job.state === "claimed" : c.raw.status === 403 && job.state === "queued" };
    },
    "fetch, heartbeat, result together": async (s) => {
      await two(s);
      await enqueue(s, "job-1");
      await claim(s, "claim");
      const env = await sealResult("job-1");
      const [f, h, r] = await together(s, [fetchJob(s, "fetch", "job-1"), call(s, "heartbeat", "heartbeat", H.heartbeatBody([["job-1", "lease:job-1"]])), result(s, "result", "job-1", env)]);
      const job = await s.store.get("job-1");
      return { fetch: [200, 404].includes(f.raw.status), heartbeat: h.raw.status, result: r.raw.body, state: job.state };
    },
    "cancel and claim together": async (s) => {
      await two(s);
      await enqueue(s, "job-1");
      const [, c] = await together(s, [appCall(s, "cancel", (app) => app.cancel("job-1")), claim(s, "claim")]);
      const job = await s.store.get("job-1");
      const got = c.raw.body.jobs.length === 1;
      return { status: c.raw.status, consistent: got ? job.state === "claimed" : job.state === "canceled" };
    },
  };
  for (const [name, fn] of Object.entries(races)) {
    failures.push(
      ...(await scenario(`race: ${name}`, async (s) => {
        s.racy = true;
        observe(s, "what must hold", await fn(s));
      })),
    );
  }
  return failures;
});

// ---------------------------------------------------------------- seeded mutations

const SEED = Number(process.env.DIFF_SEED ?? 20261202);
const MUTATIONS = Number(process.env.DIFF_MUTATIONS ?? 3200);


function mutator(rand) {
  const int = (n) => Math.floor(rand() * n);
  const pick = (xs) => xs[int(xs.length)];
  const chance = (p) => rand() < p;
  const junk = () =>
    pick([null, true, false, 0, -1, 1.5, raw("-0"), raw("1e400"), raw("1.0"), "", "x", "\ud800", raw('"\\ud800"'), [], [[[]]], {}, { a: 1 }, "🙂".repeat(3), "a".repeat(121), raw("9007199254740993")]);
  const paths = (v, at = []) => {
    const out = [at];
    if (Array.isArray(v)) v.forEach((x, i) => out.push(...paths(x, [...at, i])));
    else if (v && typeof v === "object" && !(RAW in v) && !(DUP in v)) for (const k of Object.keys(v)) out.push(...paths(v[k], [...at, k]));
    return out;
  };
  const getAt = (v, p) => p.reduce((o, k) => o[k], v);
  const setAt = (v, p, x) => {
    if (p.length === 0) return x;
    getAt(v, p.slice(0, -1))[p[p.length - 1]] = x;
    return v;
  };
  const swaps = ["{{runner}}", "{{runner2}}", "runner_00000000-0000-4000-8000-000000000000", "{{lease:m-prev}}", "00000000-0000-4000-8000-000000000000", "m-prev", "m-404"];
  /** One mutation of `body`; pushes what it did to `did`. */
  const mutate = (body, did) => {
    const p = pick(paths(body));
    const target = getAt(body, p);
    const at = p.join(".") || "(root)";
    const k = int(14);
    switch (k) {
      case 0:
        if (target && typeof target === "object" && !Array.isArray(target) && !(RAW in target)) {
          const key = pick(["x", "__proto__", "constructor", "protocolversion", "runnerid", "0", "\ud800"]);
          target[key] = junk();
          did.push(`extra key ${JSON.stringify(key)} at ${at}`);
        }
        return body;
      case 1:
        if (p.length) {
          const parent = getAt(body, p.slice(0, -1));
          if (Array.isArray(parent)) parent.splice(p[p.length - 1], 1);
          else delete parent[p[p.length - 1]];
          did.push(`drop ${at}`);
        }
        return body;
      case 2:
        did.push(`junk at ${at}`);
        return setAt(body, p, junk());
      case 3:
        did.push(`null at ${at}`);
        return setAt(body, p, null);
      case 4: {
        const n = pick([0, 1, 19, 20, 21, 119, 120, 121, 1000]);
        const unit = pick(["a", "🙂", "\ud800", "é"]);
        did.push(`string of ${n} ${JSON.stringify(unit)} at ${at}`);
        return setAt(body, p, unit.repeat(n));
      }
      case 5:
        if (typeof target === "number") {
          did.push(`number respelled at ${at}`);
          return setAt(body, p, pick([raw(`${target}.0`), raw(`${target}e0`), raw(`${target * 10}e-1`), raw(`-${target}`), target + 1, target - 1, raw("1e400"), raw(`${target}.5`)]));
        }
        did.push(`number at ${at}`);
        return setAt(body, p, pick([raw("64"), raw("65"), raw("0"), raw("-0"), raw("1.5"), 1]));
      case 6:
        if (p.length && typeof p[p.length - 1] === "string") {
          const parent = getAt(body, p.slice(0, -1));
          const key = p[p.length - 1];
          const other = chance(0.5) || at === "protocolVersion" ? junk() : pick(swaps);
          parent[key] = chance(0.5) ? { [DUP]: [other, parent[key]] } : { [DUP]: [parent[key], other] };
          did.push(`duplicate ${at}`);
        }
        return body;
      case 7:
        if (body && typeof body === "object" && !Array.isArray(body) && !(RAW in body)) {
          body.protocolVersion = pick(["1", "3", "", 2, null, "2 ", "v2", raw('"\\u0032"'), undefined, "2"]);
          did.push("protocolVersion");
        }
        return body;
      case 8:
        if (typeof target === "string") {
          did.push(`lone surrogate in ${at}`);
          return setAt(body, p, raw(JSON.stringify(target).slice(0, -1) + pick(['\\udbff"', '\\udc00"', '\\ud83d"'])));
        }
        return body;
      case 9:
        if (Array.isArray(target) && target.length) {
          const n = pick([2, 3, 65, 300]);
          while (target.length < n) target.push(structuredClone(target[0]));
          did.push(`array of ${n} at ${at}`);
        }
        return body;
      case 10:
        did.push("not an object");
        return pick([[], "2", 5, null, [body]]);
      case 11:
        if (typeof target === "string") {
          did.push(`case or neighbour at ${at}`);
          return setAt(body, p, pick([target.toUpperCase(), `${target} `, ` ${target}`, "team", "private", "start", "poll", "ok", "error"]));
        }
        return body;
      case 12:
        // (Not into protocolVersion: the refusal names the version asked
        // for, and a live id differs between the two sides.)
        if ((typeof target === "string" || target === undefined) && at !== "protocolVersion") {
          const to = pick(swaps);
          did.push(`swap ${at} to ${to}`);
          return setAt(body, p, to);
        }
        return body;
      default:
        return mutate(mutate(body, did), did);
    }
  };
  /** Text-level edits after serialising. */
  const mutateText = (text, did) => {
    switch (int(8)) {
      case 0:
        did.push("truncated");
        return text.slice(0, int(text.length));
      case 1:
        did.push("whitespace");
        return text.replace(/([,:{[])/g, (m) => (chance(0.3) ? `${m}${pick([" ", "\n", "\t", "\r\n"])}` : m));
      case 2:
        did.push("BOM");
        return `\uFEFF${text}`;
      case 3:
        did.push("trailing garbage");
        return `${text}${pick(["x", "}", " ", "\u0000", ",{}"])}`;
      case 4:
        did.push("escaped letters");
        return text.replace(/"([a-z])/g, (m, c) => (chance(0.3) ? `"\\u00${c.charCodeAt(0).toString(16)}` : m));
      case 5:
        did.push("deep nesting");
        return text.replace(/\}$/, `,"deep":${"[".repeat(pick([100, 1000, 10000]))}${"]".repeat(pick([100, 1000, 10000]))}}`);
      default:
        return text;
    }
  };
  /** Header edits after signing. */
  const mutateHeaders = (did) => {
    const k = int(10);
    switch (k) {
      case 0: {
        const off = pick([-120_001, -120_000, 120_000, 120_001, -1, 1]);
        did.push(`issued-at ${off}`);
        return { issuedAtOffset: off };
      }
      case 1: {
        const spell = pick([
          ["issued-at .0", (t) => `${t}.0`],
          ["issued-at hex", (t) => `0x${Number(t).toString(16)}`],
          ["issued-at spaces", (t) => ` ${t} `],
          ["issued-at .5", (t) => `${t}.5`],
          ["issued-at e", (t) => `${Number(t) / 1000}e3`],
        ]);
        did.push(spell[0]);
        return { edit: (h) => ({ ...h, "x-byollm-issued-at": spell[1](h["x-byollm-issued-at"]) }) };
      }
      case 2: {
        const spell = pick([
          ["signature padded", (x) => `${x}==`],
          ["signature junk", (x) => `${x}.`],
          ["signature standard alphabet", (x) => x.replace(/-/g, "+").replace(/_/g, "/")],
          ["signature truncated", (x) => x.slice(0, -2)],
          ["signature flipped", (x) => (x[5] === "A" ? `${x.slice(0, 5)}B${x.slice(6)}` : `${x.slice(0, 5)}A${x.slice(6)}`)],
        ]);
        did.push(spell[0]);
        return { edit: (h) => ({ ...h, "x-byollm-signature": spell[1](h["x-byollm-signature"]) }) };
      }
      case 3:
        did.push("runner header of the other runner");
        return { edit: (h, side) => ({ ...h, "x-byollm-runner": side.vars.runner2 }) };
      case 4:
        did.push("unsigned");
        return { unsigned: true };
      case 5:
        did.push("signed by the other device");
        return { keys: H.DEVICE2 };
      case 6: {
        // The clock moves on between the claim and this request: the lease
        // (60 s) is 1 ms from expiry, at it, past it, or an hour gone.
        const jump = pick([59_999, 60_000, 60_001, 3_660_000]);
        did.push(`time jump ${jump}`);
        return { jump };
      }
      default:
        return {};
    }
  };
  return { int, pick, chance, mutate, mutateText, mutateHeaders };
}

/** A valid request of `endpoint` about job `id`, as a value with `{{slots}}`. */
function validRequest(endpoint, id, envelope, g) {
  // A fresh value each time: mutations edit it in place.
  return structuredClone(validRequestShared(endpoint, id, envelope, g));
}

function validRequestShared(endpoint, id, envelope, g) {
  switch (endpoint) {
    case "claim":
      return { protocolVersion: "2", runnerId: "{{runner}}", capabilities: [g.chance(0.8) ? H.CAP : H.TEAM_CAP], max: 1 + g.int(4) };
    case "fetch":
      return { protocolVersion: "2", runnerId: "{{runner}}", jobId: id, leaseId: `{{lease:${id}}}` };
    case "heartbeat":
      return { protocolVersion: "2", runnerId: "{{runner}}", daemonVersion: "0.1.1", capabilities: [H.CAP], activeLeases: [{ jobId: id, leaseId: `{{lease:${id}}}` }] };
    case "result":
      return { protocolVersion: "2", runnerId: "{{runner}}", jobId: id, leaseId: `{{lease:${id}}}`, envelope: { ...envelope }, disposition: "ok" };
    case "release":
      return { protocolVersion: "2", runnerId: "{{runner}}", leases: [{ jobId: id, leaseId: `{{lease:${id}}}` }], reason: g.pick(["refused", "shutdown", "pause", "backend-down", "revoked"]) };
    case "pair-start":
      return JSON.parse(H.pairStartBody(g.chance(0.5) ? H.DEVICE : H.DEVICE2));
    case "pair-poll":
      return { protocolVersion: "2", action: "poll", deviceCode: "{{dc}}" };
  }
}

/** Fresh sides, each with two paired runners of alice. */
async function mutationSides() {
  const sides = [];
  for (const which of ["ref", "ours"]) {
    const s = await H.makeSide(which);
    const a = await pair(s);
    const b = await pair(s, { device: H.DEVICE2, as: "runner2", label: "pair second" });
    assert.ok(a && b, `pairing failed on ${which}: ${JSON.stringify(s.log).slice(0, 1500)}`);
    s.vars["lease:m-prev"] = "00000000-0000-4000-8000-0000000000ff";
    s.log.length = 0;
    sides.push(s);
  }
  return sides;
}

dtest(`${MUTATIONS} seeded mutations of valid requests (seed ${SEED})`, { timeout: 120_000 }, async () => {
  const rand = prng(SEED);
  const g = mutator(rand);
  const failures = [];
  const t0 = H.T0;
  H.clock.t = t0;
  let [ref, ours] = await mutationSides();
  const endpoints = ["claim", "fetch", "heartbeat", "result", "result", "release", "fetch", "pair-start", "pair-poll"];
  const counts = { differing: 0, resets: 0 };
  const statuses = new Map();
  let offset = 0;
  let prev = null;
  for (let i = 0; i < MUTATIONS; i++) {
    H.clock.t += 7;
    const id = `m-${i}`;
    const endpoint = g.pick(endpoints);
    const envelope = endpoint === "result" ? await sealResult(id, g.chance(0.1) ? { keys: H.DEVICE2 } : {}) : undefined;
    const did = [];
    let value = validRequest(endpoint, id, envelope, g);
    let headerPlan = {};
    const roll = g.int(10);
    if (roll < 6) value = g.mutate(value, did);
    let text = toText(value);
    if (roll >= 6 && roll < 8) text = g.mutateText(text, did);
    if (roll >= 8 && !endpoint.startsWith("pair")) headerPlan = g.mutateHeaders(did);
    if (roll === 9 && did.length === 0) value = g.mutate(value, did), (text = toText(value));
    const label = `mutation #${i} ${endpoint} [${did.join("; ") || "unchanged"}]`;
    const marks = [];
    for (const s of [ref, ours]) {
      H.clock.t = t0 + 7 * (i + 1) + offset;
      marks.push(s.log.length);
      s.vars["lease:m-prev"] = (prev && s.vars[`lease:${prev}`]) || s.vars["lease:m-prev"];
      if (endpoint === "pair-poll") {
        const r = await call(s, `${label}: start`, "pair", H.pairStartBody(), { sign: false });
        s.vars.dc = r.raw.body?.deviceCode ?? "none";
      } else if (endpoint !== "pair-start" && endpoint !== "claim") {
        await enqueue(s, id);
        await claim(s, `${label}: claim`, { max: 64 });
      } else if (endpoint === "claim") {
        await enqueue(s, id);
      }
      if (endpoint === "fetch") s.lastFetchJob = id;
      H.clock.t += headerPlan.jump ?? 0;
      const ep = endpoint.startsWith("pair") ? "pair" : endpoint;
      await call(s, label, ep, text, {
        lenient: true,
        sign: !endpoint.startsWith("pair") && !headerPlan.unsigned,
        keys: headerPlan.keys ?? H.DEVICE,
        issuedAt: H.clock.t + (headerPlan.issuedAtOffset ?? 0),
        mutateHeaders: headerPlan.edit,
        deviceKeys: H.DEVICE,
      });
      if (endpoint !== "pair-start" && endpoint !== "pair-poll") await jobState(s, `${label}: state`, id);
      // What the store kept from the device: the pairing a start made, the
      // runner a heartbeat touched.
      const last = s.log[s.log.length - 1];
      if (endpoint === "pair-start") {
        const userCode = [...s.names].find(([, name]) => name === last.value.body?.userCode)?.[0] ?? "NONE-NONE";
        await appCall(s, `${label}: pendingPairing`, (app) => app.pendingPairing(userCode));
      }
      if (endpoint === "heartbeat") await appCall(s, `${label}: runners`, (app) => app.runners("alice"));
    }
    const answer = ref.log.slice(marks[0]).find((e) => e.label === label)?.value;
    const key = `${endpoint} ${answer?.status ?? "rejects"}`;
    statuses.set(key, (statuses.get(key) ?? 0) + 1);
    offset += headerPlan.jump ?? 0;
    const step = (s, m) => ({ log: s.log.slice(m) });
    const before = seen.deliberate.size + [...seen.deliberate.values()].reduce((a, b) => a + b, 0) + [...seen.open.values()].reduce((a, b) => a + b, 0);
    const f = compareLogs("", step(ref, marks[0]), step(ours, marks[1]), { deliberate: ACTIVE, open: OPEN_DIVERGENCES, seen, consequences: true });
    const after = seen.deliberate.size + [...seen.deliberate.values()].reduce((a, b) => a + b, 0) + [...seen.open.values()].reduce((a, b) => a + b, 0);
    if (f.length) failures.push(...f.map((x) => `seed ${SEED}, ${x}\n  body: ${text.slice(0, 400)}`));
    if (f.length || after !== before) {
      // A difference (documented or not) leaves the two stores apart; start
      // both again so it cannot spread into the next comparison.
      counts.differing++;
      counts.resets++;
      [ref, ours] = await mutationSides();
      prev = null;
    } else {
      prev = id;
    }
    if (failures.length > 30) break;
  }
  const list = (m) => [...m].map(([k, n]) => `${k} x${n}`).join(", ");
  console.log(`mutations: ${MUTATIONS}, seed ${SEED}, steps with a documented or open difference: ${counts.differing}`);
  console.log(`reference answers by endpoint and status: ${list(statuses)}`);
  // The mutations must reach every stage, or the comparison proves little.
  for (const needed of ["claim 200", "claim 400", "claim 401", "fetch 200", "fetch 404", "result 200", "result 400", "release 200", "heartbeat 200", "pair-start 200", "pair-poll 200", "pair-poll 404"]) {
    assert.ok((statuses.get(needed) ?? 0) >= 3, `only ${statuses.get(needed) ?? 0} mutations answered ${needed}`);
  }
  return failures;
});

// ---------------------------------------------------------------- app-level mutations

const APP_MUTATIONS = Number(process.env.DIFF_APP_MUTATIONS ?? 400);

dtest(`${APP_MUTATIONS} seeded mutations of enqueue and the app's other calls (seed ${SEED})`, async () => {
  const rand = prng(SEED ^ 0x5eed);
  const g = mutator(rand);
  const failures = [];
  const values = [undefined, null, "", "x", 0, -1, 1.5, 1e400 * 0, Infinity, -Infinity, NaN, 2 ** 53, "5", [], ["job-0"], [1], {}, true, "\ud800", "a".repeat(300)];
  const fields = ["kind", "payload", "owner", "audience", "purpose", "audienceAllow", "dependsOn", "ttlMs", "deadlineAt", "id", "extra"];
  const payloads = [{ prompt: "p" }, { prompt: "" }, { messages: [{ role: "user", content: "c" }] }, { prompt: "p", system: "s" }, { prompt: 5 }, { prompt: "p", model: "m" }, null, "p", [], { messages: [] }];
  const plans = [];
  for (let i = 0; i < APP_MUTATIONS; i++) {
    const input = { kind: "llm.generate", payload: { prompt: `p${i}` }, owner: "alice", id: `a-${i}` };
    const did = [];
    const n = 1 + g.int(2);
    for (let k = 0; k < n; k++) {
      const f = g.pick(fields);
      const v = f === "payload" ? g.pick(payloads) : f === "kind" ? g.pick(["llm.chat", "llm.embed", "LLM.GENERATE", 5, undefined]) : g.pick(values);
      if (v === undefined && g.chance(0.5)) delete input[f];
      else input[f] = v;
      did.push(`${f}=${typeof v === "string" ? JSON.stringify(v.slice(0, 12)) : Array.isArray(v) ? JSON.stringify(v) : String(v)}`);
    }
    if (typeof input.id !== "string" || input.id === "") input.id = input.id ?? undefined;
    plans.push({ input, did });
  }
  // One pair of sites for all of them, started again after any difference.
  let sides = null;
  const fresh = async () => {
    const out = [];
    for (const which of ["ref", "ours"]) {
      const s = await H.makeSide(which);
      await pair(s);
      s.log.length = 0;
      out.push(s);
    }
    return out;
  };
  sides = await fresh();
  for (let i = 0; i < plans.length; i++) {
    const { input, did } = plans[i];
    const label = `enqueue mutation #${i} [${did.join("; ")}]`;
    const marks = [];
    for (const s of sides) {
      H.clock.t = H.T0 + i;
      marks.push(s.log.length);
      const r = await appCall(s, label, (app) => app.enqueue({ ...input }).then((h) => h.record));
      // (A generated id differs per side: looked up only when the app chose it.)
      await jobState(s, `${label}: stored`, typeof input.id === "string" ? input.id : "<none>");
      // The other calls with the same odd values.
      const odd = input.owner;
      await appCall(s, `${label}: runners(owner)`, (app) => app.runners(odd));
      await appCall(s, `${label}: job(id)`, (app) => app.job(input.id));
      await appCall(s, `${label}: cancel(id)`, (app) => app.cancel(input.id));
      await appCall(s, `${label}: availability`, (app) => app.runnerAvailability({ kind: input.kind, owner: odd, ...(input.audience === undefined ? {} : { audience: input.audience }) }));
    }
    const [ref, ours] = sides;
    const before = [...seen.deliberate.values(), ...seen.open.values()].reduce((a, b) => a + b, 0);
    const f = compareLogs("", { log: ref.log.slice(marks[0]) }, { log: ours.log.slice(marks[1]) }, { deliberate: ACTIVE, open: OPEN_DIVERGENCES, seen, consequences: true });
    const after = [...seen.deliberate.values(), ...seen.open.values()].reduce((a, b) => a + b, 0);
    if (f.length) failures.push(...f.map((x) => `seed ${SEED}, ${x}`));
    if (f.length || after !== before) sides = await fresh();
    if (failures.length > 30) break;
  }
  return failures;
});

test("every deliberate difference quotes the document that states it", () => {
  for (const d of ACTIVE) assert.ok(d.where, `${d.id}: no document line`);
  console.log(`deliberate: ${ACTIVE.map((d) => `${d.id} (${d.where})`).join("; ")}`);
  for (const d of DELIBERATE.filter((x) => !ACTIVE.includes(x))) {
    console.log(`not in force (its document line is missing, so the difference fails the suite): ${d.id}: ${d.missing}`);
  }
  // The entries this build relies on must stay documented.
  for (const id of ["strict request signatures", "/fetch compares the body's runnerId with the signer", "a result on a lapsed lease is refused before any sweep"]) {
    assert.ok(ACTIVE.some((d) => d.id === id), `${id} lost its document line`);
  }
});

test("no 5xx, no rejected promise, no unhandled rejection from ours", async () => {
  // Let any stray promise settle first.
  await new Promise((r) => setTimeout(r, 50));
  const list = (m) => [...m].map(([id, n]) => `${id} x${n}`).join(", ") || "none";
  console.log(`compared (ours on ${STORE}): ${H.stats.scenarios} scenarios and mutation steps, ${H.stats.entries} answers and records`);
  console.log(`deliberate differences seen: ${list(seen.deliberate)}`);
  console.log(`open divergences seen: ${list(seen.open)}`);
  for (const o of OPEN_DIVERGENCES) if (!seen.open.has(o.id)) console.log(`open divergence not seen in this run (fixed, or not merged yet?): ${o.id}`);
  assertNoFatal();
  assert.deepEqual(unhandledRejections().map(String), []);
});

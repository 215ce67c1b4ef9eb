// The differential harness: the reference @byollm/server and ours, each with
// its own MemoryStore, app and fetch handler over the same site keys, driven
// in-process through `createFetchHandler` with `Request` objects under one
// shared fake clock. A scenario is a script run once per side; every answer it
// records is normalised (runner ids, lease ids, pairing codes become
// placeholders in order of appearance; ciphertexts become their opened text)
// so the two logs compare entry by entry. The simulated daemon signs, seals
// and opens with @byollm/protocol, the reference's own crypto.
import { readFileSync } from "node:fs";
import * as protocol from "@byollm/protocol";
import { makeSite } from "../hardening-harness.mjs";
import { oursStore } from "./diff-stores.mjs";

const vectors = JSON.parse(readFileSync(new URL("../../tests/vectors/keys.json", import.meta.url), "utf8"));
export const SITE = vectors.parties.site.storedKeys;
export const DEVICE = vectors.parties.device.storedKeys;
export const DEVICE2 = vectors.parties.device2.storedKeys;
export const STRANGER = vectors.parties.stranger.storedKeys;
export const SITE_KEY_ID = protocol.keyId(protocol.publicIdentityOf(SITE).identity);
export const keyIdOf = (keys) => protocol.keyId(protocol.publicIdentityOf(keys).identity);

export const ORIGIN = "https://app.example";
export const BASE = "/byollm";
/** A fixed start, so every run sees the same timestamps. */
export const T0 = Date.UTC(2026, 5, 1, 12, 0, 0);
/** The one clock both sides read. */
export const clock = { t: T0 };

export const CAP = Object.freeze({ kind: "llm.generate", service: "local", backendId: "ollama", backendClass: "http", model: "m1", offerScope: "private" });
export const TEAM_CAP = Object.freeze({ ...CAP, offerScope: "team" });

/** Answers from ours that must never happen, whatever the reference does. */
export const fatal = [];
const unhandled = [];
process.on("unhandledRejection", (reason) => unhandled.push(reason));
export const unhandledRejections = () => unhandled;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const RUNNER = /^runner_[0-9a-f-]{36}$/i;
const ID_INSIDE = /runner_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/gi;

/** One implementation under test: a site, its live ids, and its log. */
export async function makeSide(which, options = {}) {
  // Ours on the store DIFF_STORE names (helpers/diff-stores.mjs), the reference on its MemoryStore.
  const given = which === "ours" ? await oursStore() : undefined;
  const site = await makeSite(which, { clock, siteKeys: SITE, ...(given ? { store: given.store } : {}), ...options });
  return Object.assign(site, {
    which,
    /** Every job the side's store holds. */
    allJobs: given?.allJobs ?? (async () => [...site.store.allJobs()]),
    // live value -> placeholder, and the counters that name placeholders
    names: new Map(),
    counts: {},
    vars: {},
    log: [],
  });
}

/** The placeholder for a live value, minted in order of appearance. */
export function nameOf(side, value, kind) {
  let name = side.names.get(value);
  if (name === undefined) {
    side.counts[kind] = (side.counts[kind] ?? 0) + 1;
    name = `<${kind}#${side.counts[kind]}>`;
    side.names.set(value, name);
  }
  return name;
}

/** Replace live ids by placeholders; ciphertexts by their length class. */
export function normalize(side, value, key) {
  if (typeof value === "string") {
    const known = side.names.get(value);
    if (known !== undefined) return known;
    if (key === "deviceCode") return nameOf(side, value, "deviceCode");
    if (key === "userCode") return nameOf(side, value, "userCode");
    if (RUNNER.test(value)) return nameOf(side, value, "runner");
    if (UUID.test(value)) return nameOf(side, value, "uuid");
    if (key === "ciphertext") return "<ciphertext>";
    // Ids inside longer text (an echoed version, a lease id with a stray
    // character): each becomes its placeholder, in order of appearance.
    return value.replace(ID_INSIDE, (m) => side.names.get(m) ?? nameOf(side, m, m.startsWith("runner_") ? "runner" : "uuid"));
  }
  if (Array.isArray(value)) return value.map((v) => normalize(side, v));
  if (value && typeof value === "object") {
    const out = {};
    for (const [k, v] of Object.entries(value)) out[k] = normalize(side, v, k);
    return out;
  }
  return value;
}

/** Put a side's live values into `{{name}}` slots of a request template. */
export function fill(side, text, { lenient = false } = {}) {
  return text.replace(/\{\{([^{}]+)\}\}/g, (slot, name) => {
    if (!(name in side.vars)) {
      if (lenient) return slot; // a mutation spelled the slot differently: sent as written
      throw new Error(`no live value for {{${name}}} on ${side.which}`);
    }
    return side.vars[name];
  });
}

export function signHeaders({ keys = DEVICE, endpoint, runnerId, issuedAt = clock.t, body }) {
  const sig = protocol.signRequest(keys, { endpoint, runnerId, issuedAt, body });
  return {
    "content-type": "application/json",
    "x-byollm-runner": runnerId,
    "x-byollm-issued-at": String(issuedAt),
    "x-byollm-signature": sig.signature,
  };
}

/**
 * Send one Request to a side's handler and return what a host would see:
 * status, the headers that matter, the JSON body (normalised). A handler that
 * rejects is recorded as `{ rejects }` (a host 500); for ours that, and any
 * 5xx, is fatal.
 */
export async function send(side, label, { method = "POST", path, headers = {}, body } = {}) {
  const init = { method, headers };
  if (body !== undefined) init.body = body;
  if (body && typeof body === "object" && typeof body.getReader === "function") init.duplex = "half"; // a stream
  let answer;
  let request;
  try {
    request = new Request(`${ORIGIN}${path}`, init);
  } catch (e) {
    // Not a request a host could hand over (a header outside Latin-1, say).
    return { unsendable: String(e?.message ?? e).slice(0, 200) };
  }
  try {
    const response = await side.handler(request);
    const text = await response.text();
    let json;
    try {
      json = JSON.parse(text);
    } catch {
      json = { nonJson: text.slice(0, 200) };
    }
    answer = {
      status: response.status,
      type: response.headers.get("content-type"),
      cache: response.headers.get("cache-control"),
      ...(response.headers.has("retry-after") ? { retryAfter: response.headers.get("retry-after") } : {}),
      body: json,
    };
  } catch (e) {
    answer = { rejects: String(e?.message ?? e).slice(0, 300) };
  }
  if (side.which === "ours" && (answer.rejects !== undefined || answer.status >= 500)) {
    fatal.push({ label, answer, request: { method, path, headers, body: typeof body === "string" ? body.slice(0, 500) : String(body) } });
  }
  return answer;
}

/**
 * A protocol call from the simulated daemon: `template` is the body text with
 * `{{var}}` slots; it is filled for this side, signed (unless `sign: false`)
 * and sent. `mutateHeaders` edits the signed headers after signing.
 */
export async function call(side, label, endpoint, template, opts = {}) {
  const { sign = true, keys = DEVICE, runner = "runner", issuedAt = clock.t, mutateHeaders, path = `${BASE}/${endpoint}`, extraHeaders = {}, method } = opts;
  const body = fill(side, template, { lenient: opts.lenient });
  let headers = { "content-type": "application/json" };
  if (sign) headers = signHeaders({ keys, endpoint, runnerId: side.vars[runner] ?? runner, issuedAt, body });
  headers = { ...headers, ...extraHeaders };
  if (mutateHeaders) headers = mutateHeaders(headers, side);
  const answer = await send(side, label, { method, path, headers, body });
  return record(side, label, answer, opts.deviceKeys ?? keys);
}

/** Normalise an answer (opening a fetched envelope first) and log it. */
export async function record(side, label, answer, deviceKeys = DEVICE) {
  if (answer.status === 200 && answer.body?.envelope?.ciphertext && answer.body.envelope.direction === "payload") {
    const env = answer.body.envelope;
    // The plaintext, as the device would read it: both sides must hand out
    // the same prompt sealed to the same device.
    let opened;
    try {
      const jobId = side.lastFetchJob;
      const r = await protocol.open({
        envelope: env,
        recipientKeys: deviceKeys,
        senderIdentityPublic: SITE.identityPublic,
        expected: { jobId, senderKeyId: SITE_KEY_ID, recipientKeyId: keyIdOf(deviceKeys), direction: "payload" },
      });
      opened = r.ok ? r.plaintext : `not opened: ${r.reason ?? JSON.stringify(r)}`;
    } catch (e) {
      opened = `open threw: ${e.message}`;
    }
    answer = { ...answer, body: { ...answer.body, opened } };
  }
  const normalized = normalize(side, answer);
  side.log.push({ label, value: normalized });
  return { raw: answer, value: normalized };
}

/** Log any other observation (an app call's value or error, a stored record). */
export function observe(side, label, value) {
  const normalized = normalize(side, JSON.parse(JSON.stringify(value ?? null)));
  side.log.push({ label, value: normalized });
  return normalized;
}

/** Run an app method; its value or its error (name and message) is logged. */
export async function appCall(side, label, fn) {
  try {
    const value = await fn(side.app);
    return { ok: true, value, logged: observe(side, label, { value: value === undefined ? "<undefined>" : value }) };
  } catch (e) {
    return { ok: false, error: e, logged: observe(side, label, { error: { name: e?.name, message: String(e?.message ?? e) } }) };
  }
}

/** A stored job as the store holds it (no sweep first), logged. */
export async function jobState(side, label, jobId) {
  const job = await side.store.get(jobId);
  return observe(side, label, job);
}

// ------------------------------------------------------------------ daemon steps

export const pairStartBody = (device = DEVICE, caps = [CAP], extra = {}) =>
  JSON.stringify({
    protocolVersion: "2",
    action: "start",
    daemon: { version: "0.1.1", label: "diff", platform: "linux" },
    device: protocol.publicIdentityOf(device),
    capabilities: caps,
    ...extra,
  });

/**
 * Pair `device` for `owner`: start, approve, poll. Sets `vars[as]` to the
 * runner id (default "runner") and logs each step.
 */
export async function pair(side, { owner = "alice", device = DEVICE, caps = [CAP], as = "runner", label = "pair" } = {}) {
  const start = await call(side, `${label}: start`, "pair", pairStartBody(device, caps), { sign: false });
  if (start.raw.status !== 200) return null;
  side.vars[`${as}DeviceCode`] = start.raw.body.deviceCode;
  side.vars[`${as}UserCode`] = start.raw.body.userCode;
  const approved = await appCall(side, `${label}: approve`, (app) => app.approvePairing({ userCode: start.raw.body.userCode, owner }));
  if (!approved.ok) return null;
  side.vars[as] = approved.value.id;
  nameOf(side, approved.value.id, "runner");
  await call(side, `${label}: poll`, "pair", `{"protocolVersion":"2","action":"poll","deviceCode":"{{${as}DeviceCode}}"}`, { sign: false });
  return approved.value;
}

export const claimBody = (runner = "runner", caps = [CAP], max = 4) =>
  `{"protocolVersion":"2","runnerId":"{{${runner}}}","capabilities":${JSON.stringify(caps)},"max":${max}}`;
export const fetchBody = (jobId, lease = "lease", runner = "runner") =>
  `{"protocolVersion":"2","runnerId":"{{${runner}}}","jobId":${JSON.stringify(jobId)},"leaseId":"{{${lease}}}"}`;
export const heartbeatBody = (leases = [], runner = "runner", caps = [CAP]) =>
  `{"protocolVersion":"2","runnerId":"{{${runner}}}","daemonVersion":"0.1.1","capabilities":${JSON.stringify(caps)},"activeLeases":[${leases
    .map(([jobId, lease]) => `{"jobId":${JSON.stringify(jobId)},"leaseId":"{{${lease}}}"}`)
    .join(",")}]}`;
export const releaseBody = (leases, reason = "refused", runner = "runner") =>
  `{"protocolVersion":"2","runnerId":"{{${runner}}}","leases":[${leases
    .map(([jobId, lease]) => `{"jobId":${JSON.stringify(jobId)},"leaseId":"{{${lease}}}"}`)
    .join(",")}],"reason":"${reason}"}`;

/** Claim; every stub's lease id becomes `vars["lease:<jobId>"]` (and `lease` for the first). */
export async function claim(side, label, { runner = "runner", caps = [CAP], max = 4, keys = DEVICE } = {}) {
  const r = await call(side, label, "claim", claimBody(runner, caps, max), { runner, keys });
  if (r.raw.status === 200) {
    for (const stub of r.raw.body.jobs ?? []) {
      side.vars[`lease:${stub.id}`] = stub.lease.id;
      if (!side.vars.lease || runner === "runner") side.vars.lease = stub.lease.id;
    }
  }
  return r;
}

export async function fetchJob(side, label, jobId, { lease = `lease:${jobId}`, runner = "runner", keys = DEVICE, ...opts } = {}) {
  side.lastFetchJob = jobId;
  return call(side, label, "fetch", fetchBody(jobId, lease, runner), { runner, keys, deviceKeys: keys, ...opts });
}

/** A sealed result for `jobId` from `keys` to the site. */
export async function sealResult(jobId, { keys = DEVICE, outcome = { outcome: "ok", text: "done" }, plaintext, ran } = {}) {
  return protocol.seal({
    plaintext:
      plaintext ??
      JSON.stringify({ outcome, ran: ran ?? { model: "m1", backendClass: "http", durationMs: 1, stop: "end", stopReported: true } }),
    senderKeys: keys,
    recipientEncryptionPublic: SITE.encryptionPublic,
    context: { jobId, senderKeyId: keyIdOf(keys), recipientKeyId: SITE_KEY_ID, deadlineAt: clock.t + 86_400_000, direction: "result" },
  });
}

export const resultBody = (jobId, envelope, { lease = `lease:${jobId}`, runner = "runner", disposition = "ok" } = {}) =>
  `{"protocolVersion":"2","runnerId":"{{${runner}}}","jobId":${JSON.stringify(jobId)},"leaseId":"{{${lease}}}","envelope":${JSON.stringify(envelope)},"disposition":${JSON.stringify(disposition)}}`;

export async function result(side, label, jobId, envelope, { runner = "runner", keys = DEVICE, lease, disposition, ...opts } = {}) {
  return call(side, label, "result", resultBody(jobId, envelope, { lease, runner, disposition }), { runner, keys, ...opts });
}

// ------------------------------------------------------------------ comparison

/**
 * Run `script(side)` on a fresh reference side and a fresh side of ours, the
 * shared clock reset to `T0` before each; returns both logs. Sealed envelopes
 * a script needs on both sides are made once, before, so both see the same
 * bytes.
 */
export async function both(script, options = {}) {
  const out = {};
  for (const which of ["ref", "ours"]) {
    clock.t = T0;
    const side = await makeSide(which, options);
    await script(side);
    // What each scenario leaves behind in the runner records.
    for (const owner of ["alice", "bob"]) await appCall(side, `end: runners of ${owner}`, (app) => app.runners(owner));
    // ... and in the jobs (every record, by id; compared unless a documented
    // difference earlier in the scenario already set the two apart).
    // (A race leaves whichever state its winner made: it says what must hold
    // itself and sets `racy`.)
    if (!side.racy) observe(side, "end: every job", (await side.allJobs()).sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)));
    out[which] = side;
  }
  clock.t = T0;
  return out;
}

const text = (v) => JSON.stringify(v);

/**
 * Compare two logs entry by entry. A difference is first matched against
 * `deliberate` (documented differences), then `open` (known, not yet fixed);
 * anything else is returned as a failure. Each list entry: `{ id, label:
 * RegExp, ref?: (value) => bool, ours: (value, referenceValue) => bool }`.
 */
/** How much was compared in this process. */
export const stats = { scenarios: 0, entries: 0 };

export function compareLogs(scenario, ref, mine, { deliberate = [], open = [], seen, consequences = false }) {
  const failures = [];
  stats.scenarios++;
  stats.entries += Math.min(ref.log.length, mine.log.length);
  if (ref.log.length !== mine.log.length) {
    failures.push(`${scenario}: ${ref.log.length} reference entries, ${mine.log.length} ours:\n  ref:  ${ref.log.map((e) => e.label).join(" | ")}\n  ours: ${mine.log.map((e) => e.label).join(" | ")}`);
  }
  const n = Math.min(ref.log.length, mine.log.length);
  let documented = false;
  for (let i = 0; i < n; i++) {
    const a = ref.log[i];
    const b = mine.log[i];
    if (a.label !== b.label) {
      failures.push(`${scenario}: step ${i} is "${a.label}" on the reference, "${b.label}" on ours`);
      break;
    }
    if (text(a.value) === text(b.value)) continue;
    const label = scenario ? `${scenario} / ${a.label}` : a.label;
    // The end of a scenario shows again what a documented difference made.
    if (a.label.startsWith("end: ") && documented) continue;
    const match = (list) =>
      list.find((d) => d.label.test(label) && (!d.ref || d.ref(a.value)) && d.ours(b.value, a.value));
    const d = match(deliberate);
    if (d) {
      documented = true;
      seen?.deliberate.set(d.id, (seen.deliberate.get(d.id) ?? 0) + 1);
      // With `consequences`, what follows a documented difference in the
      // same step (the stored record it leaves) is its consequence.
      if (consequences) break;
      continue;
    }
    const o = match(open);
    if (o) {
      documented = true;
      seen?.open.set(o.id, (seen.open.get(o.id) ?? 0) + 1);
      if (consequences) break;
      continue;
    }
    failures.push(`${label}\n  reference: ${text(a.value).slice(0, 700)}\n  ours:      ${text(b.value).slice(0, 700)}`);
  }
  return failures;
}

// The six protocol endpoints over any ByollmStore, without a transport.
// Crypto, schemas and provenance are the core's; this file is the order of
// operations and the wire answers.
import { native, PROTOCOL, type FetchAnswer, type ResultSource, type SiteKeyringHandle } from "./native.js";
import { generateDeviceCode, generateUserCode, hashSecret } from "./ids.js";
import { serveDirect, servesDirectly, unreadEnvelopeStore } from "./memory.js";
import { recorderFor, type Registry } from "./metrics.js";
import { sqlStorePaths } from "./sql-store.js";
import type {
  AuthContext,
  ByollmStore,
  Capability,
  ClaimArgs,
  Endpoint,
  HandlerConfig,
  HandlerResult,
  JobOutcome,
  JobRecord,
  LeaseRef,
  PublicIdentity,
  ReleaseArgs,
  ResultProvenance,
  RunnerRecord,
  SealedEnvelope,
  TouchArgs,
} from "./types.js";

export type { AuthContext, HandlerConfig, HandlerResult };

/** The protocol version this package serves. */
export const SERVED_PROTOCOL_VERSION = PROTOCOL.version;

const DEFAULT_LEASE_MS = 60_000;
const DEFAULT_PAIRING_TTL_MS = 600_000;
const DEFAULT_POLL_INTERVAL_MS = 2_000;
/** Envelopes bigger than this are opened/sealed on the thread pool, off the event loop. */
const ASYNC_CRYPTO_THRESHOLD = PROTOCOL.asyncCryptoThreshold;

const INCONSISTENT_KEYS =
  "siteKeys are not internally consistent: the encryption key is not signed by the identity key. " +
  "Generate a fresh pair with `npx --no keygen`.";

type WireCode = "bad-request" | "unauthorized" | "revoked" | "not-found" | "server-error";
const STATUS: Record<WireCode, number> = {
  "bad-request": 400,
  unauthorized: 401,
  revoked: 403,
  "not-found": 404,
  "server-error": 500,
};

// The daemon prints this URL next to the pairing code and refuses a pair
// answer whose URL is not absolute: a missing origin (`undefined/pair`) would
// fail every pairing, so it fails here, once, at start-up.
function checkVerificationUrl(value: unknown): void {
  const url = typeof value === "string" && URL.canParse(value) ? new URL(value) : undefined;
  if (url === undefined || (url.protocol !== "https:" && url.protocol !== "http:")) {
    throw new Error(
      `verificationUrl must be an absolute http(s) URL, the page where a person approves a pairing code ` +
        `(e.g. https://app.example/pair); got ${JSON.stringify(value) ?? String(value)}. ` +
        `If it is built from an environment variable such as PUBLIC_ORIGIN, set that variable.`,
    );
  }
}

function fail(error: WireCode, message: string): HandlerResult {
  return { status: STATUS[error], body: { error, message } };
}

function ok(body: unknown): HandlerResult {
  return { status: 200, body };
}

/** A 200 whose body the core wrote as JSON text: the object for `handle`'s callers, the same text for HTTP. */
function prepared(text: string): HandlerResult {
  const body = JSON.parse(text) as object;
  preparedTexts.set(body, text);
  return ok(body);
}

/**
 * The refusal for a runner that is unknown or revoked, else null: checked
 * after the signature in `#authed`, and again on the runner a SQL store's
 * own call read with the request's work.
 */
function runnerRefusal(fresh: RunnerRecord | null): HandlerResult | null {
  if (!fresh) return fail("unauthorized", "this runner is not recognised");
  if (fresh.revokedAt !== null) return fail("revoked", "this runner has been revoked by its owner");
  return null;
}

/**
 * Response texts built along with their body objects, for the bodies whose
 * `JSON.stringify` is costly (a large fetch answer). Keyed by the body
 * object, so a `HandlerResult` keeps its public shape.
 */
const preparedTexts = new WeakMap<object, string>();

/** The wire text of a handler's body: `JSON.stringify(body)`, or the same text prepared earlier. */
export function bodyText(body: unknown): string | undefined {
  if (typeof body === "object" && body !== null) {
    const text = preparedTexts.get(body);
    if (text !== undefined) return text;
  }
  return JSON.stringify(body);
}

/** A body already checked against its endpoint's schema, or the fact that it failed. */
export type CheckedBody = { ok: true; body: Record<string, unknown> } | { ok: false };

interface PairStart {
  action: "start";
  daemon: { version: string; label: string; platform: "darwin" | "linux" | "win32" };
  device: PublicIdentity;
  capabilities: Capability[];
}
type PairPoll = { action: "poll"; deviceCode: string };
// The other bodies carry the fields the store calls take, under the same names.
type ClaimBody = Pick<ClaimArgs, "runnerId" | "capabilities" | "max">;
type FetchBody = LeaseRef & { runnerId: string };
type HeartbeatBody = Pick<TouchArgs, "runnerId" | "daemonVersion" | "capabilities"> & { activeLeases: LeaseRef[] };
type ResultBody = FetchBody & { envelope: SealedEnvelope; disposition: JobOutcome["outcome"] };
type ReleaseBody = Pick<ReleaseArgs, "runnerId" | "leases" | "reason">;

/**
 * The strict `{runnerId, issuedAt, signature}` shape of a request signature:
 * non-empty strings, a positive safe-integer timestamp, no other keys.
 */
function asSignature(value: unknown): { runnerId: string; issuedAt: number; signature: string } | null {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return null;
  const v = value as Record<string, unknown>;
  for (const key of Object.keys(v)) {
    if (key !== "runnerId" && key !== "issuedAt" && key !== "signature") return null;
  }
  const { runnerId, issuedAt, signature } = v;
  if (typeof runnerId !== "string" || runnerId.length === 0) return null;
  if (typeof signature !== "string" || signature.length === 0) return null;
  if (typeof issuedAt !== "number" || !Number.isSafeInteger(issuedAt) || issuedAt <= 0) return null;
  return { runnerId, issuedAt, signature };
}

/** Check a parsed JSON value against an endpoint's schema (used by `handle`, which gets objects). */
function checkValue(endpoint: Endpoint, body: unknown): CheckedBody {
  let json: string | undefined;
  try {
    json = JSON.stringify(body);
  } catch {
    return { ok: false };
  }
  if (json === undefined) return { ok: false };
  // The HTTP path's one inspection. A wrong protocol version is a schema
  // failure here (the schemas pin it), so any stage but "ok" is a refusal.
  const inspected = native.inspectRequest(endpoint, json);
  return inspected.stage === "ok" ? { ok: true, body: inspected.body } : { ok: false };
}

/**
 * The transport-free protocol handler. `handle` takes an already-parsed body;
 * the HTTP handler (`createFetchHandler`) adds the version check and parses
 * the body once in the core.
 */
export class ByollmHandlers {
  readonly #endpoints: Endpoints;
  readonly #metrics: Registry | undefined; // metrics:

  constructor(config: HandlerConfig) {
    this.#endpoints = new Endpoints(config);
    this.#metrics = recorderFor(config.store, config.metrics); // metrics:
  }

  /**
   * Serve one call. `body` is the parsed, untrusted JSON; `auth` carries the
   * signature and the exact text it covers. No version check here: the
   * endpoint schemas pin `protocolVersion: "2"`, so a wrong one is a schema failure.
   */
  async handle(endpoint: Endpoint, body: unknown, auth: AuthContext): Promise<HandlerResult> {
    const started = performance.now(); // metrics:
    let result: HandlerResult | undefined; // metrics:
    try {
      result = await this.#endpoints.dispatch(endpoint, checkValue(endpoint, body), auth);
      return result;
    } finally {
      this.#metrics?.request(endpoint, result?.status ?? 500, false, started, body, result?.body); // metrics:
    }
  }
}

/**
 * The six endpoints over one store, behind `ByollmHandlers` and
 * `createFetchHandler` (which hands it bodies it checked already).
 */
export class Endpoints {
  readonly #store: ByollmStore;
  readonly #verificationUrl: string;
  readonly #leaseMs: number;
  readonly #pairingTtlMs: number;
  readonly #pollIntervalMs: number;
  readonly #now: () => number;
  readonly #keyring: SiteKeyringHandle;
  readonly #siteKeyId: string;
  readonly #siteIdentity: PublicIdentity;
  readonly #metrics: Registry | undefined; // metrics:

  constructor(config: HandlerConfig) {
    // Refuse to start with keys whose encryption half is not signed by the
    // identity half: every daemon would refuse this site one pairing at a time.
    let consistent = false;
    try {
      consistent = native.verifyPublicIdentity(native.publicIdentityOf(config.siteKeys));
    } catch {
      consistent = false;
    }
    if (!consistent) throw new Error(INCONSISTENT_KEYS);
    checkVerificationUrl(config.verificationUrl);
    this.#keyring = new native.SiteKeyring(config.siteKeys);
    this.#siteKeyId = this.#keyring.keyId;
    this.#siteIdentity = this.#keyring.publicIdentity();
    this.#store = config.store;
    this.#verificationUrl = config.verificationUrl;
    this.#leaseMs = config.leaseMs ?? DEFAULT_LEASE_MS;
    this.#pairingTtlMs = config.pairingTtlMs ?? DEFAULT_PAIRING_TTL_MS;
    this.#pollIntervalMs = config.pollIntervalMs ?? DEFAULT_POLL_INTERVAL_MS;
    this.#now = config.now ?? Date.now;
    this.#metrics = recorderFor(config.store, config.metrics); // metrics:
  }

  /** Serve one call whose body was checked against its endpoint's schema (one parse per request). */
  async dispatch(endpoint: Endpoint, checked: CheckedBody, auth: AuthContext): Promise<HandlerResult> {
    switch (endpoint) {
      case "pair":
        if (!checked.ok) return fail("bad-request", "pair request failed schema validation");
        return this.#pair(checked.body as unknown as PairStart | PairPoll);
      case "claim":
        return this.#authed(auth, checked, (b, r) => this.#claim(b as unknown as ClaimBody, r));
      case "fetch":
        return this.#authed(auth, checked, (b, r) => this.#fetch(b as unknown as FetchBody, r));
      case "heartbeat":
        return this.#authed(auth, checked, (b, r) => this.#heartbeat(b as unknown as HeartbeatBody, r));
      case "result":
        return this.#authed(auth, checked, (b, r) => this.#result(b as unknown as ResultBody, r));
      case "release":
        return this.#authed(auth, checked, (b, r) => this.#release(b as unknown as ReleaseBody, r), false);
      default:
        return fail("not-found", "unknown endpoint");
    }
  }

  /**
   * Authentication before the schema, so a stranger probing an endpoint learns
   * nothing about its wire format; one message for stale and forged signatures,
   * so a forger is not told which half already works. `rereadsRunner`: the
   * endpoint's own SQL store call reads the runner again (claim, fetch,
   * heartbeat, result), so a runner read earlier may check the signature.
   */
  async #authed(
    auth: AuthContext,
    checked: CheckedBody,
    run: (body: Record<string, unknown>, runner: RunnerRecord) => Promise<HandlerResult>,
    rereadsRunner = true,
  ): Promise<HandlerResult> {
    const signature = asSignature(auth.signature);
    if (signature === null) return fail("unauthorized", "this request is not signed");
    // A SQL store's earlier read of the runner serves to check the signature
    // (the identity is pinned at approval); whether it still exists and is
    // not revoked is read again with the request's own work (runnerRefusal).
    const known = checked.ok && rereadsRunner ? sqlStorePaths(this.#store)?.knownRunner(signature.runnerId) : undefined;
    const runner = known ?? (await this.#store.getRunner(signature.runnerId));
    if (!runner) return fail("unauthorized", "this runner is not recognised");
    // Against the identity pinned at approval, never a key the request carries.
    const failure = native.verifyRequest({
      identityPublic: runner.device.identity,
      endpoint: auth.endpoint,
      body: auth.rawBody,
      signature,
      now: this.#now(),
    });
    if (failure !== null) return fail("unauthorized", "this request's signature is not valid");
    const revoked = runnerRefusal(runner);
    if (revoked) return revoked;
    if (!checked.ok) return fail("bad-request", "request body failed schema validation");
    // Every signed body names its runner, which must be the signer (the
    // reference skips this on fetch; a body naming someone else is never honest).
    if (checked.body["runnerId"] !== runner.id) {
      return fail("unauthorized", "runner id does not match the signing key");
    }
    return run(checked.body, runner);
  }

  /**
   * The fast path for our MemoryStore: a daemon's ordinary claim, fetch or
   * result served in one native call (src/direct.rs), with the same answer
   * the general path gives. Null when it does not apply or declines (any
   * error, refusal or unusual request), and the general path answers.
   */
  serveDirect(endpoint: Endpoint, rawBody: string, headers: Headers): string | null {
    const store = this.#store;
    if (!servesDirectly(store)) return null;
    if (endpoint !== "claim" && endpoint !== "fetch" && endpoint !== "result") return null;
    // A large result goes to the thread pool on the general path; its body
    // is not copied across only to be declined there.
    if (rawBody.length > ASYNC_CRYPTO_THRESHOLD) return null;
    const runnerId = headers.get("x-byollm-runner");
    const issuedAt = headers.get("x-byollm-issued-at");
    const signature = headers.get("x-byollm-signature");
    if (runnerId === null || issuedAt === null || signature === null) return null;
    const call = { endpoint, body: rawBody, runnerId, issuedAt, signature };
    return serveDirect(store, this.#keyring, call, this.#leaseMs, this.#now(), this.#metrics?.native ?? null); // metrics: the lane records job latencies
  }

  async #pair(request: PairStart | PairPoll): Promise<HandlerResult> {
    const now = this.#now();
    if (request.action === "start") {
      const deviceCode = generateDeviceCode();
      const expiresAt = now + this.#pairingTtlMs;
      // Otherwise a caller could pair someone's identity with an encryption
      // key it holds the secret for, and read everything later sealed to it.
      // Each key text must be its canonical spelling too: what is kept is
      // exactly the keys, never keys padded with junk.
      const refusal = native.deviceIdentityRefusal(request.device);
      if (refusal !== null) return fail("bad-request", refusal);
      // A code a live pairing holds is never handed out twice: approving it
      // would pair whichever device the approver did not mean.
      const userCode = await this.#freeUserCode(now);
      if (userCode === null) return fail("server-error", "no free pairing code was found; try again");
      await this.#store.createPairing({
        device: request.device,
        deviceCodeHash: hashSecret(deviceCode),
        userCode,
        state: "pending",
        owner: null,
        runnerId: null,
        collected: false,
        label: request.daemon.label,
        platform: request.daemon.platform,
        daemonVersion: request.daemon.version,
        capabilities: request.capabilities,
        expiresAt,
        createdAt: now,
      });
      return ok({
        deviceCode,
        userCode,
        verificationUrl: this.#verificationUrl,
        expiresAt,
        pollIntervalMs: this.#pollIntervalMs,
      });
    }

    const pairing = await this.#store.getPairingByDeviceCodeHash(hashSecret(request.deviceCode));
    if (!pairing) return fail("not-found", "unknown device code");
    if (pairing.state === "denied") return ok({ status: "denied" });
    if (pairing.state === "pending" && pairing.expiresAt <= now) return ok({ status: "expired" });
    if (pairing.state === "approved" && !pairing.collected && pairing.runnerId !== null && pairing.owner !== null) {
      // The site's keys travel only with an approval, and only once.
      const response = {
        status: "approved",
        runnerId: pairing.runnerId,
        owner: pairing.owner,
        sites: { [this.#siteKeyId]: this.#siteIdentity },
      };
      await this.#store.consumePairingToken(pairing.deviceCodeHash);
      return ok(response);
    }
    if (pairing.state === "approved") return fail("not-found", "this pairing has already been collected");
    return ok({ status: "pending" });
  }

  /** A fresh user code no pending, unexpired pairing holds (null after 8 draws that all were). */
  async #freeUserCode(now: number): Promise<string | null> {
    for (let draw = 0; draw < 8; draw++) {
      const userCode = generateUserCode();
      const holder = await this.#store.getPairingByUserCode(userCode);
      if (!holder || holder.state !== "pending" || holder.expiresAt <= now) return userCode;
    }
    return null;
  }

  async #claim(request: ClaimBody, runner: RunnerRecord): Promise<HandlerResult> {
    const now = this.#now();
    // The capabilities of this request, not the stored ones: a daemon that just
    // lost a backend must not be handed work for it.
    const claimArgs = { runnerId: runner.id, capabilities: request.capabilities, max: request.max, leaseMs: this.#leaseMs, now };
    // A SQL store claims in one call that reads the runner afresh (see runnerRefusal).
    const paths = sqlStorePaths(this.#store);
    const out = paths ? await paths.claimFor(claimArgs) : { runner, jobs: await this.#store.claim({ ...claimArgs, runnerOwner: runner.owner }) };
    const refused = runnerRefusal(out.runner);
    if (refused) return refused;
    this.#metrics?.claimed(out.jobs, now); // metrics: enqueue → first claim
    const claimed = out.jobs.map(({ id, kind, audience, owner, purpose, sizeClass, deadlineAt, claimableAt, ttlMs, lease }) => {
      if (!lease) {
        throw new Error(
          `store returned job ${id} from claim with no lease; the store contract requires a claimed job to hold one`,
        );
      }
      const purposeJson = purpose === undefined ? undefined : JSON.stringify(purpose);
      return {
        ...{ id, kind, audience, owner, purposeJson, sizeClass, ttlMs },
        deadlineAt: deadlineAt ?? undefined,
        claimableAt: claimableAt ?? undefined,
        leaseId: lease.id,
        leaseRunnerId: lease.runnerId,
        leaseExpiresAt: lease.expiresAt,
      };
    });
    // The stubs are the core's (src/direct.rs, `claim_answer`), as on the fast path.
    return prepared(native.claimAnswer(claimed, this.#siteKeyId, this.#leaseMs, now));
  }

  async #fetch(request: FetchBody, runner: RunnerRecord): Promise<HandlerResult> {
    const read = await this.#jobFor(runner.id, request.jobId);
    if ("refused" in read) return read.refused;
    const job = read.job;
    // One answer for "no such job", "not yours" and "a lease you no longer hold".
    const held = job?.lease;
    if (
      !job ||
      !held ||
      !native.leaseCheck(held.id, held.runnerId, Number(held.expiresAt), request.leaseId, runner.id, this.#now()).fetchHeld
    ) {
      return fail("not-found", "no such lease on this job");
    }
    // A large envelope our MemoryStore has not handed to JS yet is resealed
    // where it lies (same open and seal, no megabyte string in and out).
    const stored = unreadEnvelopeStore(job);
    let answer: FetchAnswer | null;
    try {
      answer =
        stored !== undefined
          ? await stored.resealForDeviceAsync(this.#keyring, job.id, job.createdAt, runner.device)
          : await this.#keyring.resealForDevice(job.envelope, job.id, job.createdAt, runner.device);
    } catch {
      // Opening failures come back as null; a throw here means the device's
      // pinned encryption key is not a 32-byte X25519 key (signed, so it passed
      // pairing, but nothing can be sealed to it). The reference lets the
      // request reject (a host 500); it is the client's key, so say so with a 400.
      return fail("bad-request", "this device's encryption key cannot be sealed to");
    }
    if (answer === null) return fail("server-error", "this job's payload could not be opened");
    // The core wrote the answer's text with the reseal.
    const body = { envelope: answer.envelope };
    preparedTexts.set(body, answer.text);
    return ok(body);
  }

  /** The job a runner's request names; on a SQL store read with the runner, whose refusal comes back instead. */
  async #jobFor(runnerId: string, jobId: string): Promise<{ job: JobRecord | null } | { refused: HandlerResult }> {
    const paths = sqlStorePaths(this.#store);
    if (!paths) return { job: await this.#store.get(jobId) };
    const out = await paths.getJobFor(runnerId, jobId);
    const refused = runnerRefusal(out.runner);
    return refused ? { refused } : { job: out.job };
  }

  async #heartbeat(request: HeartbeatBody, runner: RunnerRecord): Promise<HandlerResult> {
    const now = this.#now();
    const touch = { runnerId: runner.id, capabilities: request.capabilities, daemonVersion: request.daemonVersion, now };
    const paths = sqlStorePaths(this.#store);
    let lost: readonly LeaseRef[];
    let cancel: readonly LeaseRef[];
    if (paths) {
      const out = await paths.heartbeatFor({ ...touch, leases: request.activeLeases, leaseMs: this.#leaseMs });
      const refused = runnerRefusal(out.runner);
      if (refused) return refused;
      ({ lost, cancel } = out);
    } else {
      await this.#store.touchRunner(touch);
      ({ lost } = await this.#store.renewLeases({ runnerId: runner.id, leases: request.activeLeases, leaseMs: this.#leaseMs, now }));
      cancel = await this.#store.listCancelRequests(runner.id);
    }
    return ok({
      sites: { [this.#siteKeyId]: this.#siteIdentity },
      awaitingConsent: [],
      cancel: [...cancel],
      lost: [...lost],
      serverTime: now,
    });
  }

  async #result(request: ResultBody, runner: RunnerRecord): Promise<HandlerResult> {
    const now = this.#now();
    const source = { runnerId: runner.id, runnerOwner: runner.owner };
    const open = (audience: string): Promise<OpenedOutcome> =>
      openOutcome(this.#keyring, request.envelope, request.jobId, runner.device.identity, request.disposition, { audience, ...source });
    const paths = sqlStorePaths(this.#store);
    let opened: OpenedOutcome | undefined;
    let read: { job: JobRecord | null } | undefined;
    if (paths) {
      // The result opens without the job (it is sealed to the job id the
      // request names), so a SQL store reads the runner and the job and
      // completes in one call when the request plainly holds the job. A
      // private job is the common case; any other answer comes back unwritten
      // and is decided below, as after a plain read.
      opened = await open("private");
      if (opened.ok) {
        const out = await paths.resultFor({
          runnerId: runner.id,
          jobId: request.jobId,
          leaseId: request.leaseId,
          outcome: opened.outcome,
          provenance: opened.provenance,
          now,
        });
        const refused = runnerRefusal(out.runner);
        if (refused) return refused;
        if (out.accepted) {
          this.#metrics?.done(request.jobId, now - out.createdAt); // metrics: enqueue → accepted result
          return ok({ accepted: true, state: out.state });
        }
        read = { job: out.job };
      }
    }
    if (read === undefined) {
      const fresh = await this.#jobFor(runner.id, request.jobId);
      if ("refused" in fresh) return fresh.refused;
      read = fresh;
    }
    const job = read.job;
    if (!job) return fail("not-found", "unknown job");
    // A live lease answers only to the runner it was granted to, and only
    // until it expires (ids travel in stubs, so another paired runner may
    // know one); refused with the store's own non-holder answer. The rule
    // is the core's (src/direct.rs), which the fast path uses too.
    const lease = job.lease;
    if (
      lease &&
      native.leaseCheck(lease.id, lease.runnerId, Number(lease.expiresAt), request.leaseId, runner.id, now).resultRefused
    ) {
      return prepared(native.resultAnswer(false, false, job.state));
    }

    // The SQL path opened it as a private job's result; any other audience
    // is opened again for its own provenance.
    const outcome = opened !== undefined && (!opened.ok || job.audience === "private") ? opened : await open(job.audience);
    if (!outcome.ok) return fail("bad-request", outcome.why);
    const { accepted, duplicate, job: updated } = await this.#store.complete({
      jobId: request.jobId,
      runnerId: runner.id,
      // The holder is the grant: any paired runner presenting the live lease id
      // and a result sealed with its own key is accepted.
      holder: { by: "lease", leaseId: request.leaseId },
      outcome: outcome.outcome,
      provenance: outcome.provenance,
      now,
    });
    if (accepted && duplicate !== true) this.#metrics?.done(request.jobId, now - (updated ?? job).createdAt); // metrics: enqueue → accepted result
    return prepared(native.resultAnswer(accepted, duplicate === true, updated?.state ?? job.state));
  }

  async #release(request: ReleaseBody, runner: RunnerRecord): Promise<HandlerResult> {
    const now = this.#now();
    // A cancel request outlives a release in the store (it is keyed by job,
    // and only a completion clears it), so the job would go back to the
    // queue and the request would reach whichever runner claims it next.
    // The owner asked for a cancel: a released job that was asked to stop
    // ends canceled instead.
    const pending = await this.#store.listCancelRequests(runner.id);
    const released = await this.#store.release({ runnerId: runner.id, leases: request.leases, reason: request.reason, now });
    if (pending.length > 0) {
      const asked = new Set(pending.map((ref) => ref.jobId));
      for (const jobId of released) {
        if (asked.has(jobId)) await this.#store.cancel(jobId, now);
      }
    }
    return ok({ released });
  }
}

export type OpenedOutcome = { ok: true; outcome: JobOutcome; provenance: ResultProvenance } | { ok: false; why: string };

/**
 * Open a device's sealed result and accept it, or say why not, in one call
 * to the core (`SiteKeyring.acceptResult`, the rules the fast path uses
 * too). Shared by the handlers and the cloud lane.
 */
export async function openOutcome(
  keyring: SiteKeyringHandle,
  envelope: SealedEnvelope,
  jobId: string,
  deviceIdentity: string,
  disposition: string,
  source: ResultSource,
): Promise<OpenedOutcome> {
  const answer = await keyring.acceptResult(envelope, jobId, deviceIdentity, disposition, source);
  if (!answer.ok) return answer;
  const { outcome, provenance } = JSON.parse(answer.accepted) as { outcome: JobOutcome; provenance: ResultProvenance };
  return { ok: true, outcome, provenance };
}

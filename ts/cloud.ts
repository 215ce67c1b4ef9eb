// The site's side of a relay (the cloud lane): publish stubs, and in `pump()`
// seal payloads to whichever device claimed and collect sealed results.
// Daemons never reach this site on this lane, so the site polls, signing each
// call with its identity key (`site/<endpoint>`).
import { EnqueueRefused, RelayUnavailable } from "./errors.js";
import { native, PROTOCOL, type SiteKeyringHandle } from "./native.js";
import type {
  ByollmStore,
  CloudLaneOptions,
  JobOutcome,
  JobRecord,
  PublicIdentity,
  PumpReport,
  ResultProvenance,
  SealedEnvelope,
  StoredKeys,
} from "./types.js";

export { EnqueueRefused, RelayUnavailable };
export type { CloudLaneOptions, PumpReport };

const PROTOCOL_VERSION = PROTOCOL.version;

interface PendingClaim {
  jobId: string;
  device: PublicIdentity;
  runnerId: string;
  leaseId: string;
  awaitingUntil: number;
  leaseExpiresAt: number;
}

interface FinishedJob {
  jobId: string;
  envelope: SealedEnvelope;
  disposition: JobOutcome["outcome"];
  runnerId: string;
  leaseId: string;
  device: PublicIdentity;
  runnerOwner: string;
}

export class CloudLane {
  readonly #options: CloudLaneOptions;
  readonly #store: ByollmStore;
  readonly #keyring: SiteKeyringHandle;
  readonly #now: () => number;
  readonly #fetch: typeof fetch;

  constructor(deps: { options: CloudLaneOptions; store: ByollmStore; siteKeys: StoredKeys; now: () => number }) {
    this.#options = deps.options;
    this.#store = deps.store;
    this.#keyring = new native.SiteKeyring(deps.siteKeys);
    this.#now = deps.now;
    this.#fetch = deps.options.fetch ?? globalThis.fetch;
  }

  /**
   * Send the job's stub (never the payload, never `audienceAllow`) so the relay
   * can route it. A 409 means the relay declined to queue it: EnqueueRefused.
   */
  async publish(record: JobRecord): Promise<void> {
    const stub = {
      id: record.id,
      kind: record.kind,
      owner: record.owner,
      site: this.#keyring.keyId,
      audience: record.audience,
      ...(record.purpose === undefined ? {} : { purpose: record.purpose }),
      sizeClass: record.sizeClass,
      streaming: false,
      // The job's own deadline, else the end of its TTL window.
      deadlineAt: native.deadlineFor(record.deadlineAt, record.claimableAt, record.ttlMs, this.#now()),
    };
    await this.#call("enqueue", { stub });
  }

  /** Tell the relay a job was cancelled here, so the device holding it hears at its next heartbeat. */
  async cancel(jobId: string): Promise<void> {
    await this.#call("cancel", { jobId });
  }

  /**
   * One cycle: seal for every claimed job, then collect every finished one.
   * A relay that says "later" (5xx, 429, not-ready) ends the cycle with
   * `deferred`; any other refusal is thrown, since it will not fix itself.
   */
  async pump(): Promise<PumpReport> {
    const report: PumpReport = { sealed: [], completed: [], refused: [] };
    try {
      await this.#cycle(report);
      return report;
    } catch (error) {
      if (error instanceof RelayUnavailable && error.retryable) return { ...report, deferred: error.message };
      throw error;
    }
  }

  async #cycle({ sealed, completed, refused }: PumpReport): Promise<void> {
    const pending = (await this.#call("pending")) as { jobs: PendingClaim[] };
    for (const claim of pending.jobs) {
      const record = await this.#store.get(claim.jobId);
      if (!record) continue;
      // A device key nothing can be sealed to (the relay's word, or a bad
      // device) refuses this one job rather than failing the whole cycle.
      let envelope: SealedEnvelope | null;
      try {
        envelope = (await this.#keyring.resealForDevice(record.envelope, record.id, record.createdAt, claim.device))?.envelope ?? null;
      } catch {
        envelope = null;
      }
      if (envelope === null) {
        refused.push(claim.jobId);
        continue;
      }
      // Record the relay's grant (with the lease's own expiry) before handing
      // over the work; a store that will not lend the job out (terminal,
      // already leased) means nothing is sealed for it.
      const adopted = await this.#store.adopt({
        jobId: claim.jobId,
        leaseId: claim.leaseId,
        expiresAt: claim.leaseExpiresAt,
        now: this.#now(),
      });
      if (!adopted) {
        refused.push(claim.jobId);
        continue;
      }
      await this.#call("payload", { jobId: claim.jobId, envelope });
      sealed.push(claim.jobId);
    }

    const finished = (await this.#call("results")) as { jobs: FinishedJob[] };
    for (const done of finished.jobs) {
      const record = await this.#store.get(done.jobId);
      if (!record || record.state === "ok" || record.state === "error") continue;
      // The relay names the device; the device's signature has to agree.
      const source = { audience: record.audience, runnerId: done.runnerId, runnerOwner: done.runnerOwner };
      const { envelope, jobId, device, disposition } = done;
      // Opened and accepted by the core's rules for a device's result.
      const opened = await this.#keyring.acceptResult(envelope, jobId, device.identity, disposition, source);
      if (!opened.ok) {
        refused.push(done.jobId);
        continue;
      }
      const { outcome, provenance } = JSON.parse(opened.accepted) as { outcome: JobOutcome; provenance: ResultProvenance };
      await this.#store.complete({
        jobId: done.jobId,
        runnerId: done.runnerId,
        holder: { by: "lease", leaseId: done.leaseId },
        outcome,
        provenance,
        now: this.#now(),
      });
      completed.push(done.jobId);
    }
  }

  async #answer(response: Response, endpoint: string): Promise<unknown> {
    if (response.ok) return response.json();
    let code = "";
    let message: string;
    try {
      const body = (await response.json()) as { error?: string; message?: string };
      code = body.error ?? "";
      message = body.message ?? "";
    } catch {
      // Not JSON: an intermediary answered, not the relay.
      message = `HTTP ${String(response.status)}`;
    }
    const retryable = response.status >= 500 || response.status === 429 || code === "not-ready" || code === "server-error";
    // On enqueue a 409 means "not queued"; only `not-ready` there means "ask again soon".
    if (endpoint === "enqueue" && response.status === 409 && code !== "not-ready") {
      throw new EnqueueRefused(message, code);
    }
    throw new RelayUnavailable(`${endpoint}: ${code || "refused"} — ${message}`, retryable, code);
  }

  /**
   * One signed call to the relay: a POST of `body` (the version and site id
   * first, added here so no call can leave them out), or, without one, a GET
   * whose version rides in the query and whose signature covers "". A relay
   * that cannot be reached (refused connection, DNS failure, reset) is
   * "unavailable, try again", like a 503 from its ingress. The reference lets
   * the raw `TypeError: fetch failed` escape instead, which callers cannot
   * tell from a bug and which makes `pump()` throw rather than defer.
   */
  async #call(endpoint: string, body?: Record<string, unknown>): Promise<unknown> {
    const { relayOrigin, siteId } = this.#options;
    const rawBody = body === undefined ? "" : JSON.stringify({ protocolVersion: PROTOCOL_VERSION, siteId, ...body });
    const issuedAt = this.#now();
    const headers = {
      "x-byollm-site": siteId,
      "x-byollm-issued-at": String(issuedAt),
      "x-byollm-signature": this.#keyring.signSiteRequest(endpoint, siteId, issuedAt, rawBody),
    };
    const query = `?siteId=${encodeURIComponent(siteId)}&protocolVersion=${encodeURIComponent(PROTOCOL_VERSION)}`;
    let response: Response;
    try {
      response = await this.#fetch(
        `${relayOrigin}/relay/site/${endpoint}${body === undefined ? query : ""}`,
        body === undefined ? { headers } : { method: "POST", headers: { "content-type": "application/json", ...headers }, body: rawBody },
      );
    } catch (error) {
      const cause = (error as { cause?: { code?: unknown } }).cause;
      const detail = typeof cause?.code === "string" ? cause.code : error instanceof Error ? error.message : String(error);
      throw new RelayUnavailable(`${endpoint}: unreachable — ${detail}`, true, "");
    }
    return this.#answer(response, endpoint);
  }
}

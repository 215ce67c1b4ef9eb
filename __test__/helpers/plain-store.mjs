// A ByollmStore as a site's developer would write one by hand, in plain
// JavaScript: records in Maps, every lookup a linear scan, each rule taken
// from the store contract (shared/spec/store.md; section numbers below are
// that file's). It is the tests' "user's own store": the engine serves it
// through its methods (ts/handlers.ts METHODS), never in place.
//
// The state is in public fields (jobs, cancelRequests, pairings, runners)
// so the tests can snapshot and compare it; a real store would hide them.
import { randomUUID } from "node:crypto";

const DEFAULT_TTL_MS = 900_000;
const HELD = new Set(["claimed", "running"]);
const ENDED = new Set(["ok", "error", "canceled"]);

// The backends billed by subscription (protocol.md §8.3). On the server,
// spend counts as acknowledged, so metered and free backends are offered
// alike; only a subscription is never offered for someone else's job.
const SUBSCRIPTION_BACKENDS = new Set(["claude-cli", "codex-cli"]);

/** The claim's audience rule on the server side (protocol.md §8.4). */
function offered(job, runnerOwner, capability) {
  if (job.owner === runnerOwner) return true;
  if (job.audience === "private") return false;
  if (job.audience === "team" && job.audienceAllow !== undefined && !job.audienceAllow.includes(runnerOwner)) return false;
  if (SUBSCRIPTION_BACKENDS.has(capability.backendId)) return false;
  return capability.offerScope === "team";
}

/** `deadlineAt`, else the end of the TTL (§7). */
const deadlineFor = (job, now) => job.deadlineAt ?? (job.claimableAt ?? now) + job.ttlMs;

export class PlainStore {
  constructor({ defaultTtlMs = DEFAULT_TTL_MS } = {}) {
    this.defaultTtlMs = defaultTtlMs;
    /** id -> JobRecord, in creation order. */
    this.jobs = new Map();
    /** Job ids whose owner asked for a cancel while the job was held (§10). */
    this.cancelRequests = new Set();
    /** deviceCodeHash -> PairingRecord, in creation order. */
    this.pairings = new Map();
    /** id -> RunnerRecord, in approval order. */
    this.runners = new Map();
    /** jobId -> [{ onChange }], one entry per subscription. */
    this.watchers = new Map();
  }

  // ------------------------------------------------------------------ jobs

  /** Store a new version of a job and tell its watchers (§12). */
  #write(job) {
    this.jobs.set(job.id, job);
    for (const entry of [...(this.watchers.get(job.id) ?? [])]) {
      try {
        entry.onChange();
      } catch {
        // A watcher's failure is its own.
      }
    }
    return job;
  }

  /** The three passes of §7, in order; every record written. */
  #sweep(now) {
    const written = [];
    const pass = (rule) => {
      for (const id of [...this.jobs.keys()]) {
        const next = rule(this.jobs.get(id));
        if (next) written.push(this.#write(next));
      }
    };
    pass((job) =>
      HELD.has(job.state) && job.lease && job.lease.runnerId !== "" && job.lease.expiresAt <= now
        ? { ...job, state: "queued", lease: null, completedByLeaseId: null, claimableAt: now, updatedAt: now }
        : undefined,
    );
    pass((job) =>
      HELD.has(job.state) && job.lease && job.lease.runnerId === "" && deadlineFor(job, now) <= now
        ? { ...job, state: "expired", lease: null, completedByLeaseId: null, updatedAt: now }
        : undefined,
    );
    pass((job) =>
      job.state === "queued" &&
      ((job.deadlineAt !== null && job.deadlineAt <= now) || (job.claimableAt !== null && job.claimableAt + job.ttlMs <= now))
        ? { ...job, state: "expired", lease: null, completedByLeaseId: null, updatedAt: now }
        : undefined,
    );
    return written;
  }

  async create(input, now) {
    const existing = this.jobs.get(input.id);
    if (existing) return existing;
    const dependsOn = [...(input.dependsOn ?? [])];
    const blocked = dependsOn.some((id) => this.jobs.get(id)?.state !== "ok");
    // Only the fields a job keeps: the input still carries the plaintext payload (§3).
    return this.#write({
      id: input.id,
      kind: input.kind,
      envelope: input.envelope,
      sizeClass: input.sizeClass,
      audience: input.audience ?? "private",
      purpose: input.purpose,
      owner: input.owner,
      audienceAllow: input.audienceAllow === undefined ? undefined : [...input.audienceAllow],
      dependsOn,
      state: "queued",
      lease: null,
      completedByLeaseId: null,
      createdAt: now,
      claimableAt: blocked ? null : now,
      ttlMs: input.ttlMs ?? this.defaultTtlMs,
      deadlineAt: input.deadlineAt ?? null,
      refusedBy: [],
      attempts: 0,
      outcome: null,
      provenance: null,
      updatedAt: now,
    });
  }

  async get(jobId) {
    return this.jobs.get(jobId) ?? null;
  }

  async claim({ runnerId, runnerOwner, capabilities, max, leaseMs, now }) {
    this.#sweep(now);
    // Oldest claimable first, blocked last; sort is stable, so ties keep creation order (§5).
    const order = [...this.jobs.values()].sort((a, b) => (a.claimableAt ?? Infinity) - (b.claimableAt ?? Infinity));
    const claimed = [];
    for (const job of order) {
      if (claimed.length >= max) break;
      if (job.state !== "queued" || job.claimableAt === null || job.claimableAt > now) continue;
      if (job.refusedBy.includes(runnerId)) continue;
      const capability = capabilities.find((c) => c.kind === job.kind);
      if (!capability || !offered(job, runnerOwner, capability)) continue;
      claimed.push(
        this.#write({
          ...job,
          state: "claimed",
          lease: { id: randomUUID(), runnerId, expiresAt: now + leaseMs },
          attempts: job.attempts + 1,
          updatedAt: now,
        }),
      );
    }
    return claimed;
  }

  async renewLeases({ runnerId, leases, leaseMs, now }) {
    this.#sweep(now);
    const renewed = [];
    const lost = [];
    for (const { jobId, leaseId } of leases) {
      const job = this.jobs.get(jobId);
      if (!job || !HELD.has(job.state) || job.lease?.runnerId !== runnerId || job.lease.id !== leaseId) {
        lost.push({ jobId, leaseId });
        continue;
      }
      const expiresAt = now + leaseMs;
      this.#write({ ...job, state: "running", lease: { ...job.lease, expiresAt }, updatedAt: now });
      renewed.push({ jobId, expiresAt });
    }
    return { renewed, lost };
  }

  async adopt({ jobId, leaseId, expiresAt, now }) {
    const job = this.jobs.get(jobId);
    if (!job || (job.state !== "queued" && job.state !== "claimed")) return null;
    if (job.lease && job.lease.id !== leaseId) return null;
    return this.#write({ ...job, state: "claimed", lease: { id: leaseId, runnerId: "", expiresAt }, updatedAt: now });
  }

  async complete({ jobId, runnerId, holder, outcome, provenance, now }) {
    const job = this.jobs.get(jobId);
    if (!job) return { accepted: false, job: null };
    if (ENDED.has(job.state)) {
      const sameGrant = job.provenance?.runnerId === runnerId && holder.by === "lease" && job.completedByLeaseId === holder.leaseId;
      return sameGrant ? { accepted: false, duplicate: true, job } : { accepted: false, job };
    }
    if (job.state === "expired") return { accepted: false, job };
    const holds = holder.by === "runner" ? job.lease?.runnerId === holder.runnerId : job.lease?.id === holder.leaseId;
    if (!holds) return { accepted: false, job };
    const state = outcome.outcome === "ok" ? "ok" : outcome.outcome === "canceled" ? "canceled" : "error";
    const done = this.#write({
      ...job,
      state,
      lease: null,
      completedByLeaseId: holder.by === "lease" ? holder.leaseId : job.lease.id,
      outcome,
      provenance,
      updatedAt: now,
    });
    this.cancelRequests.delete(jobId);
    if (state === "ok") {
      // A dependent becomes claimable once every job it waits for is ok (§8.2).
      for (const other of [...this.jobs.values()]) {
        if (other.claimableAt !== null || !other.dependsOn.includes(jobId)) continue;
        if (other.dependsOn.every((id) => this.jobs.get(id)?.state === "ok")) {
          this.#write({ ...other, claimableAt: now, updatedAt: now });
        }
      }
    }
    return { accepted: true, job: done };
  }

  async release({ runnerId, leases, reason, now }) {
    const released = [];
    for (const { jobId, leaseId } of leases) {
      const job = this.jobs.get(jobId);
      if (!job || job.lease?.runnerId !== runnerId || job.lease.id !== leaseId) continue;
      const refusedBy = reason === "refused" && !job.refusedBy.includes(runnerId) ? [...job.refusedBy, runnerId] : job.refusedBy;
      this.#write({ ...job, state: "queued", lease: null, completedByLeaseId: null, claimableAt: now, refusedBy, updatedAt: now });
      released.push(jobId);
    }
    return released;
  }

  async expireDue(now) {
    return this.#sweep(now);
  }

  async cancel(jobId, now) {
    const job = this.jobs.get(jobId);
    if (!job) return null;
    if (job.state === "queued") {
      return this.#write({ ...job, state: "canceled", lease: null, completedByLeaseId: null, updatedAt: now });
    }
    // A held job is asked to stop; its holder hears it at the next heartbeat.
    if (HELD.has(job.state)) this.cancelRequests.add(jobId);
    return job;
  }

  async listClaimedBy(runnerId) {
    return [...this.jobs.values()].filter((job) => job.lease?.runnerId === runnerId);
  }

  async listCancelRequests(runnerId) {
    const refs = [];
    for (const jobId of this.cancelRequests) {
      const lease = this.jobs.get(jobId)?.lease;
      if (lease?.runnerId === runnerId) refs.push({ jobId, leaseId: lease.id });
    }
    return refs;
  }

  subscribe(jobId, onChange) {
    const entry = { onChange };
    const list = this.watchers.get(jobId) ?? [];
    list.push(entry);
    this.watchers.set(jobId, list);
    return () => {
      const current = this.watchers.get(jobId) ?? [];
      const at = current.indexOf(entry);
      if (at >= 0) current.splice(at, 1);
    };
  }

  // ------------------------------------------------- pairings and runners (§11)

  #pairingByCode(userCode) {
    for (const pairing of this.pairings.values()) if (pairing.userCode === userCode) return pairing;
    return null;
  }

  async createPairing(record) {
    this.pairings.set(record.deviceCodeHash, { ...record });
  }

  async getPairingByDeviceCodeHash(hash) {
    return this.pairings.get(hash) ?? null;
  }

  async getPairingByUserCode(userCode) {
    return this.#pairingByCode(userCode);
  }

  async approvePairing({ userCode, owner, runnerId, now }) {
    const pairing = this.#pairingByCode(userCode);
    if (!pairing) throw new Error(`unknown pairing code: ${userCode}`);
    if (pairing.expiresAt <= now) throw new Error("pairing code has expired");
    if (pairing.state !== "pending") throw new Error(`pairing is already ${pairing.state}`);
    const runner = {
      id: runnerId,
      owner,
      device: pairing.device,
      label: pairing.label,
      platform: pairing.platform,
      daemonVersion: pairing.daemonVersion,
      capabilities: pairing.capabilities,
      revokedAt: null,
      lastHeartbeatAt: now,
      createdAt: now,
    };
    this.runners.set(runnerId, runner);
    this.pairings.set(pairing.deviceCodeHash, { ...pairing, state: "approved", owner, runnerId, collected: false });
    return runner;
  }

  async denyPairing(userCode) {
    const pairing = this.#pairingByCode(userCode);
    if (pairing) this.pairings.set(pairing.deviceCodeHash, { ...pairing, state: "denied" });
  }

  async consumePairingToken(deviceCodeHash) {
    const pairing = this.pairings.get(deviceCodeHash);
    if (pairing) this.pairings.set(deviceCodeHash, { ...pairing, collected: true });
  }

  async getRunner(runnerId) {
    return this.runners.get(runnerId) ?? null;
  }

  async touchRunner({ runnerId, capabilities, daemonVersion, now }) {
    const runner = this.runners.get(runnerId);
    if (!runner) return null;
    const touched = { ...runner, capabilities, daemonVersion, lastHeartbeatAt: now };
    this.runners.set(runnerId, touched);
    return touched;
  }

  async revokeRunner(runnerId, now) {
    const runner = this.runners.get(runnerId);
    if (runner && runner.revokedAt === null) this.runners.set(runnerId, { ...runner, revokedAt: now });
  }

  async listRunners(owner) {
    const all = [...this.runners.values()];
    return owner === undefined ? all : all.filter((runner) => runner.owner === owner);
  }
}

// The public type vocabulary of the package: records, store interfaces and the
// options of the app-facing classes. The protocol shapes they are built from
// (keys, envelopes, outcomes, capabilities) are declared in protocol-types.ts,
// interchangeable with the reference protocol package's, so we do not depend on it.
import type {
  Audience,
  Capability,
  DeliveredResult,
  JobKind,
  JobOutcome,
  JobState,
  Lease,
  PayloadFor,
  PublicIdentity,
  ResultProvenance,
  SealedEnvelope,
  SizeClass,
  StoredKeys,
} from "./protocol-types.js";

export type * from "./protocol-types.js";

/** The six protocol endpoints. */
export type Endpoint = "pair" | "claim" | "fetch" | "heartbeat" | "result" | "release";

// ---------------------------------------------------------------- records --

export interface JobRecord {
  readonly id: string;
  readonly kind: JobKind;
  /** The payload sealed to this site's own key; the store never sees plaintext. */
  readonly envelope: SealedEnvelope;
  readonly sizeClass: SizeClass;
  readonly audience: Audience;
  readonly purpose: string | undefined;
  readonly owner: string;
  readonly audienceAllow: readonly string[] | undefined;
  readonly dependsOn: readonly string[];
  readonly state: JobState;
  readonly lease: Lease | null;
  readonly completedByLeaseId: string | null;
  readonly createdAt: number;
  /** When the TTL clock started; `null` while blocked on dependencies. */
  readonly claimableAt: number | null;
  readonly ttlMs: number;
  readonly deadlineAt: number | null;
  readonly refusedBy: readonly string[];
  readonly attempts: number;
  readonly outcome: JobOutcome | null;
  readonly provenance: ResultProvenance | null;
  readonly updatedAt: number;
}

export interface RunnerRecord {
  readonly id: string;
  readonly owner: string;
  readonly label: string;
  readonly platform: "darwin" | "linux" | "win32";
  readonly daemonVersion: string;
  readonly capabilities: readonly Capability[];
  readonly revokedAt: number | null;
  readonly lastHeartbeatAt: number;
  readonly createdAt: number;
  /** The identity every later signature of this runner is verified against. */
  readonly device: PublicIdentity;
}

export interface PairingRecord {
  readonly deviceCodeHash: string;
  readonly userCode: string;
  readonly state: "pending" | "approved" | "denied";
  readonly owner: string | null;
  readonly runnerId: string | null;
  readonly collected: boolean;
  readonly label: string;
  readonly platform: "darwin" | "linux" | "win32";
  readonly daemonVersion: string;
  readonly capabilities: readonly Capability[];
  readonly device: PublicIdentity;
  readonly expiresAt: number;
  readonly createdAt: number;
}

export interface EnqueueInput<K extends JobKind = JobKind> {
  readonly kind: K;
  readonly payload: PayloadFor<K>;
  readonly owner: string;
  readonly audience?: Audience;
  readonly purpose?: string;
  readonly audienceAllow?: readonly string[];
  readonly dependsOn?: readonly string[];
  readonly ttlMs?: number;
  readonly deadlineAt?: number;
  readonly id?: string;
}

/** What `ByollmApp.enqueue` hands to `store.create`. */
export interface StoredJobInput extends Omit<EnqueueInput, "payload" | "id"> {
  readonly id: string;
  readonly envelope: SealedEnvelope;
  readonly sizeClass: SizeClass;
}

// ------------------------------------------------------------------ store --

export interface LeaseRef {
  readonly jobId: string;
  readonly leaseId: string;
}

export interface ClaimArgs {
  readonly runnerId: string;
  readonly runnerOwner: string;
  readonly capabilities: readonly Capability[];
  readonly max: number;
  readonly leaseMs: number;
  readonly now: number;
}

export interface AdoptArgs {
  readonly jobId: string;
  readonly leaseId: string;
  readonly expiresAt: number;
  readonly now: number;
}

export interface RenewArgs {
  readonly runnerId: string;
  readonly leases: readonly LeaseRef[];
  readonly leaseMs: number;
  readonly now: number;
}

export interface RenewResult {
  readonly renewed: readonly { jobId: string; expiresAt: number }[];
  readonly lost: readonly LeaseRef[];
}

export type CompleteHolder =
  | { readonly by: "runner"; readonly runnerId: string }
  | { readonly by: "lease"; readonly leaseId: string };

export interface CompleteArgs {
  readonly jobId: string;
  readonly runnerId: string;
  readonly holder: CompleteHolder;
  readonly outcome: JobOutcome;
  readonly provenance: ResultProvenance;
  readonly now: number;
}

export interface CompleteResult {
  readonly accepted: boolean;
  readonly duplicate?: boolean;
  readonly job: JobRecord | null;
}

export interface ReleaseArgs {
  readonly runnerId: string;
  readonly leases: readonly LeaseRef[];
  readonly reason: "shutdown" | "pause" | "revoked" | "backend-down" | "refused";
  readonly now: number;
}

export interface ApproveArgs {
  readonly userCode: string;
  readonly owner: string;
  readonly runnerId: string;
  readonly now: number;
}

export interface TouchArgs {
  readonly runnerId: string;
  readonly capabilities: readonly Capability[];
  readonly daemonVersion: string;
  readonly now: number;
}

export interface JobStore {
  create(input: StoredJobInput, now: number): Promise<JobRecord>;
  get(jobId: string): Promise<JobRecord | null>;
  claim(args: ClaimArgs): Promise<JobRecord[]>;
  adopt(args: AdoptArgs): Promise<JobRecord | null>;
  renewLeases(args: RenewArgs): Promise<RenewResult>;
  complete(args: CompleteArgs): Promise<CompleteResult>;
  release(args: ReleaseArgs): Promise<string[]>;
  expireDue(now: number): Promise<JobRecord[]>;
  cancel(jobId: string, now: number): Promise<JobRecord | null>;
  listClaimedBy(runnerId: string): Promise<JobRecord[]>;
  listCancelRequests(runnerId: string): Promise<LeaseRef[]>;
}

export interface RunnerStore {
  createPairing(record: PairingRecord): Promise<void>;
  getPairingByDeviceCodeHash(hash: string): Promise<PairingRecord | null>;
  getPairingByUserCode(userCode: string): Promise<PairingRecord | null>;
  approvePairing(args: ApproveArgs): Promise<RunnerRecord>;
  denyPairing(userCode: string, now: number): Promise<void>;
  consumePairingToken(deviceCodeHash: string): Promise<void>;
  getRunner(runnerId: string): Promise<RunnerRecord | null>;
  touchRunner(args: TouchArgs): Promise<RunnerRecord | null>;
  revokeRunner(runnerId: string, now: number): Promise<void>;
  listRunners(owner?: string): Promise<RunnerRecord[]>;
  /** Synchronous; returns the unsubscribe function. */
  subscribe(jobId: string, onChange: () => void): () => void;
}

export interface ByollmStore extends JobStore, RunnerStore {}

export interface MemoryStoreOptions {
  /** TTL of a job once claimable, when the enqueue names none. */
  readonly defaultTtlMs?: number;
}

// --------------------------------------------------------------- handlers --

/** What a transport hands the handlers to authenticate one call. */
export interface AuthContext {
  readonly endpoint: string;
  /** The exact text received; signatures cover these bytes, never a re-serialisation. */
  readonly rawBody: string;
  readonly signature: unknown;
  /**
   * Where the request came from, as far as the transport can trust it (see
   * createFetchHandler's `source`): bounds `pair start` and failed polls per
   * source. Absent: counted with every other request that names none.
   */
  readonly source?: string;
}

export interface HandlerConfig {
  readonly store: ByollmStore;
  /** Absolute URL of the app page where a user types the pairing code. */
  readonly verificationUrl: string;
  readonly leaseMs?: number;
  readonly pairingTtlMs?: number;
  readonly pollIntervalMs?: number;
  readonly now?: () => number;
  /** This site's keys, generated once with `keygen` and supplied by every instance. */
  readonly siteKeys: StoredKeys;
  /**
   * How long one store operation may take before the daemon's request is
   * answered `server-error` (500) and the cause logged (default 30000). A
   * lease its claim granted meanwhile lapses after `leaseMs`.
   */
  readonly storeTimeoutMs?: number;
  /**
   * Count requests, refusals and latencies for `app.metrics()` and
   * `createMetricsHandler` (default true; `false` records nothing).
   */
  readonly metrics?: boolean;
}

export interface HandlerResult {
  readonly status: number;
  readonly body: unknown;
  readonly retryAfterSeconds?: number;
}

// --------------------------------------------------------------- delivery --

type NoRunnerAnswer = string | DeliveredResult | undefined | void;

export interface WaitOptions {
  /** Give up after this long (default 5 minutes). */
  readonly timeoutMs?: number;
  /**
   * Called when no runner can take the job. A returned value (string or result)
   * becomes the answer, labelled `fallback: true`; nothing returned means
   * `NoRunnerAvailableError`. `void` is allowed so a side-effect-only callback
   * type-checks.
   */
  readonly onNoRunner?: (reason: string) => NoRunnerAnswer | Promise<NoRunnerAnswer>;
  readonly signal?: AbortSignal;
}

export interface ResultDelivery {
  waitFor(jobId: string, options?: WaitOptions): Promise<DeliveredResult>;
}

export interface PollingDeliveryDeps {
  readonly read: (jobId: string) => Promise<DeliveredResult | null>;
  /** Absent where nothing can see runners (the cloud lane). */
  readonly availability?: (
    jobId: string,
  ) => Promise<{ available: boolean; reason?: string; blocked: boolean }>;
  readonly sleep?: (ms: number) => Promise<void>;
  readonly now?: () => number;
  readonly graceMs?: number;
}

// -------------------------------------------------------------------- app --

export type NoRunnerReason =
  | "no-runner-paired"
  | "no-runner-online"
  | "no-matching-capability"
  | "audience-admits-nobody"
  | "default-unusable";

export interface RunnerAvailability {
  readonly available: boolean;
  readonly reason?: NoRunnerReason;
  /** Live capabilities that admit the query. */
  readonly candidates: number;
}

export interface AvailabilityQuery {
  readonly kind: JobKind;
  readonly owner: string;
  readonly audience?: Audience;
  readonly audienceAllow?: readonly string[];
}

export interface CloudLaneOptions {
  /** The relay's origin, e.g. `https://hub.example`. */
  readonly relayOrigin: string;
  /** This site's id at the relay. */
  readonly siteId: string;
  /** Injectable fetch, for tests and proxies. */
  readonly fetch?: typeof fetch;
}

export interface PumpReport {
  readonly sealed: string[];
  readonly completed: string[];
  readonly refused: string[];
  /** Present when the relay asked to be called later; the reason. */
  readonly deferred?: string;
}

export interface ByollmAppOptions {
  readonly store: ByollmStore;
  readonly now?: () => number;
  /** Heartbeat age beyond which a runner no longer counts as online (default 35 s). */
  readonly livenessMs?: number;
  readonly delivery?: (deps: PollingDeliveryDeps) => ResultDelivery;
  /** How long "no runner" must persist before `result()` gives up (default 10 s). */
  readonly noRunnerGraceMs?: number;
  readonly siteKeys: StoredKeys;
  /** Present = the cloud lane (daemons connect to a relay). */
  readonly lane?: CloudLaneOptions;
  /** Count enqueues, approvals and waits for `metrics()` (default true; `false` records nothing). */
  readonly metrics?: boolean;
}

export interface JobHandle {
  readonly id: string;
  readonly record: JobRecord;
  result(options?: WaitOptions): Promise<DeliveredResult>;
  cancel(): Promise<void>;
}

export interface PendingPairing {
  label: string;
  platform: string;
  daemonVersion: string;
  capabilities: readonly { kind: string; model: string }[];
  expiresAt: number;
}

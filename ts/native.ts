// The native core as the shell sees it: the generated loader (`index.js` at the
// package root). The generated `index.d.ts` describes the same functions (the
// binding contract, docs/architecture.md links it); typing them here
// keeps the shell compiling while parts of the binding are still being built,
// and makes a missing function fail loudly at first use rather than as
// `undefined is not a function` deep inside a request.
import { binding as loaded } from "./native-loader.js";
import type {
  Capability,
  PublicIdentity,
  ResultProvenance,
  SealedEnvelope,
  StoredKeys,
} from "./types.js";

export type Direction = "payload" | "result";

export interface EnvelopeContext {
  jobId: string;
  senderKeyId: string;
  recipientKeyId: string;
  deadlineAt: number;
  direction: Direction;
}

export interface OpenExpected {
  jobId: string;
  senderKeyId: string;
  recipientKeyId: string;
  direction: Direction;
}

export type OpenFailure = "not-for-us" | "unopenable" | "malformed" | "bad-signature" | "context-mismatch";
export type OpenResult =
  | {
      ok: true;
      plaintext: string;
      /**
       * `openResult` only: the plaintext is a valid, canonical sealed outcome,
       * so `JSON.parse(plaintext)` is exactly `parseSealedOutcome`'s answer.
       */
      canonicalOutcome?: boolean;
    }
  | { ok: false; reason: OpenFailure };

export interface RequestSignature {
  runnerId: string;
  issuedAt: number;
  signature: string;
}

export interface WireErrorBody {
  error: string;
  message: string;
  supported?: string[];
  minimum?: string;
}

export type Inspected =
  | { stage: "ok"; body: Record<string, unknown> }
  | { stage: "json" | "version" | "schema"; status: number; error: WireErrorBody };

export type SealedPayload =
  | { ok: true; envelope: SealedEnvelope; sizeClass: string }
  | { ok: false; message: string };

/** An enqueued job's fields besides its kind and payload, as our native store's `create` takes them. */
export interface EnqueuedJob {
  id: string;
  owner: string;
  audience: string | undefined;
  /** `JSON.stringify(purpose)`, or undefined when there is none. */
  purposeJson: string | undefined;
  audienceAllow: string[] | undefined;
  dependsOn: string[] | undefined;
  ttlMs: number | undefined;
  deadlineAt: number | undefined;
}

export interface SiteKeyringHandle {
  readonly keyId: string;
  publicIdentity(): PublicIdentity;
  isConsistent(): boolean;
  sealPayload(plaintext: string, jobId: string, deadlineAt: number): SealedEnvelope;
  sealPayloadAsync(plaintext: string, jobId: string, deadlineAt: number): Promise<SealedEnvelope>;
  /** `validatePayload` and `sealPayload` of the canonical text in one call (the text stays native). */
  sealCheckedPayload(kind: unknown, payloadJson: string | undefined, jobId: string, deadlineAt: number): SealedPayload;
  sealCheckedPayloadAsync(
    kind: unknown,
    payloadJson: string | undefined,
    jobId: string,
    deadlineAt: number,
  ): Promise<SealedPayload>;
  /** `sealCheckedPayloadAsync` of a plain object of string values given as keys and values (JSON written natively). */
  sealStringFieldsAsync(
    kind: unknown,
    keys: string[],
    values: string[],
    jobId: string,
    deadlineAt: number,
  ): Promise<SealedPayload>;
  /**
   * `sealCheckedPayloadAsync` for our native store when its records leave
   * envelopes out: validated on the thread pool, the at-rest seal left to the
   * background thread; stored by `enqueuePrepared`.
   */
  prepareCheckedPayloadAsync(
    kind: unknown,
    payloadJson: string | undefined,
    jobId: string,
    deadlineAt: number,
  ): Promise<object | { message: string }>;
  /** `prepareCheckedPayloadAsync` of a plain object of string values given as keys and values. */
  prepareStringFieldsAsync(
    kind: unknown,
    keys: string[],
    values: string[],
    jobId: string,
    deadlineAt: number,
  ): Promise<object | { message: string }>;
  /** Store a prepared payload as `enqueueDirect` stores one: the new record's row (throws if used already). */
  enqueuePrepared(store: object, prepared: object, kind: string, job: EnqueuedJob, now: number): string;
  resealForDevice(atRest: SealedEnvelope, jobId: string, createdAt: number, device: PublicIdentity): SealedEnvelope | null;
  resealForDeviceAsync(
    atRest: SealedEnvelope,
    jobId: string,
    createdAt: number,
    device: PublicIdentity,
  ): Promise<SealedEnvelope | null>;
  /** `resealForDeviceAsync` of the envelope our native store holds for `jobId` (null when it holds none). */
  resealStoredForDeviceAsync(
    store: object,
    jobId: string,
    createdAt: number,
    device: PublicIdentity,
  ): Promise<SealedEnvelope | null>;
  openResult(envelope: SealedEnvelope, jobId: string, deviceIdentity: string): OpenResult;
  /**
   * `sealCheckedPayload` and our native store's `create` in one call: the
   * new record's row, or the validator's refusal (nothing stored).
   */
  enqueueDirect(
    store: object,
    kind: unknown,
    payloadJson: string | undefined,
    jobId: string,
    envelopeDeadlineAt: number,
    owner: string,
    audience: string | undefined,
    purposeJson: string | undefined,
    audienceAllow: string[] | undefined,
    dependsOn: string[] | undefined,
    ttlMs: number | undefined,
    deadlineAt: number | undefined,
    now: number,
  ): string | { message: string };
  /**
   * A signed claim, fetch or result served end to end on our native store
   * (src/direct.rs): the answer's JSON text (status 200), or null when the
   * general path must answer it (nothing changed then).
   */
  serveDirect(
    store: object,
    endpoint: string,
    body: string,
    runnerId: string,
    issuedAt: string,
    signature: string,
    leaseMs: number,
    now: number,
  ): string | null;
  openResultAsync(envelope: SealedEnvelope, jobId: string, deviceIdentity: string): Promise<OpenResult>;
  signSiteRequest(endpoint: string, siteId: string, issuedAt: number, body: string): string;
}

export interface NativeBinding {
  nativeVersion(): string;
  // crypto
  generateKeys(now?: number): StoredKeys;
  publicIdentityOf(keys: StoredKeys): PublicIdentity;
  verifyPublicIdentity(identity: unknown): boolean;
  deviceIdentityRefusal(identity: unknown): string | null;
  keyId(identityPublic: string): string;
  formatSiteKeys(keys: StoredKeys): string;
  siteKeysFromEnvValue(variable: string, value: string | undefined | null): StoredKeys;
  seal(opts: {
    plaintext: string;
    senderKeys: StoredKeys;
    recipientEncryptionPublic: string;
    context: EnvelopeContext;
  }): SealedEnvelope;
  open(opts: {
    envelope: SealedEnvelope;
    recipientKeys: StoredKeys;
    senderIdentityPublic: string;
    expected: OpenExpected;
  }): OpenResult;
  canonicalRequest(endpoint: string, runnerId: string, issuedAt: number, body: string): string;
  signRequest(
    keys: StoredKeys,
    req: { endpoint: string; runnerId: string; issuedAt: number; body: string },
  ): RequestSignature;
  verifyRequest(opts: {
    identityPublic: string;
    endpoint: string;
    body: string;
    signature: RequestSignature;
    now: number;
    maxSkewMs?: number;
  }): null | "stale" | "bad-signature";
  generateDeviceCode(): string;
  generateUserCode(): string;
  generateRunnerId(): string;
  generateJobId(): string;
  generateLeaseId(): string;
  hashSecret(secret: string): string;
  secretsMatch(a: string, b: string): boolean;
  normalizeUserCode(input: string): string;
  SiteKeyring: new (keys: StoredKeys) => SiteKeyringHandle;
  // protocol rules
  inspectRequest(endpoint: string, rawBody: string): Inspected;
  isCanonicalRequestBody(endpoint: string, rawBody: string): boolean;
  validateRequestBody(endpoint: string, json: string): { ok: true; body: Record<string, unknown> } | { ok: false };
  checkProtocolVersion(json: string): WireErrorBody | null;
  parseSealedOutcome(
    plaintext: string,
  ): { ok: true; outcome: Record<string, unknown>; ran: Record<string, unknown> } | { ok: false; message: string };
  validatePayload(
    kind: unknown,
    payloadJson: string | undefined,
  ): { ok: true; canonical: string; textLength: number; sizeClass: string } | { ok: false; message: string };
  tooLargeMessage(bytes: number): string;
  // the handlers' lease and stub rules (src/direct.rs)
  deadlineFor(deadlineAt: number | null | undefined, claimableAt: number | null | undefined, ttlMs: number, now: number): number;
  fetchLeaseHeld(
    leaseId: unknown,
    leaseRunnerId: unknown,
    leaseExpiresAt: number,
    askedLeaseId: string,
    runnerId: unknown,
    now: number,
  ): boolean;
  resultLeaseRefused(
    leaseId: unknown,
    leaseRunnerId: unknown,
    leaseExpiresAt: number,
    askedLeaseId: string,
    runnerId: unknown,
    now: number,
  ): boolean;
  provenanceFor(input: Record<string, unknown>): ResultProvenance;
  isAudience(text: string): boolean;
  capabilityFor(caps: readonly Capability[], kind: string): Capability | undefined | null;
  runnerAvailability(
    runners: readonly unknown[],
    query: { kind: string; owner: string; audience?: string; audienceAllow?: readonly string[] },
    now: number,
    livenessMs: number,
  ): { available: boolean; reason?: string; candidates: number };
}

const table = loaded as unknown as Record<string, unknown>;

/**
 * The binding, with every access checked: a function the loaded addon does not
 * export throws a clear error naming it (a stale or partial native build).
 * The exports are own properties of a plain object, so a call on the request
 * path is an ordinary property load; only a name the addon lacks falls
 * through to the throwing proxy behind it.
 */
const missing = new Proxy(Object.create(null) as object, {
  get(_target, name: string | symbol) {
    throw new Error(
      `byollm-server-native: the native addon does not export \`${String(name)}\`. ` +
        "The installed .node file is older than this JavaScript; rebuild or reinstall the package.",
    );
  },
});

export const native = Object.assign(Object.create(missing) as object, table) as unknown as NativeBinding;

// The protocol's data shapes that appear in this package's signatures, declared
// here so the published package needs nothing at install time. They follow
// protocol.md §4.0 and the reference protocol package's (0.1.1) exported types
// field for field.
//
// They must stay interchangeable with that package's types both ways, because
// apps mix the two (an envelope typed by the reference package is passed to
// our store, a `JobRecord` of ours is handed to code typed against theirs).
// __test__/protocol-types.test.mjs checks that with tsc. Three details decide it:
// - fields are mutable and arrays are plain `T[]`: a `readonly T[]` here could
//   not be passed where their type is expected;
// - an optional field is `f?: T | undefined`, which is what their schemas infer,
//   so the two stay equal even under `exactOptionalPropertyTypes`;
// - objects are closed (their schemas reject unknown keys), so no index
//   signatures.

/** Who may run a job: the owner's own devices, or also devices of people the owner admits. */
export type Audience = "private" | "team";

/** The job kinds a v1 daemon can serve. */
export type JobKind = "llm.generate" | "llm.chat";

/** Where a job is in its life; the last four never change again. */
export type JobState = "queued" | "claimed" | "running" | "ok" | "error" | "canceled" | "expired";

/** Size buckets of a payload; `unbounded` is kept for streamed jobs. */
export type SizeClass = "small" | "medium" | "large" | "unbounded";

/** How a backend is reached: a local HTTP server or a spawned process. */
export type BackendClass = "http" | "process";

/** The 19 backend ids of the registry (protocol.md §8.3); any other id fails the schema. */
export type BackendId =
  | "ollama"
  | "mlx"
  | "llamacpp"
  | "vllm"
  | "lmstudio"
  | "jan"
  | "localai"
  | "anthropic"
  | "openai"
  | "gemini"
  | "grok"
  | "groq"
  | "openrouter"
  | "together"
  | "deepseek"
  | "mistral"
  | "openai-http"
  | "claude-cli"
  | "codex-cli";

/** Why a model stopped, as far as the backend said. */
export type StopReason = "end" | "length" | "stop-sequence" | "unknown";

/** A device's public keys as sent on the wire (unpadded base64url strings). */
export interface PublicIdentity {
  /** Ed25519 public key: what gets pinned and verifies signatures. */
  identity: string;
  /** X25519 public key: what envelopes are sealed to. */
  encryption: string;
  /** The identity key's signature over the encryption key. */
  encryptionSig: string;
}

/** Both keypairs of a party, private halves included, as kept on disk (a site's BYOLLM_SITE_KEYS). */
export interface StoredKeys {
  version: 1;
  identityPublic: string;
  identityPrivate: string;
  encryptionPublic: string;
  encryptionPrivate: string;
  encryptionSig: string;
  createdAt: number;
}

/** A signed-then-sealed payload or result; its keys are emitted in this order. */
export interface SealedEnvelope {
  ciphertext: string;
  recipientKeyId: string;
  senderKeyId: string;
  direction: "payload" | "result";
  deadlineAt: number;
}

/** One kind a daemon can serve right now, and with what. */
export interface Capability {
  kind: JobKind;
  service: string;
  backendId: BackendId;
  backendClass: BackendClass;
  model: string;
  knownModels?: string[] | undefined;
  offerScope: Audience;
}

/** The right of one runner to work on a job until `expiresAt` (epoch ms). */
export interface Lease {
  id: string;
  runnerId: string;
  expiresAt: number;
}

/** The three ways a job can finish, told apart by `outcome`. */
export type JobOutcome =
  | { outcome: "ok"; text: string; artifactUrl?: string | undefined }
  | { outcome: "error"; code: string; message: string; retryable: boolean }
  | { outcome: "canceled" };

/**
 * Who produced a result. `untrusted` is true for `team` work: the text came
 * from someone else's machine and must not be shown as the app's own answer.
 */
export interface ResultProvenance {
  audience: Audience;
  runnerId: string;
  runnerOwner: string;
  backendClass: BackendClass;
  model: string;
  untrusted: boolean;
  stop?: StopReason | undefined;
  stopReported?: boolean | undefined;
}

/** What the app receives for a finished job. `fallback` marks an answer that came from `onNoRunner`. */
export interface DeliveredResult {
  jobId: string;
  state: JobState;
  outcome?: JobOutcome | undefined;
  provenance?: ResultProvenance | undefined;
  fallback?: true | undefined;
}

/** One turn of a conversation. */
export interface ChatMessage {
  role: "user" | "system" | "assistant";
  content: string;
}

/** The payload of `llm.generate`: text only, no model parameters. */
export interface GeneratePayload {
  prompt: string;
  system?: string | undefined;
}

/** The payload of `llm.chat`. */
export interface ChatPayload {
  messages: ChatMessage[];
  system?: string | undefined;
}

/**
 * The payload type of kind `K`. Distributive like the protocol's, so
 * `PayloadFor<JobKind>` is the union of both payloads.
 */
export type PayloadFor<K extends JobKind> = K extends "llm.generate" ? GeneratePayload : ChatPayload;

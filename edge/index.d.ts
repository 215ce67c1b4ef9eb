// Types of byollm-server-native-edge (and its /workers and /manual): the crypto core as
// WebAssembly, with the names and shapes of @byollm/protocol.

export interface StoredKeys {
  version: 1;
  identityPublic: string;
  identityPrivate: string;
  encryptionPublic: string;
  encryptionPrivate: string;
  encryptionSig: string;
  createdAt: number;
}

export interface PublicIdentity {
  identity: string;
  encryption: string;
  encryptionSig: string;
}

export type EnvelopeDirection = "payload" | "result";

export interface SealedEnvelope {
  ciphertext: string;
  recipientKeyId: string;
  senderKeyId: string;
  direction: EnvelopeDirection;
  deadlineAt: number;
}

export interface EnvelopeContext {
  readonly jobId: string;
  readonly senderKeyId: string;
  readonly recipientKeyId: string;
  readonly deadlineAt: number;
  readonly direction: EnvelopeDirection;
}

export type EnvelopeFailure = "not-for-us" | "unopenable" | "malformed" | "bad-signature" | "context-mismatch";

export type OpenResult =
  | { readonly ok: true; readonly plaintext: string }
  | { readonly ok: false; readonly reason: EnvelopeFailure };

export interface RequestSignature {
  runnerId: string;
  issuedAt: number;
  signature: string;
}

export type SignatureFailure = "stale" | "bad-signature";

export interface RequestInput {
  endpoint: string;
  runnerId: string;
  issuedAt: number;
  body: string;
}

export interface SiteRequestInput {
  endpoint: string;
  siteId: string;
  issuedAt: number;
  body: string;
}

export interface VerifyRequestInput {
  identityPublic: string;
  endpoint: string;
  body: string;
  signature: RequestSignature;
  now: number;
  maxSkewMs?: number;
}

export declare const MAX_CLOCK_SKEW_MS: number;
export declare const ENVELOPE_MAX_AGE_MS: number;
export declare const ENCRYPTION_KEY_CONTEXT: "byollm/v1/encryption-key";
export declare const ENVELOPE_BODY_VERSION: "byollm/v1/envelope";

/**
 * Loads the WebAssembly core. The entry points call it for you; it is exported
 * for hosts that supply the module themselves (a precompiled
 * `WebAssembly.Module`, the bytes, or a `Response`). A second call does nothing.
 */
export declare function init(
  source: WebAssembly.Module | BufferSource | Response | PromiseLike<Response>,
): Promise<void>;
/** True once the WebAssembly core is loaded. */
export declare function isReady(): boolean;
/** Resolves at once (kept for @byollm/protocol compatibility). */
export declare function cryptoReady(): Promise<void>;

export declare function generateKeys(now?: number): StoredKeys;
export declare function generateSiteKeys(now?: number): StoredKeys;
export declare function publicIdentityOf(keys: StoredKeys): PublicIdentity;
/** Never throws: anything malformed is `false`. */
export declare function verifyPublicIdentity(identity: unknown): boolean;
export declare function fingerprint(identityPublic: string): string;
export declare function keyId(identityPublic: string): string;
export declare function formatSiteKeys(keys: StoredKeys): string;
/** Throws the reference's three errors (not set / not base64 JSON / not a site identity). */
export declare function siteKeysFromEnvValue(variable: string, value: string | undefined | null): StoredKeys;

export declare function seal(input: {
  plaintext: string;
  senderKeys: StoredKeys;
  recipientEncryptionPublic: string;
  context: EnvelopeContext;
}): Promise<SealedEnvelope>;

/** Failures resolve to `{ ok: false, reason }`; it never rejects on bad input. */
export declare function open(input: {
  envelope: SealedEnvelope;
  recipientKeys: StoredKeys;
  senderIdentityPublic: string;
  expected: Omit<EnvelopeContext, "deadlineAt">;
}): Promise<OpenResult>;

/** The canonical request as UTF-8 bytes (the reference returns a Buffer of the same bytes). */
export declare function canonicalRequest(input: RequestInput): Uint8Array;
export declare function signRequest(keys: StoredKeys, input: RequestInput): RequestSignature;
export declare function verifyRequest(input: VerifyRequestInput): SignatureFailure | null;
export declare function signSiteRequest(keys: StoredKeys, input: SiteRequestInput): RequestSignature;
export declare function verifySiteRequest(input: VerifyRequestInput): SignatureFailure | null;

export declare function generateDeviceCode(): string;
export declare function generateUserCode(): string;
export declare function generateRunnerId(): string;
export declare function generateJobId(): string;
export declare function generateLeaseId(): string;
export declare function hashSecret(secret: string): string;
/** Constant time; `false` on malformed input, never throws. */
export declare function secretsMatch(a: string, b: string): boolean;
export declare function normalizeUserCode(input: string): string;

// byollm-server-native: the public API of @byollm/server@0.1.1 over a Rust core.
export { ByollmApp } from "./app.js";
export { ByollmHandlers, SERVED_PROTOCOL_VERSION } from "./handlers.js";
export { createFetchHandler, routeEndpoint, signatureFrom } from "./http.js";
export type { FetchHandlerConfig, RequestSource } from "./http.js";
export { MemoryStore } from "./memory.js";
export { PollingDelivery } from "./delivery.js";
export { NoRunnerAvailableError, ResultTimeoutError, RelayUnavailable, EnqueueRefused } from "./errors.js";
export { CloudLane } from "./cloud.js";
export { generateSiteKeys, siteKeysFromEnv, formatSiteKeys } from "./site-keys.js";
export {
  generateDeviceCode,
  generateRunnerId,
  generateJobId,
  generateUserCode,
  hashSecret,
  secretsMatch,
  normalizeUserCode,
} from "./ids.js";
export { capabilityFor } from "./capabilities.js";
export { createMetricsHandler, jobTraceContext } from "./metrics.js";
export type { EndpointMetrics, MetricsHandlerOptions, MetricsHistogram, MetricsSnapshot, MetricsStatus, WaitOutcome } from "./metrics.js";

export type {
  AdoptArgs,
  ApproveArgs,
  AvailabilityQuery,
  ByollmAppOptions,
  ByollmStore,
  ClaimArgs,
  CloudLaneOptions,
  CompleteArgs,
  CompleteHolder,
  CompleteResult,
  EnqueueInput,
  HandlerConfig,
  HandlerResult,
  JobHandle,
  JobRecord,
  JobStore,
  MemoryStoreOptions,
  NoRunnerReason,
  PairingRecord,
  PollingDeliveryDeps,
  PumpReport,
  ReleaseArgs,
  RenewArgs,
  RenewResult,
  ResultDelivery,
  RunnerAvailability,
  RunnerRecord,
  RunnerStore,
  TouchArgs,
  WaitOptions,
} from "./types.js";

import type { Capability } from "./types.js";

/**
 * The capability that would serve a kind: the first one advertised for it.
 * Kept in JS (not a native call) because callers get back the very object
 * they passed in, as with the reference, rather than a converted copy.
 */
export function capabilityFor(capabilities: readonly Capability[], kind: string): Capability | undefined {
  return capabilities.find((c) => c.kind === kind);
}

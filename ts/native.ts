// The native core as the shell sees it: the generated loader (`index.js` at the
// package root), typed by the generated `index.d.ts` (the binding contract,
// docs/architecture.md links it). A function the loaded addon lacks fails
// loudly at first use rather than as `undefined is not a function` deep
// inside a request.
import { binding as loaded } from "./native-loader.js";
import type { NativeMemoryStore, NativeMetrics, SiteKeyring } from "../index.js";

export type NativeBinding = typeof import("../index.js");
export type { EnqueuedJob, FetchAnswer, NativeMemoryStore, PendingRequest, ResultSource, SiteKeyring, StoreCounts } from "../index.js";
/** A site keyring instance (`new native.SiteKeyring(keys)`). */
export type SiteKeyringHandle = SiteKeyring;
/** A site store's metrics registry (`new native.NativeMetrics()`). */
export type NativeMetricsHandle = NativeMetrics;
/** A native store instance, as `MemoryStore.native` hands it out. */
export type NativeMemoryStoreHandle = NativeMemoryStore;

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

export const native = Object.assign(Object.create(missing) as object, loaded) as NativeBinding;

/** The protocol's constants, from the core (src/binding/protocol.rs). */
export const PROTOCOL = native.protocolConstants();

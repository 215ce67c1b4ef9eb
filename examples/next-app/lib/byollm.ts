// The app and its store: one of each per server process.
//
// Built lazily, on first use, for the same reason the route passes a function
// to createHandler: `next build` imports every module while collecting page
// data, with no secrets in the environment, so nothing here may run at import.
// Kept on globalThis so every route bundle — and `next dev`'s reloads — share
// one MemoryStore; two stores would mean a device paired in one route is
// unknown to the next.
import { ByollmApp, MemoryStore, siteKeysFromEnv } from "@byollm/server";

type Byollm = { store: MemoryStore; app?: ByollmApp };
const slot = globalThis as typeof globalThis & { __byollmExample?: Byollm };

export function getStore(): MemoryStore {
  slot.__byollmExample ??= { store: new MemoryStore() };
  return slot.__byollmExample.store;
}

export function getApp(): ByollmApp {
  const state = (slot.__byollmExample ??= { store: new MemoryStore() });
  // Generate the keys once with `npx --no keygen` and keep
  // them as a secret: daemons pin this identity when they pair.
  state.app ??= new ByollmApp({ store: state.store, siteKeys: siteKeysFromEnv("BYOLLM_SITE_KEYS") });
  return state.app;
}

/** Where the approval page lives; the daemon prints it next to the code. */
export function verificationUrl(): string {
  return `${(process.env.PUBLIC_ORIGIN ?? "http://localhost:3000").replace(/\/+$/, "")}/pair`;
}

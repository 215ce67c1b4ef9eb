// One store and one app per server process, built on first use: `next build`
// imports this module with no secrets set. Every process and every instance
// shares the database, so a device can pair through one and claim through another.
import { ByollmApp, siteKeysFromEnv } from "@byollm/server";
import { postgresStore, type PostgresStore } from "@byollm/server/postgres";

type Byollm = { store: PostgresStore; app?: ByollmApp };
const slot = globalThis as typeof globalThis & { __byollm?: Byollm };

function byollm(): Byollm {
  const connectionString = process.env.DATABASE_URL;
  if (!connectionString) throw new Error("set DATABASE_URL to your PostgreSQL connection string");
  return (slot.__byollm ??= { store: postgresStore({ connectionString }) });
}

export function getStore(): PostgresStore {
  return byollm().store;
}

export function getApp(): ByollmApp {
  const state = byollm();
  state.app ??= new ByollmApp({ store: state.store, siteKeys: siteKeysFromEnv("BYOLLM_SITE_KEYS") });
  return state.app;
}

/** The approval page; the daemon prints it next to the pairing code. */
export function verificationUrl(): string {
  return `${process.env.PUBLIC_ORIGIN}/pair`;
}

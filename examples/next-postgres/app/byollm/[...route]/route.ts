// The protocol. The daemon keeps only the origin of the URL it is given and
// calls <origin>/byollm/<endpoint>, so this route must be app/byollm.
import { createHandler } from "@byollm/server/next";
import { siteKeysFromEnv } from "@byollm/server";
import { getStore, verificationUrl } from "@/lib/byollm";

// A function: it runs at the first request, not during `next build`.
export const { POST, GET, dynamic } = createHandler(() => ({
  store: getStore(),
  siteKeys: siteKeysFromEnv("BYOLLM_SITE_KEYS"),
  verificationUrl: verificationUrl(),
  // Who sent a request, for the pairing limits (docs/security.md). On Vercel
  // its edge sets x-real-ip and a client cannot; elsewhere a client could, so
  // without a trusted proxy every request counts as one source.
  source: (request) => (process.env.VERCEL ? (request.headers.get("x-real-ip") ?? undefined) : undefined),
}));

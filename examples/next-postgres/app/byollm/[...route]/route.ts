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
}));

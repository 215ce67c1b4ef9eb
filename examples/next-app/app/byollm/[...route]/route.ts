// The protocol mount. It lives at /byollm because that is the only path the
// daemon calls: `byollm connect <url>` keeps just the origin of <url> and
// sends every request to <origin>/byollm/<endpoint>. So pair with the bare
// origin — `npx byollm connect https://your-app.example` — and leave basePath
// at its default.
import { createHandler } from "@byollm/server/next";
import { siteKeysFromEnv } from "@byollm/server";
import { getStore, verificationUrl } from "@/lib/byollm";

// A function, not an object: it runs on the first request, not during `next build`.
export const { POST, GET, dynamic } = createHandler(() => ({
  store: getStore(),
  siteKeys: siteKeysFromEnv("BYOLLM_SITE_KEYS"),
  verificationUrl: verificationUrl(),
}));

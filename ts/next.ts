// `byollm-server-native/next` (drop-in for `@byollm/server/next`): a Next.js
// route-handler mount. Pass a config *function* so nothing (store, secrets)
// is built when `next build` imports the route module; it is called on the
// first request and the handler is kept.
import { publicOriginProblem } from "./handlers.js";
import { createFetchHandler, type FetchHandlerConfig, type RequestSource } from "./http.js";
import type { HandlerConfig } from "./types.js";

export type { HandlerConfig, RequestSource };

/**
 * The handler config plus where the route is mounted (usually
 * `"/api/byollm"`) and how a request's source is named (on Vercel:
 * `(req) => req.headers.get("x-real-ip") ?? undefined`; see docs/security.md).
 */
export type NextHandlerConfig = FetchHandlerConfig;

let warnedAtBuild = false;

export function createHandler(config: NextHandlerConfig | (() => NextHandlerConfig)): {
  POST: (request: Request) => Promise<Response>;
  /** The same handler, so a stray GET gets the protocol's 405 rather than a framework 404. */
  GET: (request: Request) => Promise<Response>;
  /** Never cached: every call changes lease state. */
  dynamic: "force-dynamic";
} {
  // `next build` imports the route without calling `config`; PUBLIC_ORIGIN is
  // the one input of the documented recipe the mount can check there, in the
  // build's own output rather than at the first daemon request.
  if (process.env.NEXT_PHASE === "phase-production-build") {
    const problem = publicOriginProblem();
    if (problem !== undefined && !warnedAtBuild) {
      warnedAtBuild = true;
      console.warn(`byollm: ${problem} The approval page's URL is built from it at the first request.`);
    }
  }
  let built: ((request: Request) => Promise<Response>) | undefined;
  // Not async on purpose: a config that fails to build throws synchronously
  // from POST/GET, and is tried again on the next request.
  const handler = (request: Request): Promise<Response> => {
    built ??= createFetchHandler(typeof config === "function" ? config() : config);
    return built(request);
  };
  return { POST: handler, GET: handler, dynamic: "force-dynamic" };
}

// The web-standard Request → Response mount of the protocol: method, route,
// size limits, one parse of the body in the core, then the handlers.
import { Endpoints, retryAfterOf } from "./handlers.js";
import { recorderFor } from "./metrics.js";
import { native, PROTOCOL } from "./native.js";
import type { Endpoint, HandlerConfig } from "./types.js";

const DEFAULT_BASE_PATH = "/byollm";

const HEADERS = { "content-type": "application/json", "cache-control": "no-store" } as const;

/**
 * One trailing slash is forgiven; anything that is not a plain absolute path
 * is a deployment mistake and is refused when it is configured, not discovered
 * later as a stream of 404s.
 */
function normalizeBasePath(basePath: string): string {
  const trimmed = basePath.endsWith("/") ? basePath.slice(0, -1) : basePath;
  if (!trimmed.startsWith("/")) throw new Error(`basePath must start with "/": got ${basePath}`);
  if (trimmed.includes("//") || /[?#*]/.test(trimmed)) throw new Error(`basePath must be a plain path: got ${basePath}`);
  return trimmed;
}

/**
 * The endpoint a path names, or null. The whole path must be
 * `<basePath>/<endpoint>` (one trailing slash allowed): matching on the last
 * segment alone would answer on paths nobody meant to expose.
 */
export function routeEndpoint(pathname: string, basePath: string = DEFAULT_BASE_PATH): Endpoint | null {
  return routeNormalized(pathname, normalizeBasePath(basePath));
}

function routeNormalized(pathname: string, base: string): Endpoint | null {
  const path = pathname.endsWith("/") ? pathname.slice(0, -1) : pathname;
  if (!path.startsWith(`${base}/`)) return null;
  const rest = path.slice(base.length + 1);
  return (PROTOCOL.endpoints as string[]).includes(rest) ? (rest as Endpoint) : null;
}

/**
 * The request signature from the `x-byollm-*` headers, or undefined when any
 * is missing. The timestamp is read as `Number()` reads it, by the core (so `""` is 0 and hex and
 * exponents parse); a non-finite value means no signature.
 */
export function signatureFrom(headers: Headers): unknown {
  const runnerId = headers.get("x-byollm-runner");
  const rawIssuedAt = headers.get("x-byollm-issued-at");
  const signature = headers.get("x-byollm-signature");
  // Checked first: Number(null) is 0, a plausible-looking timestamp.
  if (runnerId === null || rawIssuedAt === null || signature === null) return undefined;
  const issuedAt = native.issuedAtHeader(rawIssuedAt);
  if (issuedAt === null) return undefined;
  return { runnerId, issuedAt, signature };
}

/** Stateless between calls (no `stream` option), so one serves every request. */
const UTF8 = new TextDecoder();

type BodyRead = { failed: false; text: string; overBytes?: undefined } | { failed: false; overBytes: number } | { failed: true };

/**
 * The body as text, read no further than `cap` bytes: UTF-8 decoded with a
 * leading BOM dropped and bad sequences as U+FFFD (what `request.text()`
 * gives, the text the signature covers). Past the cap the stream is
 * cancelled and `overBytes` is how much had arrived, at least `cap + 1`.
 */
async function readBody(request: Request, cap: number): Promise<BodyRead> {
  const stream = request.body;
  if (stream === null) return { failed: false, text: "" };
  const chunks: Uint8Array[] = [];
  let total = 0;
  try {
    const reader = stream.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (!(value instanceof Uint8Array)) return { failed: true };
      total += value.byteLength;
      if (total > cap) {
        reader.cancel().catch(() => undefined);
        return { failed: false, overBytes: total };
      }
      chunks.push(value);
    }
  } catch {
    return { failed: true };
  }
  return { failed: false, text: UTF8.decode(chunks.length === 1 ? (chunks[0] as Uint8Array) : Buffer.concat(chunks, total)) };
}

function json(status: number, body: unknown): Response {
  return new Response(JSON.stringify(body), { status, headers: { ...HEADERS } });
}

/**
 * Where a request came from, as far as this server can trust it: the
 * socket's address, or the first hop a trusted proxy wrote (see
 * docs/security.md). `undefined`: not known (counted with every other
 * request that names none).
 */
export type RequestSource = (request: Request) => string | undefined;

/** `createFetchHandler`'s options: the handler config, where it is mounted, and how a request's source is named. */
export type FetchHandlerConfig = HandlerConfig & {
  readonly basePath?: string;
  /**
   * Names each request's source, so unsigned `pair start` requests and
   * failed pairing polls are bounded per source (at most 64 pending
   * pairings each; past that `429 rate-limited`). Without it every request
   * is one source: one client can then hold every pending pairing there is.
   */
  readonly source?: RequestSource;
};

/** A `(Request) => Promise<Response>` handler for the whole protocol (Next.js, Hono, Bun, Deno, Workers…). */
export function createFetchHandler(config: FetchHandlerConfig): (request: Request) => Promise<Response> {
  const endpoints = new Endpoints(config);
  const basePath = normalizeBasePath(config.basePath ?? DEFAULT_BASE_PATH);
  const sourceOf = config.source;
  if (sourceOf !== undefined && typeof sourceOf !== "function") {
    throw new TypeError("source must be a function of the Request returning a string or undefined");
  }
  const metrics = recorderFor(config.store, config.metrics);

  // The request boundary: every answer is counted, with what it alone does not say.
  return async function handle(request: Request): Promise<Response> {
    const started = performance.now();
    const seen: Seen = { endpoint: null, tooLarge: false, body: undefined, answer: undefined };
    // A host that throws (it should not) is counted as its 500.
    let status = 500;
    try {
      const response = await serve(request, seen);
      status = response.status;
      return response;
    } finally {
      metrics?.request(seen.endpoint, status, seen.tooLarge, started, seen.body, seen.answer);
    }
  };

  async function serve(request: Request, seen: Seen): Promise<Response> {
    if (request.method !== "POST") {
      return json(405, { error: "bad-request", message: "protocol endpoints accept POST only" });
    }
    const endpoint = routeNormalized(new URL(request.url).pathname, basePath);
    if (endpoint === null) return json(404, { error: "not-found", message: `not a ${basePath} endpoint` });
    seen.endpoint = endpoint;

    const declared = request.headers.get("content-length");
    if (declared !== null && Number(declared) > PROTOCOL.maxBodyBytes) {
      seen.tooLarge = true;
      return json(400, { error: "bad-request", message: native.tooLargeMessage(Number(declared)) });
    }

    // Bytes are counted as they arrive, whatever content-length said (or
    // whether it was sent at all), and reading stops at the cap.
    const read = await readBody(request, PROTOCOL.maxBodyBytes);
    if (read.failed) return json(400, { error: "bad-request", message: "request body is not valid JSON" });
    if (read.overBytes !== undefined) {
      seen.tooLarge = true;
      return json(400, { error: "bad-request", message: native.tooLargeMessage(read.overBytes) });
    }
    seen.body = read.text;
    const answer = await endpoints.serve(endpoint, read.text, request.headers, endpoint === "pair" ? sourceName(request) : undefined);
    seen.answer = answer.text;
    const headers: Record<string, string> = { ...HEADERS };
    const wait = retryAfterOf(answer);
    if (wait !== undefined) headers["retry-after"] = String(wait);
    return new Response(answer.text, { status: answer.status, headers });
  }

  /** The host's name for the request's source; a throwing or odd answer names none. */
  function sourceName(request: Request): string | undefined {
    if (sourceOf === undefined) return undefined;
    try {
      const named = sourceOf(request);
      return typeof named === "string" && named !== "" ? named : undefined;
    } catch {
      return undefined;
    }
  }
}

/** What one request's boundary records beside the answer's status (the texts for OpenTelemetry's job ids). */
interface Seen {
  endpoint: Endpoint | null;
  tooLarge: boolean;
  body: string | undefined;
  answer: string | undefined;
}


// A Supabase Edge Function (Deno) that accepts a daemon's signed `result`
// call and opens the sealed outcome inside it, using only the WebAssembly
// build of the byollm crypto core (`byollm-server-native-edge`): no native
// addon, no FFI permission, no Node built-ins.
//
// The handler is a plain function of (Request, config) so it can be tested
// without a server; index.ts wires it to Deno.serve.
import {
  keyId,
  open,
  siteKeysFromEnvValue,
  verifyRequest,
  type RequestSignature,
  type SealedEnvelope,
  type StoredKeys,
} from "byollm-server-native-edge";

export interface Config {
  /** The site's keys: the BYOLLM_SITE_KEYS value `keygen` printed. */
  siteKeys: StoredKeys;
  /** The identity key pinned for a runner when it paired (e.g. from your runners table). */
  identityOf(runnerId: string): Promise<string | undefined> | string | undefined;
  /** Clock, for tests. */
  now?: () => number;
}

/** Reads the site keys once, with the reference's error messages on a bad value. */
export function configFromEnv(get: (name: string) => string | undefined): Config {
  const siteKeys = siteKeysFromEnvValue("BYOLLM_SITE_KEYS", get("BYOLLM_SITE_KEYS"));
  // runnerId → identity public key, as JSON; a real deployment reads its store.
  const pinned: Record<string, string> = JSON.parse(get("BYOLLM_RUNNER_IDENTITIES") ?? "{}");
  return { siteKeys, identityOf: (runnerId) => pinned[runnerId] };
}

const json = (status: number, body: unknown) =>
  new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json" } });

/** The three signature headers a daemon sends, or undefined when one is missing. */
function signatureFrom(headers: Headers): RequestSignature | undefined {
  const runnerId = headers.get("x-byollm-runner");
  const issuedAt = headers.get("x-byollm-issued-at");
  const signature = headers.get("x-byollm-signature");
  if (!runnerId || !issuedAt || !signature || !/^\d+$/.test(issuedAt)) return undefined;
  return { runnerId, issuedAt: Number(issuedAt), signature };
}

export async function handle(req: Request, config: Config): Promise<Response> {
  if (req.method !== "POST") return json(405, { error: "bad-request", message: "POST only" });
  // The signature covers the exact bytes sent, so read the text before parsing it.
  const body = await req.text();
  const signature = signatureFrom(req.headers);
  const identityPublic = signature && (await config.identityOf(signature.runnerId));
  if (!signature || !identityPublic) {
    return json(401, { error: "unauthorized", message: "unknown runner or missing signature" });
  }
  const verdict = verifyRequest({ identityPublic, endpoint: "result", body, signature, now: (config.now ?? Date.now)() });
  if (verdict === "stale") {
    return json(401, { error: "clock-skew", message: "the request's issuedAt is too far from the server clock" });
  }
  if (verdict !== null) return json(401, { error: "unauthorized", message: "unauthorized" });

  let parsed: { jobId?: unknown; envelope?: SealedEnvelope };
  try {
    parsed = JSON.parse(body);
  } catch {
    return json(400, { error: "bad-request", message: "body is not JSON" });
  }
  if (typeof parsed.jobId !== "string" || typeof parsed.envelope !== "object" || parsed.envelope === null) {
    return json(400, { error: "bad-request", message: "expected { jobId, envelope }" });
  }
  const opened = await open({
    envelope: parsed.envelope,
    recipientKeys: config.siteKeys,
    senderIdentityPublic: identityPublic,
    expected: {
      jobId: parsed.jobId,
      senderKeyId: keyId(identityPublic),
      recipientKeyId: keyId(config.siteKeys.identityPublic),
      direction: "result",
    },
  });
  if (!opened.ok) {
    // One refusal for every reason: the sender is not entitled to learn which check failed.
    return json(422, { accepted: false });
  }
  // A real function would store the outcome here (e.g. supabase.from("jobs").update(...)).
  return json(200, { accepted: true, jobId: parsed.jobId, outcome: JSON.parse(opened.plaintext) });
}

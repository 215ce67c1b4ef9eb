// One runtime's smoke test of the NATIVE package, run by scripts/runtime-matrix.mjs
// under Node 20/22/24, Bun and Deno (Deno with --allow-ffi for the addon).
//
// It uses only what the package itself ships (the napi loader index.js and,
// once built, the TypeScript API in dist/; the daemon's crypto from
// __test__/helpers/device-crypto.mjs), never the reference packages, so
// it runs on every runtime we claim. It prints exactly one JSON line:
//   {"runtime": "...", "ok": true|false, "steps": {...}, "error"?: "..."}
// and exits 0 only when every step that could run passed.

import * as deviceKeys from "./device-keys.mjs";
import * as dev from "../__test__/helpers/device-crypto.mjs";

const steps = {};
let failure;

function runtimeName() {
  if (typeof Deno !== "undefined") return `deno ${Deno.version.deno}`;
  if (typeof Bun !== "undefined") return `bun ${Bun.version}`;
  return `node ${process.versions.node}`;
}

function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
}

async function step(name, fn) {
  if (failure) return;
  const t0 = performance.now();
  try {
    const note = await fn();
    steps[name] = note === undefined ? `${(performance.now() - t0).toFixed(1)}ms` : note;
  } catch (err) {
    steps[name] = "FAILED";
    failure = `${name}: ${err && err.stack ? err.stack.split("\n").slice(0, 3).join(" | ") : err}`;
  }
}

const root = new URL("../", import.meta.url);
let native;
let api;

await step("load addon", async () => {
  native = await import(new URL("index.js", root).href);
  check(typeof native.nativeVersion === "function", "nativeVersion exported");
  return `v${native.nativeVersion()}`;
});

const hasCrypto = () => native && typeof native.generateKeys === "function";

await step("keygen", async () => {
  if (!hasCrypto()) return "skipped: this build of the addon exports no crypto yet";
  const keys = native.generateKeys(Date.now());
  check(deviceKeys.verifyPublicIdentity(deviceKeys.publicIdentityOf(keys)), "fresh keys verify");
  check(/^BYOLLM(-[0-9A-Z]{4}){6}$/.test(new native.SiteKeyring(keys).keyId), "key id format");
});

// The WebAssembly edge module too, where it was built (npm run build:wasm):
// every runtime here should load it as well as the native addon.
await step("edge module", async () => {
  let edge;
  try {
    edge = await import(new URL("edge/index.js", root).href);
  } catch (err) {
    return `skipped: edge/ not built (${String(err && err.message).slice(0, 80)})`;
  }
  const site = edge.generateKeys(Date.now());
  const device = edge.generateKeys(Date.now());
  const context = {
    jobId: "job-edge-smoke",
    senderKeyId: edge.keyId(site.identityPublic),
    recipientKeyId: edge.keyId(device.identityPublic),
    deadlineAt: Date.now() + 60_000,
    direction: "result",
  };
  const plaintext = JSON.stringify({ outcome: { outcome: "ok", text: "edge ✓" }, ran: { model: "m", backendClass: "http", durationMs: 1 } });
  const envelope = await edge.seal({ plaintext, senderKeys: device, recipientEncryptionPublic: site.encryptionPublic, context: { ...context, senderKeyId: context.recipientKeyId, recipientKeyId: context.senderKeyId } });
  const opened = await edge.open({
    envelope,
    recipientKeys: site,
    senderIdentityPublic: device.identityPublic,
    expected: { jobId: context.jobId, senderKeyId: context.recipientKeyId, recipientKeyId: context.senderKeyId, direction: "result" },
  });
  check(opened.ok && opened.plaintext === plaintext, "edge round trip");
  if (hasCrypto()) {
    // Same core, two builds: what one seals the other accepts.
    const source = { audience: "private", runnerId: "runner_smoke", runnerOwner: "owner-smoke" };
    const viaNative = await new native.SiteKeyring(site).acceptResult(envelope, context.jobId, device.identityPublic, "ok", source);
    check(viaNative.ok && JSON.parse(viaNative.accepted).outcome.text === "edge ✓", "native accepts what the edge module sealed");
  }
});

// One full in-memory job cycle through the public API, as a site and a daemon
// would run it: pair, enqueue, claim, fetch + open, seal + result, read back.
await step("job cycle", async () => {
  try {
    api = await import(new URL("dist/index.js", root).href);
  } catch (err) {
    return `skipped: dist/ not built (${String(err && err.message).slice(0, 80)})`;
  }
  if (!hasCrypto()) return "skipped: this build of the addon exports no crypto yet";
  const CAP = { kind: "llm.generate", service: "smoke", backendId: "ollama", backendClass: "http", model: "m", offerScope: "private" };
  const siteKeys = api.generateSiteKeys();
  const store = new api.MemoryStore();
  const app = new api.ByollmApp({ store, siteKeys });
  const handler = api.createFetchHandler({ store, siteKeys, verificationUrl: "http://127.0.0.1/pair" });
  const device = native.generateKeys(Date.now());
  const deviceKeyId = dev.keyId(device.identityPublic);
  let runnerId;
  const post = async (endpoint, body, signed = true) => {
    const text = JSON.stringify(body);
    const headers = { "content-type": "application/json" };
    if (signed) {
      const sig = deviceKeys.signRequest(device, { endpoint, runnerId, issuedAt: Date.now(), body: text });
      headers["x-byollm-runner"] = sig.runnerId;
      headers["x-byollm-issued-at"] = String(sig.issuedAt);
      headers["x-byollm-signature"] = sig.signature;
    }
    const res = await handler(new Request(`http://127.0.0.1/byollm/${endpoint}`, { method: "POST", headers, body: text }));
    const json = await res.json();
    check(res.status === 200, `${endpoint} answered ${res.status} ${JSON.stringify(json)}`);
    return json;
  };
  const start = await post(
    "pair",
    {
      protocolVersion: "2",
      action: "start",
      daemon: { version: "0.1.1", label: "smoke", platform: "linux" },
      device: deviceKeys.publicIdentityOf(device),
      capabilities: [CAP],
    },
    false,
  );
  await app.approvePairing({ userCode: start.userCode, owner: "owner-smoke" });
  const poll = await post("pair", { protocolVersion: "2", action: "poll", deviceCode: start.deviceCode }, false);
  check(poll.status === "approved", "pairing approved");
  runnerId = poll.runnerId;
  const [siteKeyId, site] = Object.entries(poll.sites)[0];
  const handle = await app.enqueue({ kind: "llm.generate", payload: { prompt: "smoke" }, owner: "owner-smoke" });
  const claim = await post("claim", { protocolVersion: "2", runnerId, capabilities: [CAP], max: 1 });
  const stub = claim.jobs[0];
  check(stub && stub.id === handle.id, "claimed the enqueued job");
  const fetched = await post("fetch", { protocolVersion: "2", runnerId, jobId: stub.id, leaseId: stub.lease.id });
  const opened = dev.open({
    envelope: fetched.envelope,
    recipientKeys: device,
    senderIdentityPublic: site.identity,
    expected: { jobId: stub.id, senderKeyId: siteKeyId, recipientKeyId: deviceKeyId, direction: "payload" },
  });
  check(opened.ok && JSON.parse(opened.plaintext).prompt === "smoke", "device opens the payload");
  const envelope = dev.seal({
    plaintext: JSON.stringify({ outcome: { outcome: "ok", text: "smoked" }, ran: { model: "m", backendClass: "http", durationMs: 1 } }),
    senderKeys: device,
    recipientEncryptionPublic: site.encryption,
    context: { jobId: stub.id, senderKeyId: deviceKeyId, recipientKeyId: siteKeyId, deadlineAt: Date.now() + 86_400_000, direction: "result" },
  });
  const accepted = await post("result", { protocolVersion: "2", runnerId, jobId: stub.id, leaseId: stub.lease.id, envelope, disposition: "ok" });
  check(accepted.accepted, "result accepted");
  const result = await app.result(handle.id);
  check(result && result.state === "ok" && result.outcome.text === "smoked", `result read back: ${JSON.stringify(result)}`);
});

const ok = failure === undefined;
console.log(JSON.stringify({ runtime: runtimeName(), ok, steps, ...(ok ? {} : { error: failure }) }));
if (!ok) {
  if (typeof Deno !== "undefined") Deno.exit(1);
  process.exit(1);
}

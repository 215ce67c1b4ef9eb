// `deno test --config deno.local.json` (no permissions at all): the daemon
// side is played with the same edge module, the function is called directly.
import assert from "node:assert/strict";
import { generateKeys, keyId, publicIdentityOf, seal, signRequest, type StoredKeys } from "byollm-server-native-edge";
import { handle, type Config } from "./handler.ts";

const NOW = 1767225600000;
const site = generateKeys(NOW);
const device = generateKeys(NOW);
const runnerId = "runner_example";
const config: Config = {
  siteKeys: site,
  identityOf: (id) => (id === runnerId ? publicIdentityOf(device).identity : undefined),
  now: () => NOW + 1_000,
};

async function resultRequest(opts: { sealedBy?: StoredKeys; issuedAt?: number; tamper?: boolean; jobId?: string } = {}) {
  const from = opts.sealedBy ?? device;
  const envelope = await seal({
    plaintext: JSON.stringify({ outcome: { outcome: "ok", text: "hello from the daemon" }, ran: { model: "m" } }),
    senderKeys: from,
    recipientEncryptionPublic: site.encryptionPublic,
    context: { jobId: "job-1", senderKeyId: keyId(from.identityPublic), recipientKeyId: keyId(site.identityPublic), deadlineAt: NOW + 86_400_000, direction: "result" },
  });
  const body = JSON.stringify({ protocolVersion: "2", runnerId, jobId: opts.jobId ?? "job-1", envelope });
  // The request itself is always signed by the pinned device.
  const sig = signRequest(device, { endpoint: "result", runnerId, issuedAt: opts.issuedAt ?? NOW, body });
  return new Request("http://127.0.0.1/functions/v1/byollm-result", {
    method: "POST",
    headers: {
      "content-type": "application/json",
      "x-byollm-runner": sig.runnerId,
      "x-byollm-issued-at": String(sig.issuedAt),
      "x-byollm-signature": sig.signature,
    },
    body: opts.tamper ? body.replace("job-1", "job-2") : body,
  });
}

Deno.test("a signed result from the pinned device is verified and opened", async () => {
  const res = await handle(await resultRequest(), config);
  assert.equal(res.status, 200);
  assert.deepEqual(await res.json(), { accepted: true, jobId: "job-1", outcome: { outcome: { outcome: "ok", text: "hello from the daemon" }, ran: { model: "m" } } });
});

Deno.test("a body changed after signing is unauthorized", async () => {
  const res = await handle(await resultRequest({ tamper: true }), config);
  assert.equal(res.status, 401);
  assert.equal((await res.json()).error, "unauthorized");
});

Deno.test("an old signature is a clock-skew refusal", async () => {
  const res = await handle(await resultRequest({ issuedAt: NOW - 10 * 60_000 }), config);
  assert.equal(res.status, 401);
  assert.equal((await res.json()).error, "clock-skew");
});

Deno.test("an envelope not sealed by the pinned device, or for another job, is refused without saying why", async () => {
  const stranger = generateKeys(NOW);
  for (const req of [await resultRequest({ sealedBy: stranger }), await resultRequest({ jobId: "job-9" })]) {
    const res = await handle(req, config);
    assert.equal(res.status, 422);
    assert.deepEqual(await res.json(), { accepted: false });
  }
});

Deno.test("runs without FFI, network, env or file permissions", () => {
  for (const name of ["ffi", "net", "env", "read", "write"] as const) {
    assert.notEqual(Deno.permissions.querySync({ name }).state, "granted", name);
  }
});

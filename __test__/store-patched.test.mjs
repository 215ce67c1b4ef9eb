// A MemoryStore whose methods were patched (to log, to add a hook) is served
// through those methods, never in place around them. For every method an
// in-place call stands for (IN_PLACE_METHODS, derived from the engine's
// operations in ts/operations.ts), patched in turn on MemoryStore.prototype
// and on an instance: a paired daemon's requests through createFetchHandler
// and through ByollmHandlers, plus the app's enqueue and result, must reach
// the patch in the step that needs it, and still answer as before.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { ByollmApp, ByollmHandlers, MemoryStore, createFetchHandler, generateSiteKeys } from "../dist/index.js";
import { IN_PLACE_METHODS, runsInPlace } from "../dist/memory.js";
import { OPERATION_METHODS } from "../dist/operations.js";
import { Device, ORIGIN } from "./helpers/device.mjs";

const OWNER = "owner-patched";
const root = fileURLToPath(new URL("..", import.meta.url));

/**
 * The step of the scenario below in which each method must be called when
 * the store is served through its methods. A method added to the list
 * without a step here fails the first test: give it one.
 */
const STEP_OF = {
  getPairingByUserCode: "pair start",
  createPairing: "pair start",
  getPairingByDeviceCodeHash: "pair poll",
  consumePairingToken: "pair poll",
  create: "enqueue",
  getRunner: "claim",
  claim: "claim",
  get: "fetch",
  touchRunner: "heartbeat",
  renewLeases: "heartbeat",
  listCancelRequests: "heartbeat",
  complete: "result",
  expireDue: "app.result",
  release: "release",
  cancel: "release",
};

/** Every operation name the Rust engine asks a store for (`Op::name`). */
function engineOperationNames() {
  const sources = [];
  const walk = (dir) => {
    for (const entry of readdirSync(dir)) {
      const path = join(dir, entry);
      if (statSync(path).isDirectory()) walk(path);
      else if (entry.endsWith(".rs")) sources.push(readFileSync(path, "utf8"));
    }
  };
  walk(join(root, "src"));
  for (const text of sources) {
    const at = text.search(/pub(\([a-z]+\))? fn name\(&self\) -> &'static str/);
    if (at < 0 || !/pub(\([a-z]+\))? enum Op\b/.test(text)) continue;
    const body = text.slice(at, text.indexOf("\n    }\n", at));
    return [...body.matchAll(/Op::\w+ \{ \.\. \} => "(\w+)"/g)].map((m) => m[1]).sort();
  }
  throw new Error("the engine's `Op::name` was not found under src/");
}

test("the list of in-place methods is every method of every engine operation, plus an enqueue's and a result's", () => {
  assert.deepEqual(Object.keys(OPERATION_METHODS).sort(), engineOperationNames(), "one entry per operation the engine asks for");
  const expected = new Set([...Object.values(OPERATION_METHODS).flat(), "create", "expireDue", "get"]);
  assert.deepEqual([...IN_PLACE_METHODS].sort(), [...expected].sort());
  assert.deepEqual([...IN_PLACE_METHODS].sort(), Object.keys(STEP_OF).sort(), "each method has a step below that needs it");
});

/** A fetch-style handler over ByollmHandlers.handle, so the device drives it the same way. */
function handlersAsFetch(handlers) {
  return async (request) => {
    const endpoint = new URL(request.url).pathname.split("/").pop();
    const rawBody = await request.text();
    const runnerId = request.headers.get("x-byollm-runner");
    const signature = runnerId
      ? { runnerId, issuedAt: Number(request.headers.get("x-byollm-issued-at")), signature: request.headers.get("x-byollm-signature") }
      : undefined;
    const out = await handlers.handle(endpoint, JSON.parse(rawBody), { endpoint, rawBody, signature });
    return new Response(JSON.stringify(out.body), { status: out.status });
  };
}

/**
 * Pair a daemon, run two jobs (one to its result, one released after the
 * owner asked to cancel it), reading the result through the app. `step(name)`
 * is told which step is running. Returns what each step answered.
 */
async function scenario(store, transport, step) {
  const siteKeys = generateSiteKeys();
  const verificationUrl = `${ORIGIN}/pair`;
  const app = new ByollmApp({ store, siteKeys, noRunnerGraceMs: 0 });
  const handler =
    transport === "createFetchHandler"
      ? createFetchHandler({ store, siteKeys, verificationUrl })
      : handlersAsFetch(new ByollmHandlers({ store, siteKeys, verificationUrl }));
  const device = new Device(handler);

  step("pair start");
  const start = await device.post(
    "pair",
    {
      protocolVersion: "2",
      action: "start",
      daemon: { version: "0.1.1", label: "t", platform: "linux" },
      device: device.publicIdentity(),
      capabilities: device.capabilities,
    },
    false,
  );
  assert.equal(start.status, 200, start.text);
  step("approve");
  await app.approvePairing({ userCode: start.body.userCode, owner: OWNER });
  step("pair poll");
  const poll = await device.post("pair", { protocolVersion: "2", action: "poll", deviceCode: start.body.deviceCode }, false);
  assert.equal(poll.status, 200, poll.text);
  device.runnerId = poll.body.runnerId;
  [[device.siteKeyId, device.site]] = Object.entries(poll.body.sites);

  step("enqueue");
  const first = await app.enqueue({ kind: "llm.generate", payload: { prompt: "first" }, owner: OWNER });
  step("claim");
  const claimed = await device.claim();
  assert.equal(claimed.status, 200, claimed.text);
  const [stub] = claimed.body.jobs;
  assert.equal(stub?.id, first.id);
  step("fetch");
  const fetched = await device.fetchJob(stub);
  assert.equal(fetched.status, 200, fetched.text);
  assert.deepEqual(await device.open(stub, fetched.body.envelope), { prompt: "first" });
  step("heartbeat");
  const beat = await device.heartbeat([{ jobId: stub.id, leaseId: stub.lease.id }]);
  assert.equal(beat.status, 200, beat.text);
  assert.deepEqual([beat.body.lost, beat.body.cancel], [[], []]);
  step("result");
  const result = await device.result(stub, "done");
  assert.equal(result.text, `{"accepted":true,"state":"ok"}`);
  step("app.result");
  assert.deepEqual(await app.result(first.id), {
    jobId: first.id,
    state: "ok",
    outcome: { outcome: "ok", text: "done" },
    provenance: (await store.get(first.id)).provenance,
  });

  step("second job");
  const second = await app.enqueue({ kind: "llm.generate", payload: { prompt: "second" }, owner: OWNER });
  const [held] = (await device.claim()).body.jobs;
  assert.equal(held?.id, second.id);
  await app.cancel(second.id);
  step("release");
  const released = await device.post("release", {
    protocolVersion: "2",
    runnerId: device.runnerId,
    leases: [{ jobId: held.id, leaseId: held.lease.id }],
    reason: "shutdown",
  });
  assert.equal(released.status, 200, released.text);
  assert.deepEqual(released.body.released, [second.id]);
  step("done");
  assert.equal((await store.get(second.id)).state, "canceled", "released after the owner asked: canceled");
}

for (const transport of ["createFetchHandler", "ByollmHandlers"]) {
  for (const where of ["MemoryStore.prototype", "an instance"]) {
    test(`each in-place method patched on ${where} is called (${transport})`, async () => {
      for (const name of IN_PLACE_METHODS) {
        const store = new MemoryStore();
        const target = where === "an instance" ? store : MemoryStore.prototype;
        const original = MemoryStore.prototype[name];
        let current = "setup";
        const steps = [];
        const patched = function (...args) {
          steps.push(current);
          return original.apply(this, args);
        };
        target[name] = patched;
        try {
          assert.equal(runsInPlace(store), false, `${name} patched on ${where}: not run in place`);
          await scenario(store, transport, (s) => {
            current = s;
          });
        } finally {
          if (where === "an instance") delete store[name];
          else MemoryStore.prototype[name] = original;
        }
        assert.ok(steps.includes(STEP_OF[name]), `${name} patched on ${where}: called in "${STEP_OF[name]}", got [${steps.join(", ")}]`);
        assert.equal(runsInPlace(store), true, "unpatched again: run in place");
      }
    });
  }
}

test("unpatched, the same scenario runs in place and answers the same", async () => {
  const store = new MemoryStore();
  assert.equal(runsInPlace(store), true);
  await scenario(store, "createFetchHandler", () => undefined);
});

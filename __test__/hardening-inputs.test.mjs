// Inputs that used to break a site: odd audiences (a host 500 and a job handed
// to strangers), wrong argument types, an empty approving owner, a fetch on a
// lapsed lease, and a runner cache that could disagree with the store. Each
// test runs the scenario on ours; where the reference's behaviour is the
// unsafe one we differ from on purpose, the same scenario on the reference
// shows the scenario really exercises it (docs/security.md explains each).
import { after, test } from "node:test";
import assert from "node:assert/strict";
import * as refServer from "@byollm/server";
import { Daemon, listen, makeSite } from "./hardening-harness.mjs";
import { closeStores, STORE } from "./helpers/diff-stores.mjs";

// Ours on the store DIFF_STORE names (differential-stores.test.mjs runs them all).
after(closeStores);
/** Skips a test about MemoryStore itself when ours runs on another store. */
const memoryOnly = (why) => ({ skip: STORE !== "memory" && `ours is on ${STORE}: ${why}` });

const TEAM_CAPS = [{ kind: "llm.generate", service: "local", backendId: "ollama", backendClass: "http", model: "m1", offerScope: "team" }];
const ODD_AUDIENCES = ["Private", "", "public", "TEAM", " team"];

async function claimed(daemon) {
  const claim = await daemon.claim(4);
  assert.equal(claim.status, 200, JSON.stringify(claim.body));
  return claim.body.jobs;
}

test("enqueue refuses an audience outside the vocabulary, naming the allowed values", async () => {
  const site = await makeSite("ours");
  for (const audience of [...ODD_AUDIENCES, 5, true, {}]) {
    await assert.rejects(
      site.app.enqueue({ kind: "llm.generate", payload: { prompt: "p" }, owner: "bob", audience }),
      (e) => e instanceof TypeError && /`audience` must be "private" or "team"/.test(e.message),
      `audience ${JSON.stringify(audience)}`,
    );
  }
  assert.equal((await site.store.expireDue(site.now())).length, 0);
  // null and undefined are "absent" (private), as the reference's default is.
  const absent = await site.app.enqueue({ kind: "llm.generate", payload: { prompt: "p" }, owner: "bob", audience: null });
  assert.equal(absent.record.audience, "private");
});

test("a job stored with an odd audience (an older deployment's) is matched as private and completes without a 500", memoryOnly("a store of the app's own matches claims by its own rules, and the SQL stores' audience column holds no odd spelling"), async () => {
  for (const audience of ODD_AUDIENCES) {
    // The reference's enqueue stores any spelling: it writes the job into our store.
    const site = await makeSite("ours");
    const refApp = new refServer.ByollmApp({ store: site.store, siteKeys: site.keys, now: site.now });
    const http = await listen(site.handler);
    try {
      const stranger = new Daemon(http.url, { capabilities: TEAM_CAPS });
      const owner = new Daemon(http.url);
      await stranger.pair(site.app, "alice");
      await owner.pair(site.app, "bob");
      const job = await refApp.enqueue({ kind: "llm.generate", payload: { prompt: "secret" }, owner: "bob", audience });
      assert.equal((await site.store.get(job.id)).audience, audience);

      assert.deepEqual(await claimed(stranger), [], `another owner's team runner must not get a job stored as ${JSON.stringify(audience)}`);
      const availability = await site.app.runnerAvailability({ kind: "llm.generate", owner: "bob", audience });
      assert.equal(availability.available, true, "the owner's own runner is online");

      const [stub] = await claimed(owner);
      assert.equal(stub.id, job.id);
      assert.equal((await owner.fetchJob(stub)).status, 200);
      const done = await owner.result(stub, { outcome: "ok", text: "fine" });
      assert.deepEqual([done.status, done.body], [200, { accepted: true, state: "ok" }]);
      const result = await site.app.result(job.id);
      // Provenance echoes the stored audience; only exactly "private" is trusted.
      assert.equal(result.provenance.audience, audience);
      assert.equal(result.provenance.untrusted, true);
      assert.equal(result.provenance.runnerOwner, "bob");
    } finally {
      await http.close();
    }
  }
});

test("[ref] the reference hands a job with an odd audience to another owner's team runner", async () => {
  const site = await makeSite("ref");
  const http = await listen(site.handler);
  try {
    const stranger = new Daemon(http.url, { capabilities: TEAM_CAPS });
    await stranger.pair(site.app, "alice");
    const job = await site.app.enqueue({ kind: "llm.generate", payload: { prompt: "secret" }, owner: "bob", audience: "Private" });
    const jobs = await claimed(stranger);
    assert.deepEqual(jobs.map((j) => j.id), [job.id], "fails open: this is what ours refuses");
  } finally {
    await http.close();
  }
});

test("runnerAvailability answers an unknown audience instead of throwing", async () => {
  const site = await makeSite("ours");
  const http = await listen(site.handler);
  try {
    const stranger = new Daemon(http.url, { capabilities: TEAM_CAPS });
    await stranger.pair(site.app, "alice");
    await stranger.heartbeat();
    for (const audience of ["public", "Private", ""]) {
      const answer = await site.app.runnerAvailability({ kind: "llm.generate", owner: "bob", audience });
      // Matched as private: alice's runner cannot take bob's job.
      assert.equal(answer.available, false, audience);
      assert.equal(answer.reason, "audience-admits-nobody");
    }
    await assert.rejects(site.app.runnerAvailability({ kind: "llm.generate", owner: 7 }), /`owner` must be a string/);
  } finally {
    await http.close();
  }
});

test("every public method refuses a wrong argument with a TypeError that names the field", async () => {
  const site = await makeSite("ours");
  const cases = [
    [() => site.app.enqueue({ kind: "llm.generate", payload: { prompt: "p" }, owner: 7 }), "owner"],
    [() => site.app.enqueue({ kind: "llm.generate", payload: { prompt: "p" }, owner: "" }), "owner"],
    [() => site.app.enqueue({ kind: "llm.generate", payload: { prompt: "p" }, owner: "bob", audience: 5 }), "audience"],
    [() => site.app.enqueue({ kind: "llm.generate", payload: { prompt: "p" }, owner: "bob", audienceAllow: "carol" }), "audienceAllow"],
    [() => site.app.enqueue({ kind: "llm.generate", payload: { prompt: "p" }, owner: "bob", dependsOn: [1] }), "dependsOn"],
    [() => site.app.enqueue({ kind: "llm.generate", payload: { prompt: "p" }, owner: "bob", ttlMs: "60000" }), "ttlMs"],
    [() => site.app.enqueue({ kind: "llm.generate", payload: { prompt: "p" }, owner: "bob", deadlineAt: "soon" }), "deadlineAt"],
    [() => site.app.enqueue({ kind: "llm.generate", payload: { prompt: "p" }, owner: "bob", id: 12 }), "id"],
    [() => site.app.job(5), "jobId"],
    [() => site.app.result({}), "jobId"],
    [() => site.app.cancel(null), "jobId"],
    [() => site.app.approvePairing({ userCode: 5, owner: "bob" }), "userCode"],
    [() => site.app.denyPairing(5), "userCode"],
    [() => site.app.pendingPairing(undefined), "userCode"],
    [() => site.app.runners(1), "owner"],
    [() => site.app.revokeRunner(1), "runnerId"],
  ];
  for (const [call, field] of cases) {
    await assert.rejects(call, (e) => {
      assert.ok(e instanceof TypeError, `${field}: ${e}`);
      assert.match(e.message, new RegExp(`\`${field}\``));
      assert.doesNotMatch(e.message, /Failed to convert|rust type/);
      return true;
    });
  }
  await assert.rejects(site.app.enqueue(null), TypeError);
  await assert.rejects(site.app.approvePairing("ABCD-EFGH"), TypeError);
});

test("approvePairing refuses an empty owner and leaves the pairing pending", async () => {
  const site = await makeSite("ours");
  const http = await listen(site.handler);
  try {
    const daemon = new Daemon(http.url);
    const start = await daemon.call(
      "pair",
      { action: "start", daemon: { version: "0.1.1", label: "l", platform: "linux" }, device: daemon.identity, capabilities: daemon.capabilities },
      { sign: false },
    );
    assert.equal(start.status, 200);
    await assert.rejects(site.app.approvePairing({ userCode: start.body.userCode, owner: "" }), /`owner` must be a non-empty string/);
    assert.notEqual(await site.app.pendingPairing(start.body.userCode), null, "still pending");
    const poll = await daemon.call("pair", { action: "poll", deviceCode: start.body.deviceCode }, { sign: false });
    assert.equal(poll.body.status, "pending");
  } finally {
    await http.close();
  }
});

for (const which of ["ref", "ours"]) {
  test(`[${which}] /fetch on a lease that lapsed but was not swept`, async () => {
    const clock = { t: Date.now() };
    const site = await makeSite(which, { clock });
    const http = await listen(site.handler);
    try {
      const daemon = new Daemon(http.url, { clock });
      await daemon.pair(site.app, "bob");
      await site.app.enqueue({ kind: "llm.generate", payload: { prompt: "p" }, owner: "bob" });
      const [stub] = await claimed(daemon);
      clock.t = stub.lease.expiresAt + 3_600_000; // an hour later; nothing swept
      const late = await daemon.fetchJob(stub);
      if (which === "ours") {
        assert.deepEqual([late.status, late.body.error], [404, "not-found"]);
      } else {
        assert.equal(late.status, 200, "the reference still hands out the payload");
      }
    } finally {
      await http.close();
    }
  });
}

test("the runner record has one source of truth: the store", memoryOnly("it revokes through MemoryStore's native handle"), async () => {
  const site = await makeSite("ours");
  const http = await listen(site.handler);
  try {
    const a = new Daemon(http.url);
    const b = new Daemon(http.url);
    const runnerA = await a.pair(site.app, "bob");
    await b.pair(site.app, "bob");
    assert.equal((await a.heartbeat()).status, 200);
    assert.equal((await b.heartbeat()).status, 200);

    // Editing the object approvePairing returned changes nothing requests see.
    runnerA.revokedAt = site.now();
    assert.equal((await a.heartbeat()).status, 200);
    const fetched = await site.store.getRunner(a.runnerId);
    fetched.revokedAt = site.now();
    assert.equal((await a.heartbeat()).status, 200);

    // A revocation made on the native store shows on the next request.
    site.store.native.revokeRunner(b.runnerId, site.now());
    const refused = await b.heartbeat();
    assert.equal(refused.status, 403, JSON.stringify(refused.body));
    assert.equal(typeof (await site.store.getRunner(b.runnerId)).revokedAt, "number");
  } finally {
    await http.close();
  }
});

test("lone surrogates a device sends: kept in the pairing, U+FFFD in its runner record, never a host 500 or a lost record", memoryOnly("the U+FFFD is MemoryStore's (README); store-text.test.mjs covers every store"), async () => {
  const site = await makeSite("ours");
  const http = await listen(site.handler);
  try {
    const daemon = new Daemon(http.url);
    const caps = [{ ...daemon.capabilities[0], model: "m\ud800" }];
    const start = await daemon.send(
      "pair",
      JSON.stringify({
        protocolVersion: "2",
        action: "start",
        daemon: { version: "0.1.1\udc00", label: "lab\ud800el", platform: "linux" },
        device: daemon.identity,
        capabilities: caps,
      }),
      { sign: false },
    );
    assert.equal(start.status, 200, JSON.stringify(start.body));
    // The pairing record is kept as the JSON text it was given, so the code unit survives, as in the reference.
    const pending = await site.app.pendingPairing(start.body.userCode);
    assert.equal(pending.label, "lab\ud800el");
    assert.equal(pending.capabilities[0].model, "m\ud800");
    // The runner record is built natively, where a lone surrogate is U+FFFD.
    const approved = await site.app.approvePairing({ userCode: start.body.userCode, owner: "carol" });
    assert.equal(approved.label, "lab\ufffdel");

    await daemon.pair(site.app, "bob");
    daemon.capabilities = caps;
    assert.equal((await daemon.heartbeat()).status, 200);
    const runner = await site.store.getRunner(daemon.runnerId);
    assert.equal(runner.capabilities[0].model, "m\ufffd", "the heartbeat's capabilities are kept, not nulled");
  } finally {
    await http.close();
  }
});

test("MemoryStore's own methods refuse or ignore a wrong-typed argument without a binding's message", memoryOnly("MemoryStore's own methods"), async () => {
  const site = await makeSite("ours");
  const base = { id: "j-1", kind: "llm.generate", sizeClass: "small", owner: "bob", envelope: { ciphertext: "x", recipientKeyId: "k", senderKeyId: "k", direction: "payload", deadlineAt: 1 } };
  for (const [field, value] of [["id", 1], ["owner", null], ["kind", 2], ["audience", 5], ["audienceAllow", "a"], ["ttlMs", "1"]]) {
    await assert.rejects(
      async () => site.store.create({ ...base, [field]: value }, site.now()),
      (e) => e instanceof TypeError && e.message.includes(`\`${field}\``) && !/Failed to convert/.test(e.message),
      field,
    );
  }
  // An odd audience string is stored as given (a record from an older app).
  assert.equal((await site.store.create({ ...base, audience: "Private" }, site.now())).audience, "Private");
  assert.equal(await site.store.cancel(5, site.now()), null);
  assert.deepEqual(await site.store.listClaimedBy({}), []);
  assert.deepEqual(await site.store.listCancelRequests(7), []);
  assert.deepEqual(await site.store.listRunners(7), []);
});

test("an id or owner holding a lone surrogate is refused (it would name the same job as another)", async () => {
  const site = await makeSite("ours");
  for (const [field, value] of [["id", "x\ud800"], ["owner", "bob\udbff"], ["dependsOn", ["a\udc00"]], ["audienceAllow", ["\ud800"]]]) {
    await assert.rejects(
      site.app.enqueue({ kind: "llm.generate", payload: { prompt: "p" }, owner: "bob", audience: "team", [field]: value }),
      (e) => e instanceof TypeError && e.message.includes(`\`${field}\``) && /lone surrogates/.test(e.message),
      field,
    );
  }
  assert.ok(await site.app.enqueue({ kind: "llm.generate", payload: { prompt: "p" }, owner: "b\u{1F642}b", id: "x\u{1F642}" }));
});

test("a body whose last character straddles the native read buffer's end is read whole (fresh process)", async () => {
  // The buffer starts at 4,096 bytes and V8 copies whole characters only: a
  // 4-byte character at the end used to be dropped, the cut body passed the
  // canonical check, and JSON.parse of the whole one threw (a host 500).
  const { spawnSync } = await import("node:child_process");
  const script = `
    import { createFetchHandler, MemoryStore, generateSiteKeys } from ${JSON.stringify(new URL("../dist/index.js", import.meta.url).href)};
    const handler = createFetchHandler({ store: new MemoryStore(), siteKeys: generateSiteKeys(), verificationUrl: "https://x.example/pair", basePath: "/byollm" });
    const answers = [];
    for (const size of [4090, 4091, 4092, 4093, 4094, 4095, 4096]) {
      const head = '{"protocolVersion":"2","runnerId":"';
      const tail = '","capabilities":[],"max":1}';
      const body = head + "r".repeat(size - head.length - tail.length) + tail + "\\u{1F642}";
      const r = await handler(new Request("http://127.0.0.1/byollm/claim", { method: "POST", headers: { "content-type": "application/json" }, body }));
      answers.push(r.status + " " + (await r.json()).error);
    }
    console.log(JSON.stringify(answers));
  `;
  const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8" });
  assert.equal(r.status, 0, r.stderr);
  const answers = JSON.parse(r.stdout.trim().split("\n").pop());
  for (const answer of answers) assert.equal(answer, "400 bad-request");
});

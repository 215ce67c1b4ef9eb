// End to end through the example site (`npm start`): a daemon-side client
// built on @byollm/protocol pairs with it, a signed-in person approves the
// code through the site's own form, enqueues a prompt, the client claims,
// opens, answers, and the site's result endpoint shows the answer.
//
// The site runs as a child process, under Node 22 and under the machine's
// own Node (20), since `npm start` has to work on both.
import { test, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { TestDaemon } from "./site-daemon.mjs";
import { SiteUser, startSiteProcess } from "./site-harness.mjs";

// The Node binaries to run the site under: this one, and /usr/bin/node when it
// is a different version.
const nodes = [process.execPath];
if (existsSync("/usr/bin/node")) {
  const other = spawnSync("/usr/bin/node", ["--version"], { encoding: "utf8" }).stdout.trim();
  if (other !== process.version) nodes.push("/usr/bin/node");
  else console.log(`# /usr/bin/node is ${other}, the same as this one: the site runs once`);
}

for (const node of nodes) {
  const nodeVersion = spawnSync(node, ["--version"], { encoding: "utf8" }).stdout.trim();

  describe(`example site under node ${nodeVersion}`, () => {
    let site;
    before(async () => {
      site = await startSiteProcess({ node });
    });
    after(async () => {
      await site?.stop();
    });

    test("prints how to connect a daemon, to the bare origin", () => {
      const { stdout } = site.output();
      assert.match(stdout, new RegExp(`^  npx byollm connect ${site.origin}$`, "m"));
      assert.match(readFileSync(site.envFile, "utf8"), /^BYOLLM_SITE_KEYS=ey/m, "the generated keys are kept in the env file");
    });

    test("pair → approve as a signed-in person → enqueue → run → result", async () => {
      const alice = new SiteUser(site.origin);
      await alice.signIn("alice");

      const daemon = new TestDaemon(site.origin, { label: "alice-laptop" });
      const started = await daemon.pairStart();
      assert.equal(started.verificationUrl, `${site.origin}/pair`, "the daemon is sent to the approval page");
      assert.match(started.userCode, /^[A-Z0-9]{4}-[A-Z0-9]{4}$/);

      // The approval page shows what is being approved before the button.
      const pending = await alice.request(`/pair?code=${encodeURIComponent(started.userCode.toLowerCase())}`);
      assert.equal(pending.status, 200);
      assert.match(pending.text, /<td id="label">alice-laptop<\/td>/);
      assert.ok(pending.text.includes(daemon.fingerprint), "the device fingerprint is on the page");
      assert.match(pending.text, /echo-model/);

      const approved = await alice.request("/pair/approve", { method: "POST", form: { code: started.userCode } });
      assert.equal(approved.status, 200, approved.text);
      const polled = await daemon.waitForApproval(started.deviceCode);
      assert.equal(polled.owner, "alice", "the owner comes from the site's session");
      assert.match(polled.runnerId, /^runner_[0-9a-f-]{36}$/);
      assert.ok(approved.text.includes(polled.runnerId));
      // The page's site fingerprint is the key the daemon pinned.
      const home = await alice.request("/");
      assert.ok(home.text.includes(daemon.siteKeyId), "the home page shows the pinned site key");

      // The code is spent: a second approval is refused with a clear page.
      const again = await alice.request("/pair/approve", { method: "POST", form: { code: started.userCode } });
      assert.equal(again.status, 400);

      const heartbeat = await daemon.heartbeat();
      assert.equal(heartbeat.status, 200);
      const prompts = await alice.request("/prompts");
      assert.match(prompts.text, /A device of yours can run this/);

      const jobId = await alice.sendPrompt("Say hello to the example site");
      const queued = await alice.job(jobId);
      assert.equal(queued.status, 200);
      assert.deepEqual(queued.body, { jobId, state: "queued" });

      const { stub, payload, result } = await daemon.runOne((p) => `echo: ${p.prompt}`);
      assert.equal(stub.id, jobId);
      assert.equal(stub.owner, "alice");
      assert.deepEqual(payload, { prompt: "Say hello to the example site" });
      assert.deepEqual(result, { accepted: true, state: "ok" });

      const done = await alice.job(jobId);
      assert.equal(done.body.state, "ok");
      assert.deepEqual(done.body.outcome, { outcome: "ok", text: "echo: Say hello to the example site" });
      assert.equal(done.body.provenance.runnerId, daemon.runnerId);
      assert.equal(done.body.provenance.model, "echo-model");

      // Another person sees neither the job nor the device.
      const bob = new SiteUser(site.origin);
      await bob.signIn("bob");
      assert.equal((await bob.job(jobId)).status, 404);
      assert.equal((await bob.request(`/prompts/${jobId}`)).status, 404);
      const bobRevoke = await bob.request("/devices/revoke", { method: "POST", form: { id: daemon.runnerId } });
      assert.equal(bobRevoke.status, 404);

      // The owner revokes the device from the devices page; its next signed call is refused.
      const devices = await alice.request("/devices");
      assert.ok(devices.text.includes(daemon.runnerId));
      const revoke = await alice.request("/devices/revoke", { method: "POST", form: { id: daemon.runnerId } });
      assert.equal(revoke.status, 303);
      const refused = await daemon.heartbeat();
      assert.equal(refused.status, 403);
      assert.equal(refused.body.error, "revoked");
      assert.match((await alice.request("/devices")).text, /revoked/);
    });

    test("words for people, not codes: human times, device names, a favicon, revoke asks first, one console line per event", async () => {
      const logged = async (pattern) => {
        const deadline = Date.now() + 10_000;
        while (!pattern.test(site.output().stdout)) {
          if (Date.now() > deadline) assert.fail(`no console line matches ${pattern}:\n${site.output().stdout}`);
          await new Promise((r) => setTimeout(r, 50));
        }
      };
      const visibleText = (html) => html.replace(/<script[\s\S]*?<\/script>|<style[\s\S]*?<\/style>|<[^>]+>/g, " ");
      for (const path of ["/favicon.ico", "/favicon.svg"]) {
        const icon = await fetch(site.origin + path);
        assert.equal(icon.status, 200, path);
        assert.equal(icon.headers.get("content-type"), "image/svg+xml");
      }

      const erin = new SiteUser(site.origin);
      await erin.signIn("erin");
      const none = await erin.request("/prompts");
      assert.match(none.text, /You have no device yet/);
      assert.doesNotMatch(visibleText(none.text), /no-runner|runner_/);

      const daemon = new TestDaemon(site.origin, { label: "erin-laptop" });
      const started = await daemon.pairStart();
      const pending = await erin.request(`/pair?code=${started.userCode}`);
      assert.match(visibleText(pending.text), /Code expires\s+in (9|10) minutes/);
      assert.doesNotMatch(visibleText(pending.text), /\d{4}-\d\d-\d\dT/, "no ISO timestamps on the page");
      assert.match(pending.text, /<button class="primary" id="approve">Approve erin-laptop<\/button>/);
      assert.match(pending.text, /<button class="danger" id="deny">/);
      assert.equal((await erin.request("/pair/approve", { method: "POST", form: { code: started.userCode } })).status, 200);
      await logged(/^\d\d:\d\d:\d\d pairing approved: erin-laptop \(linux, byollm 0\.1\.1\) now runs prompts for erin$/m);
      await daemon.waitForApproval(started.deviceCode);
      assert.equal((await daemon.heartbeat()).status, 200);

      // A job: the prompt is kept beside its answer, the device named, one line when it ends.
      const jobId = await erin.sendPrompt("What time is it?");
      const jobPage = await erin.request(`/prompts/${jobId}`);
      assert.match(jobPage.text, /<div class="bubble you" id="prompt-text">What time is it\?<\/div>/);
      await daemon.runOne(() => "Tea time.");
      const done = await erin.job(jobId);
      assert.equal(done.body.device, "erin-laptop");
      assert.equal(typeof done.body.tookMs, "number");
      await logged(new RegExp(`^\\d\\d:\\d\\d:\\d\\d job ${jobId.slice(0, 8)} for erin: answered on erin-laptop \\(echo-model\\) after \\d+\\.\\d s$`, "m"));
      const list = JSON.parse((await erin.request("/api/prompts")).text);
      assert.deepEqual(
        list.jobs.map((j) => [j.prompt, j.state, j.device]),
        [["What time is it?", "ok", "erin-laptop"]],
      );
      const status = JSON.parse((await erin.request("/api/status")).text);
      assert.deepEqual(status.devices, { online: 1, paired: 1 });
      assert.deepEqual(status.jobs, { queued: 0, running: 0, answered: 1, failed: 0 });
      assert.equal(status.buckets.length, 12);
      assert.deepEqual(status.buckets[11], { answered: 1, failed: 0 });
      // The whole site (every person's jobs, earlier tests' too), from
      // app.metrics(), and the Prometheus exposition at /metrics.
      assert.ok(status.site.jobs.ok >= 1);
      assert.ok(status.site.runners.online >= 1);
      assert.equal(status.site.total.count, status.site.jobs.ok, "every answered job was timed");
      assert.equal(typeof status.site.claim.p50, "number");
      assert.ok(Array.isArray(status.site.history));
      const exposition = await fetch(`${site.origin}/metrics`);
      assert.equal(exposition.status, 200);
      assert.match(exposition.headers.get("content-type"), /^text\/plain; version=0\.0\.4/);
      assert.match(await exposition.text(), new RegExp(`^byollm_jobs\\{state="ok"\\} ${status.site.jobs.ok}$`, "m"));

      // Revoke asks first; the question itself changes nothing, and only the owner gets it.
      const confirm = await erin.request(`/devices/revoke?id=${encodeURIComponent(daemon.runnerId)}`);
      assert.equal(confirm.status, 200);
      assert.match(confirm.text, /<button class="danger solid" id="confirm-revoke">Revoke erin-laptop<\/button>/);
      assert.equal((await daemon.heartbeat()).status, 200);
      const frank = new SiteUser(site.origin);
      await frank.signIn("frank");
      assert.equal((await frank.request(`/devices/revoke?id=${encodeURIComponent(daemon.runnerId)}`)).status, 404);
      await logged(/^\d\d:\d\d:\d\d refused GET \/devices\/revoke for frank: 404 You have no device with that id\.$/m);

      const revoked = await erin.request("/devices/revoke", { method: "POST", form: { id: daemon.runnerId } });
      assert.equal(revoked.status, 303);
      assert.equal(revoked.location, `/devices?revoked=${encodeURIComponent(daemon.runnerId)}`);
      await logged(/^\d\d:\d\d:\d\d device revoked: erin revoked erin-laptop$/m);
      assert.equal((await daemon.heartbeat()).status, 403);
      await logged(/^\d\d:\d\d:\d\d refused POST \/byollm\/heartbeat from erin-laptop \(erin\): 403 revoked: this runner has been revoked by its owner$/m);
      assert.match((await erin.request("/prompts")).text, /You have no device yet/, "a revoked device counts as none");
      const devices = await erin.request("/devices");
      assert.doesNotMatch(visibleText(devices.text), new RegExp(daemon.runnerId), "devices are shown by name");
    });

    test("the protocol mount answers like the library: GET is 405, an unknown endpoint 404", async () => {
      const get = await fetch(`${site.origin}/byollm/claim`);
      assert.equal(get.status, 405);
      assert.deepEqual(await get.json(), { error: "bad-request", message: "protocol endpoints accept POST only" });
      const unknown = await fetch(`${site.origin}/byollm/nope`, { method: "POST", body: "{}" });
      assert.equal(unknown.status, 404);
      assert.deepEqual(await unknown.json(), { error: "not-found", message: "not a /byollm endpoint" });
      const unsigned = await fetch(`${site.origin}/byollm/claim`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ protocolVersion: "2" }),
      });
      assert.equal(unsigned.status, 401);
    });

    test("pages need a session; a denied code ends the daemon's pairing", async () => {
      const anonymous = new SiteUser(site.origin);
      const pair = await anonymous.request("/pair?code=ABCD-EFGH");
      assert.equal(pair.status, 303);
      assert.equal(pair.location, `/?next=${encodeURIComponent("/pair?code=ABCD-EFGH")}`);
      assert.equal((await anonymous.request("/prompts", { method: "POST", form: { prompt: "x" } })).status, 401);
      assert.equal((await anonymous.job("00000000-0000-4000-8000-000000000000")).status, 401);

      const carol = new SiteUser(site.origin);
      const signedIn = await carol.request("/signin", { method: "POST", form: { name: "carol", next: "/pair?code=X" } });
      assert.equal(signedIn.location, "/pair?code=X", "sign-in returns to the page that asked for it");
      const offsite = await new SiteUser(site.origin).request("/signin", { method: "POST", form: { name: "dave", next: "//evil.test/" } });
      assert.equal(offsite.location, "/", "never redirects off-site");

      const unknown = await carol.request("/pair?code=ZZZZ-ZZZZ");
      assert.equal(unknown.status, 404);

      const daemon = new TestDaemon(site.origin, { label: "<script>alert(1)</script>" });
      const started = await daemon.pairStart();
      const shown = await carol.request(`/pair?code=${started.userCode}`);
      assert.ok(!shown.text.includes("<script>alert(1)</script>"), "a daemon-supplied label is escaped");
      assert.ok(shown.text.includes("&lt;script&gt;alert(1)&lt;/script&gt;"));
      const denied = await carol.request("/pair/deny", { method: "POST", form: { code: started.userCode } });
      assert.equal(denied.status, 200);
      await assert.rejects(daemon.waitForApproval(started.deviceCode, { timeoutMs: 2000 }), /pairing ended: denied/);

      const empty = await carol.request("/prompts", { method: "POST", form: { prompt: "" } });
      assert.equal(empty.status, 400, "an empty prompt is refused by enqueue's payload check");
      assert.match(empty.text, /invalid llm\.generate payload/);
    });
  });
}

test("a restart reuses the site keys from the env file", async () => {
  const first = await startSiteProcess();
  const fingerprint = /site key fingerprint: (\S+)/.exec(first.output().stdout)[1];
  assert.match(first.output().stdout, /\(created now\)/);
  first.child.kill("SIGTERM");
  await new Promise((r) => first.child.once("exit", r));
  const second = await startSiteProcess({ envFile: first.envFile });
  try {
    assert.match(second.output().stdout, /\(reused\)/);
    assert.equal(/site key fingerprint: (\S+)/.exec(second.output().stdout)[1], fingerprint);
  } finally {
    await second.stop();
    await first.stop();
  }
});

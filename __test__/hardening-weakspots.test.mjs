// The reference's known weak spots, each run as the same scenario against
// the reference @byollm/server and against ours over loopback HTTP: the test
// asserts the reference's weak behaviour (so the scenario really exercises
// it) and that ours closes it. docs/security.md explains each decision.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import * as refServer from "@byollm/server";
import * as ours from "../dist/index.js";
import { Daemon, listen, makeSite, native } from "./hardening-harness.mjs";
import { closeStores } from "./helpers/diff-stores.mjs";

// Ours on the store DIFF_STORE names (differential-stores.test.mjs runs them all).
after(closeStores);

/** A site of `which` with two paired runners of one owner and one queued job. */
async function scene(which, { clock } = {}) {
  const site = await makeSite(which, { clock });
  const http = await listen(site.handler);
  const a = new Daemon(http.url, { clock });
  const b = new Daemon(http.url, { clock });
  await a.pair(site.app, "alice");
  await b.pair(site.app, "alice");
  const handle = await site.app.enqueue({ kind: "llm.generate", payload: { prompt: "hi" }, owner: "alice" });
  return { ...site, http, a, b, jobId: handle.id };
}

async function claimOne(daemon) {
  const claim = await daemon.claim(1);
  assert.equal(claim.status, 200, JSON.stringify(claim.body));
  assert.equal(claim.body.jobs.length, 1);
  return claim.body.jobs[0];
}

for (const which of ["ref", "ours"]) {
  const closed = which === "ours";

  test(`[${which}] /fetch compares the body's runnerId with the signer`, async () => {
    const s = await scene(which);
    try {
      const stub = await claimOne(s.a);
      // A holds the lease and signs, but names B in the body.
      const r = await s.a.fetchJob(stub, { runnerId: s.b.runnerId });
      if (closed) assert.deepEqual([r.status, r.body.error], [401, "unauthorized"]);
      else assert.equal(r.status, 200, "the reference serves it");
      // The honest call works on both.
      assert.equal((await s.a.fetchJob(stub)).status, 200);
    } finally {
      await s.http.close();
    }
  });

  test(`[${which}] /result checks the runner, not only the lease id`, async () => {
    const s = await scene(which);
    try {
      const stub = await claimOne(s.a);
      // B learned A's lease id (it is not a secret: it travels in stubs and
      // heartbeats) and reports a result sealed with its own key.
      const stolen = await s.b.result(stub, { outcome: "ok", text: "forged by B" });
      assert.equal(stolen.status, 200);
      if (closed) {
        assert.deepEqual(stolen.body, { accepted: false, state: "claimed" });
        const honest = await s.a.result(stub, { outcome: "ok", text: "by A" });
        assert.deepEqual(honest.body, { accepted: true, state: "ok" });
        assert.equal((await s.app.result(s.jobId)).provenance.runnerId, s.a.runnerId);
      } else {
        assert.deepEqual(stolen.body, { accepted: true, state: "ok" });
        assert.equal((await s.app.result(s.jobId)).provenance.runnerId, s.b.runnerId, "the reference credits B");
      }
    } finally {
      await s.http.close();
    }
  });

  test(`[${which}] a result after lease expiry is refused before any sweep`, async () => {
    const clock = { t: Date.now() };
    const s = await scene(which, { clock });
    try {
      const stub = await claimOne(s.a);
      clock.t = stub.lease.expiresAt + 1; // the lease lapsed; no claim/heartbeat/sweep ran since
      const late = await s.a.result(stub, { outcome: "ok", text: "late" });
      assert.equal(late.status, 200);
      if (closed) {
        assert.deepEqual(late.body, { accepted: false, state: "claimed" });
        // The sweep then hands the job to the next runner, as the lease clock says.
        const next = await claimOne(s.b);
        assert.equal(next.id, s.jobId);
        assert.deepEqual((await s.b.result(next, { outcome: "ok", text: "on time" })).body, { accepted: true, state: "ok" });
      } else {
        assert.deepEqual(late.body, { accepted: true, state: "ok" }, "the reference accepts it");
      }
    } finally {
      await s.http.close();
    }
  });

  test(`[${which}] a cancel request does not survive a release to hit the next runner`, async () => {
    const s = await scene(which);
    try {
      const stub = await claimOne(s.a);
      await s.app.cancel(s.jobId);
      const hb = await s.a.heartbeat([{ jobId: stub.id, leaseId: stub.lease.id }]);
      assert.deepEqual(hb.body.cancel, [{ jobId: stub.id, leaseId: stub.lease.id }]);
      // A shuts down instead of reporting `canceled`.
      const rel = await s.a.release([{ jobId: stub.id, leaseId: stub.lease.id }], "shutdown");
      assert.deepEqual(rel.body, { released: [stub.id] });
      const claim = await s.b.claim(1);
      if (closed) {
        assert.deepEqual(claim.body.jobs, [], "a canceled job is not handed out again");
        assert.equal((await s.app.job(s.jobId)).state, "canceled");
      } else {
        assert.equal(claim.body.jobs.length, 1, "the reference re-queues it");
        const next = claim.body.jobs[0];
        const hb2 = await s.b.heartbeat([{ jobId: next.id, leaseId: next.lease.id }]);
        assert.deepEqual(hb2.body.cancel, [{ jobId: next.id, leaseId: next.lease.id }], "and B is told to cancel a job it just got");
      }
    } finally {
      await s.http.close();
    }
  });

  test(`[${which}] a request signature with junk characters in it does not verify`, async () => {
    const s = await scene(which);
    try {
      // Node's base64 decoder skips characters outside the alphabet, so the
      // reference accepts a signature text nobody produced.
      const junk = (sig) => `${sig.slice(0, 20)}.!*${sig.slice(20)}`;
      const r = await s.a.call("claim", { runnerId: s.a.runnerId, capabilities: s.a.capabilities, max: 1 }, { mutateSignature: junk });
      if (closed) assert.deepEqual([r.status, r.body.error], [401, "unauthorized"]);
      else assert.equal(r.status, 200, "the reference accepts the altered signature");
      // Padding and the other alphabet are further spellings of the same bytes.
      const padded = await s.a.call("claim", { runnerId: s.a.runnerId, capabilities: s.a.capabilities, max: 1 }, { mutateSignature: (x) => `${x}==` });
      if (closed) assert.equal(padded.status, 401);
      else assert.equal(padded.status, 200);
      const honest = await s.a.claim(1);
      assert.equal(honest.status, 200);
    } finally {
      await s.http.close();
    }
  });
}

test("secretsMatch on non-hex input: the reference throws, ours answers false", () => {
  for (const [a, b] of [["zz", "ab"], ["abcd", "zzzz"], ["ab", "a\u00e9"]]) {
    let refThrew = false;
    try {
      refServer.secretsMatch(a, b);
    } catch {
      refThrew = true;
    }
    assert.equal(refThrew, true, `reference throws on ${a} ${b}`);
    assert.equal(ours.secretsMatch(a, b), false);
  }
  assert.equal(ours.secretsMatch("ab", "ab"), true);
  assert.equal(ours.secretsMatch("AB", "ab"), true);
});

// The cloud lane against a real relay (@byollm/relay@0.1.1 on 127.0.0.1).
//
// Every scenario runs twice: against the reference ByollmApp (proves the
// harness and pins the expected behaviour) and against ours (dist/). Ours is
// the point; the reference run is what makes a failure there mean "ours
// differs" rather than "the harness is wrong".
//
// Needs Node >= 22.14 (the relay and the reference packages), so the runner
// keeps it off Node 20.
import { after, afterEach, before, beforeEach, describe, it } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import * as reference from "@byollm/server";
import { generateKeys, keyId, open, publicIdentityOf } from "@byollm/protocol";
import {
  CAPABILITY,
  closedPort,
  startRelay,
  startStandIn,
} from "./helpers/relay.mjs";

const distEntry = fileURLToPath(new URL("../dist/index.js", import.meta.url));

/** Our package, or the reason it cannot be loaded (reported as a failure, not skipped). */
async function loadOurs() {
  if (!existsSync(distEntry)) {
    return {
      error: `dist/index.js is missing — build it with \`npx tsc -p tsconfig.json\` (and \`npm run build:debug\`)`,
    };
  }
  try {
    const mod = await import(distEntry);
    for (const name of [
      "ByollmApp",
      "MemoryStore",
      "CloudLane",
      "RelayUnavailable",
      "EnqueueRefused",
      "generateSiteKeys",
    ]) {
      if (typeof mod[name] !== "function") {
        return { error: `dist/index.js does not export ${name}` };
      }
    }
    return { mod };
  } catch (error) {
    return { error: `dist/index.js failed to load: ${error?.stack ?? error}` };
  }
}

const ours = await loadOurs();
const IMPLEMENTATIONS = [
  { name: "reference @byollm/server@0.1.1", mod: reference },
  { name: "ours (dist/index.js)", ...ours },
];

const RAN = Object.freeze({
  model: CAPABILITY.model,
  backendClass: CAPABILITY.backendClass,
  durationMs: 12,
  stop: "end",
  stopReported: true,
});

/** A short random tag, so every test's texts are unique and greppable. */
const tag = () => Math.random().toString(36).slice(2, 10);

const AUDIENCE_MESSAGE =
  "enqueue does not take `audience` on the cloud lane. Who may serve a " +
  "job is derived from the person's own mapping — the service they " +
  "chose, its owner, and that owner's sharing — which your site is " +
  "not told and cannot compute. Remove `audience`; ask for the kind " +
  "and the purpose, and their decision does the rest.";

const AVAILABILITY_MESSAGE =
  "runnerAvailability cannot answer on the cloud lane. It counts " +
  "runners this site knows about, and on the cloud lane devices pair " +
  "with the relay rather than with you — so the answer would be " +
  "`none` whatever the truth is. Enqueue the job: the result says " +
  "whether it ran, and the person's own dashboard says why not.";

for (const impl of IMPLEMENTATIONS) {
  describe(`cloud lane through a real relay — ${impl.name}`, () => {
    if (impl.mod === undefined) {
      it("loads", () => {
        assert.fail(impl.error);
      });
      return;
    }
    const { ByollmApp, MemoryStore, RelayUnavailable, EnqueueRefused } =
      impl.mod;

    /** A site (our keys, registered at the relay) and its app on the lane. */
    function siteOn(relayOrigin, siteId, siteKeys) {
      const store = new MemoryStore();
      const app = new ByollmApp({
        store,
        siteKeys,
        lane: { relayOrigin, siteId },
      });
      return { app, store };
    }

    /** The site plane requests the relay received, decoded. */
    const enqueueBodies = (h) =>
      h.requestsTo("/relay/site/enqueue").map((r) => JSON.parse(r.body));

    /**
     * Every site-plane request carries the site's signature headers (the real
     * relay already refused anything whose signature did not verify against the
     * pinned key), GETs sign an empty body with the version in the query, and
     * POST bodies start with the protocol version.
     */
    function assertSignedSitePlane(h, atLeast) {
      const sitePlane = h.received.filter((r) => r.path.startsWith("/relay/site/"));
      assert.ok(sitePlane.length >= atLeast, `${sitePlane.length} site-plane requests`);
      for (const request of sitePlane) {
        assert.equal(request.headers["x-byollm-site"], h.siteId);
        assert.match(request.headers["x-byollm-issued-at"], /^\d+$/);
        assert.ok(request.headers["x-byollm-signature"].length > 0);
        if (request.method === "GET") {
          assert.equal(request.body.length, 0);
          const url = new URL(request.url, "http://x");
          assert.equal(url.searchParams.get("siteId"), h.siteId);
          assert.equal(url.searchParams.get("protocolVersion"), "2");
        } else {
          assert.equal(request.method, "POST");
          assert.equal(request.headers["content-type"], "application/json");
          assert.ok(request.body.toString().startsWith('{"protocolVersion":"2",'));
        }
      }
    }

    describe("with a live relay", () => {
      let h;
      let siteKeys;
      let app;
      let store;

      // A fresh relay per test (they start in milliseconds): a refused result
      // stays in the relay's finished list and would show in every later report.
      beforeEach(async () => {
        siteKeys = impl.mod.generateSiteKeys();
        h = await startRelay({ siteKeys });
        ({ app, store } = siteOn(h.origin, h.siteId, siteKeys));
        await h.device.pair();
      });
      afterEach(async () => {
        await h?.close();
      });

      /** Enqueue, let the device claim it, and return the claimed stub. */
      async function enqueueAndClaim(input) {
        const job = await app.enqueue({
          kind: "llm.generate",
          owner: h.owner,
          ...input,
        });
        const claim = await h.device.claim();
        assert.equal(claim.status, 200, claim.text);
        const stub = claim.body.jobs.find((j) => j.id === job.id);
        assert.ok(stub, `the device was offered ${job.id}: ${claim.text}`);
        return { job, stub };
      }

      /** Pump, then the device fetches and opens the payload. */
      async function pumpAndFetch(stub) {
        const report = await app.cloud.pump();
        assert.deepEqual(report, { sealed: [stub.id], completed: [], refused: [] });
        const fetched = await h.device.fetchPayload(stub.id, stub.lease.id);
        assert.equal(fetched.status, 200, fetched.text);
        return fetched.body.envelope;
      }

      it("pairing pins our site's identity", () => {
        const ourId = publicIdentityOf(siteKeys);
        assert.deepEqual(h.device.sites, { [keyId(ourId.identity)]: ourId });
      });

      it("runs a full job: stub out, payload sealed to the claiming device, sealed result in, provenance names the device", async () => {
        const prompt = `write a haiku about ${tag()}`;
        const answer = `autumn ${tag()}`;
        const { job, stub } = await enqueueAndClaim({
          id: `job-full-${tag()}`,
          payload: { prompt },
          purpose: "writing-assistant",
          audienceAllow: ["bob@example.test"],
        });

        // The relay got a stub and only a stub.
        const sent = enqueueBodies(h).find((b) => b.stub.id === job.id);
        assert.ok(sent, "the relay received the enqueue");
        assert.deepEqual(Object.keys(sent), ["protocolVersion", "siteId", "stub"]);
        assert.equal(sent.protocolVersion, "2");
        assert.equal(sent.siteId, h.siteId);
        assert.deepEqual(Object.keys(sent.stub).sort(), [
          "audience",
          "deadlineAt",
          "id",
          "kind",
          "owner",
          "purpose",
          "site",
          "sizeClass",
          "streaming",
        ]);
        assert.equal(sent.stub.site, keyId(siteKeys.identityPublic));
        assert.equal(sent.stub.audience, "team");
        assert.equal(sent.stub.purpose, "writing-assistant");
        assert.equal(sent.stub.streaming, false);
        assert.equal(sent.stub.kind, "llm.generate");
        assert.equal(sent.stub.owner, h.owner);
        assert.ok(!("audienceAllow" in sent.stub));
        assert.ok(!("payload" in sent.stub) && !("envelope" in sent.stub));
        // The stub reached the device intact through the relay.
        assert.equal(stub.site, sent.stub.site);
        assert.equal(stub.deadlineAt, sent.stub.deadlineAt);

        // Nothing to fetch until the site pumps.
        const early = await h.device.fetchPayload(stub.id, stub.lease.id);
        assert.equal(early.status, 409);
        assert.equal(early.body.error, "not-ready");

        const envelope = await pumpAndFetch(stub);
        assert.equal(envelope.recipientKeyId, h.device.keyId);
        assert.equal(envelope.senderKeyId, keyId(siteKeys.identityPublic));
        assert.equal(envelope.direction, "payload");
        const opened = await h.device.openPayload(stub.id, envelope, stub.site);
        assert.equal(opened.ok, true, JSON.stringify(opened));
        assert.deepEqual(JSON.parse(opened.plaintext), { prompt });

        // The site recorded the relay's lease while the device works.
        assert.equal((await app.job(job.id)).state, "claimed");

        const resultEnvelope = await h.device.sealResult({
          jobId: stub.id,
          siteKeyId: stub.site,
          outcome: { outcome: "ok", text: answer },
          ran: RAN,
          deadlineAt: Date.now() + 600_000,
        });
        const posted = await h.device.postResult({
          jobId: stub.id,
          leaseId: stub.lease.id,
          envelope: resultEnvelope,
          disposition: "ok",
        });
        assert.equal(posted.status, 200, posted.text);

        const report = await app.cloud.pump();
        assert.deepEqual(report, { sealed: [], completed: [job.id], refused: [] });

        const expected = {
          jobId: job.id,
          state: "ok",
          outcome: { outcome: "ok", text: answer },
          provenance: {
            audience: "team",
            runnerId: h.device.runnerId,
            runnerOwner: h.owner,
            backendClass: RAN.backendClass,
            model: RAN.model,
            untrusted: true,
            stop: "end",
            stopReported: true,
          },
        };
        assert.deepEqual(await app.result(job.id), expected);
        // The app's own wait resolves on the lane (no availability instrument to trip over).
        assert.deepEqual(await job.result({ timeoutMs: 2_000 }), expected);

        // A further pump is idempotent: the relay still lists the result, the site skips it.
        assert.deepEqual(await app.cloud.pump(), {
          sealed: [],
          completed: [],
          refused: [],
        });
        // The stored record is the site's own at-rest envelope, never the device's copy.
        const record = await store.get(job.id);
        assert.equal(record.envelope.recipientKeyId, keyId(siteKeys.identityPublic));

        assertSignedSitePlane(h, 7);
      });

      it("the relay never sees a plaintext payload or result; what it stores is sealed to the device", async () => {
        const secretPrompt = `PROMPT-${tag()}-do-not-leak`;
        const secretSystem = `SYSTEM-${tag()}-do-not-leak`;
        const secretAnswer = `ANSWER-${tag()}-do-not-leak`;
        const { job, stub } = await enqueueAndClaim({
          id: `job-blind-${tag()}`,
          payload: { prompt: secretPrompt, system: secretSystem },
        });
        const envelope = await pumpAndFetch(stub);

        // The payload the site posted is the one the relay stores, sealed to the device.
        const posted = h
          .requestsTo("/relay/site/payload")
          .map((r) => JSON.parse(r.body))
          .find((b) => b.jobId === job.id);
        assert.deepEqual(posted.envelope, envelope);
        const routed = (await h.relay.state.jobs()).find((j) => j.id === job.id);
        assert.deepEqual(routed.payload, envelope);
        assert.equal(envelope.recipientKeyId, h.device.keyId);
        assert.equal(envelope.senderKeyId, keyId(siteKeys.identityPublic));
        // The device opens it; the site's own keys (what the relay would need to
        // impersonate nobody) do not.
        const byDevice = await h.device.openPayload(stub.id, envelope, stub.site);
        assert.equal(byDevice.ok, true);
        const bySiteKeys = await open({
          envelope,
          recipientKeys: siteKeys,
          senderIdentityPublic: siteKeys.identityPublic,
          expected: {
            jobId: job.id,
            senderKeyId: envelope.senderKeyId,
            recipientKeyId: envelope.recipientKeyId,
            direction: "payload",
          },
        });
        assert.deepEqual(bySiteKeys, { ok: false, reason: "unopenable" });

        const resultEnvelope = await h.device.sealResult({
          jobId: stub.id,
          siteKeyId: stub.site,
          outcome: { outcome: "ok", text: secretAnswer },
          ran: RAN,
          deadlineAt: Date.now() + 600_000,
        });
        await h.device.postResult({
          jobId: stub.id,
          leaseId: stub.lease.id,
          envelope: resultEnvelope,
          disposition: "ok",
        });
        const stored = (await h.relay.state.jobs()).find((j) => j.id === job.id);
        assert.deepEqual(stored.result, resultEnvelope);
        assert.deepEqual(await app.cloud.pump(), {
          sealed: [],
          completed: [job.id],
          refused: [],
        });
        assert.equal((await app.result(job.id)).outcome.text, secretAnswer);

        // Every byte the relay was sent, in any encoding a careless lane might use.
        const all = h.allBytes();
        for (const secret of [secretPrompt, secretSystem, secretAnswer]) {
          for (const form of [
            secret,
            Buffer.from(secret).toString("base64"),
            Buffer.from(secret).toString("base64url"),
            encodeURIComponent(secret),
          ]) {
            assert.equal(all.includes(form), false, `the relay saw ${form}`);
          }
        }
        const payloadJson = JSON.stringify({ prompt: secretPrompt, system: secretSystem });
        assert.equal(all.includes(Buffer.from(payloadJson).toString("base64url")), false);
        // And the at-rest envelope (sealed to the site itself) never left the site.
        const atRest = (await store.get(job.id)).envelope.ciphertext;
        assert.equal(all.includes(atRest), false);
      });

      it("a result not signed by the claiming device is refused and the job is not completed", async () => {
        const { job, stub } = await enqueueAndClaim({
          id: `job-forged-${tag()}`,
          payload: { prompt: `forge ${tag()}` },
        });
        await pumpAndFetch(stub);

        // Sealed to the site with the claiming device's key id on it, but signed
        // by somebody else's identity key. The relay cannot tell; the site must.
        const impostor = generateKeys(Date.now());
        const forged = await h.device.sealResult({
          jobId: stub.id,
          siteKeyId: stub.site,
          outcome: { outcome: "ok", text: "forged answer" },
          ran: RAN,
          deadlineAt: Date.now() + 600_000,
          signWith: impostor,
        });
        const posted = await h.device.postResult({
          jobId: stub.id,
          leaseId: stub.lease.id,
          envelope: forged,
          disposition: "ok",
        });
        assert.equal(posted.status, 200, "the relay is blind and accepts it");

        assert.deepEqual(await app.cloud.pump(), {
          sealed: [],
          completed: [],
          refused: [job.id],
        });
        const result = await app.result(job.id);
        assert.equal(result.state, "claimed");
        assert.equal(result.outcome, undefined);
        assert.equal(result.provenance, undefined);
        // Refused again on the next cycle, never completed by retrying.
        assert.deepEqual((await app.cloud.pump()).refused, [job.id]);
        assert.equal((await app.job(job.id)).state, "claimed");
      });

      it("a result whose clear-text disposition disagrees with the sealed outcome is refused", async () => {
        const { job, stub } = await enqueueAndClaim({
          id: `job-disposition-${tag()}`,
          payload: { prompt: `mismatch ${tag()}` },
        });
        await pumpAndFetch(stub);
        const sealedError = await h.device.sealResult({
          jobId: stub.id,
          siteKeyId: stub.site,
          outcome: { outcome: "error", code: "backend-down", message: "no", retryable: true },
          ran: { model: RAN.model, backendClass: RAN.backendClass, durationMs: 1 },
          deadlineAt: Date.now() + 600_000,
        });
        const posted = await h.device.postResult({
          jobId: stub.id,
          leaseId: stub.lease.id,
          envelope: sealedError,
          disposition: "ok",
        });
        assert.equal(posted.status, 200, posted.text);
        const report = await app.cloud.pump();
        assert.ok(report.refused.includes(job.id), JSON.stringify(report));
        assert.ok(!report.completed.includes(job.id));
        assert.equal((await app.job(job.id)).state, "claimed");
      });

      it("a retryable relay error ends the pump with a partial report naming why", async () => {
        const { job, stub } = await enqueueAndClaim({
          id: `job-deferred-${tag()}`,
          payload: { prompt: `defer ${tag()}` },
        });
        // A draining relay pod answers 503 not-ready to the results read.
        h.inject("/relay/site/results", {
          status: 503,
          body: { error: "not-ready", message: "draining" },
        });
        assert.deepEqual(await app.cloud.pump(), {
          sealed: [job.id],
          completed: [],
          refused: [],
          deferred: "results: not-ready — draining",
        });
        // An overloaded hub (429) on the first read: nothing done, still deferred.
        h.inject("/relay/site/pending", {
          status: 429,
          body: { error: "rate-limited", message: "slow down" },
        });
        assert.deepEqual(await app.cloud.pump(), {
          sealed: [],
          completed: [],
          refused: [],
          deferred: "pending: rate-limited — slow down",
        });
        // A proxy's non-JSON 502 is retryable too, with no code.
        h.inject("/relay/site/pending", {
          status: 502,
          contentType: "text/html",
          body: "<h1>Bad Gateway</h1>",
        });
        assert.deepEqual(await app.cloud.pump(), {
          sealed: [],
          completed: [],
          refused: [],
          deferred: "pending: refused — HTTP 502",
        });

        // Nothing was lost: the device fetches what was sealed and the next pump completes it.
        const fetched = await h.device.fetchPayload(stub.id, stub.lease.id);
        assert.equal(fetched.status, 200, fetched.text);
        await h.device.postResult({
          jobId: stub.id,
          leaseId: stub.lease.id,
          envelope: await h.device.sealResult({
            jobId: stub.id,
            siteKeyId: stub.site,
            outcome: { outcome: "ok", text: "late but fine" },
            ran: RAN,
            deadlineAt: Date.now() + 600_000,
          }),
          disposition: "ok",
        });
        assert.deepEqual(await app.cloud.pump(), {
          sealed: [],
          completed: [job.id],
          refused: [],
        });
        assert.equal((await app.result(job.id)).state, "ok");
      });

      it("a non-retryable relay error propagates out of pump", async () => {
        h.inject("/relay/site/pending", {
          status: 401,
          body: { error: "unauthorized", message: "signature check failed" },
        });
        await assert.rejects(app.cloud.pump(), (error) => {
          assert.ok(error instanceof RelayUnavailable);
          assert.equal(error.name, "RelayUnavailable");
          assert.equal(error.retryable, false);
          assert.equal(error.code, "unauthorized");
          assert.equal(error.message, "pending: unauthorized — signature check failed");
          return true;
        });
      });

      it("a job cancelled at the site is withdrawn at the relay and never sealed", async () => {
        const { job } = await enqueueAndClaim({
          id: `job-cancel-${tag()}`,
          payload: { prompt: `cancel ${tag()}` },
        });
        const before = h.requestsTo("/relay/site/cancel").length;
        const cancelled = await app.cancel(job.id);
        assert.equal(cancelled.state, "canceled");
        const calls = h.requestsTo("/relay/site/cancel").slice(before);
        assert.equal(calls.length, 1);
        assert.deepEqual(JSON.parse(calls[0].body), {
          protocolVersion: "2",
          siteId: h.siteId,
          jobId: job.id,
        });
        const routed = (await h.relay.state.jobs()).find((j) => j.id === job.id);
        assert.equal(routed.cancelled, true);
        // The relay still asks for a payload; the store will not lend the job out.
        const report = await app.cloud.pump();
        assert.deepEqual(report, { sealed: [], completed: [], refused: [job.id] });
        // A relay that is unreachable does not turn a cancel into an error.
        const second = await app.enqueue({
          kind: "llm.generate",
          owner: h.owner,
          payload: { prompt: "x" },
        });
        h.inject("/relay/site/cancel", {
          status: 503,
          body: { error: "server-error", message: "down" },
        });
        assert.equal((await app.cancel(second.id)).state, "canceled");
      });

      it("enqueue with `audience` is refused with the exact message, and nothing is stored or sent", async () => {
        const before = h.received.length;
        const id = `job-audience-${tag()}`;
        for (const audience of ["private", "team"]) {
          await assert.rejects(
            app.enqueue({
              id,
              kind: "llm.generate",
              owner: h.owner,
              payload: { prompt: "p" },
              audience,
            }),
            (error) => {
              assert.equal(error.constructor, Error);
              assert.equal(error.message, AUDIENCE_MESSAGE);
              return true;
            },
          );
        }
        assert.equal(h.received.length, before);
        assert.equal(await app.job(id), null);
      });

      it("runnerAvailability throws on the lane", async () => {
        await assert.rejects(
          app.runnerAvailability({ kind: "llm.generate", owner: h.owner }),
          (error) => {
            assert.equal(error.message, AVAILABILITY_MESSAGE);
            return true;
          },
        );
      });
    });

    describe("pump details", () => {
      let h;
      let siteKeys;
      let app;
      let store;

      beforeEach(async () => {
        siteKeys = impl.mod.generateSiteKeys();
        h = await startRelay({ siteKeys });
        ({ app, store } = siteOn(h.origin, h.siteId, siteKeys));
        await h.device.pair();
      });
      afterEach(async () => {
        await h?.close();
      });

      const sealFor = (stub, outcome, ran = RAN) =>
        h.device.sealResult({
          jobId: stub.id,
          siteKeyId: stub.site,
          outcome,
          ran,
          deadlineAt: Date.now() + 600_000,
        });

      it("the stub's deadline is the job's deadline, or claimable time plus TTL", async () => {
        const fixed = Date.now() + 3_600_000;
        const a = await app.enqueue({ kind: "llm.generate", owner: h.owner, payload: { prompt: "a" }, deadlineAt: fixed });
        const b = await app.enqueue({ kind: "llm.generate", owner: h.owner, payload: { prompt: "b" }, ttlMs: 90_000 });
        const stubs = Object.fromEntries(enqueueBodies(h).map((body) => [body.stub.id, body.stub]));
        assert.equal(stubs[a.id].deadlineAt, fixed);
        assert.equal(stubs[b.id].deadlineAt, b.record.claimableAt + 90_000);
        assert.equal(stubs[b.id].sizeClass, b.record.sizeClass);
      });

      it("several claims in one cycle; the site adopts each lease with the lease's own expiry; ok and error outcomes", async () => {
        const jobs = [];
        for (const [i, kind, payload] of [
          [0, "llm.generate", { prompt: "first" }],
          [1, "llm.chat", { messages: [{ role: "user", content: "second" }] }],
          [2, "llm.generate", { prompt: "third" }],
        ]) {
          jobs.push(await app.enqueue({ id: `job-multi-${i}-${tag()}`, kind, owner: h.owner, payload }));
        }
        const capabilities = [CAPABILITY, { ...CAPABILITY, kind: "llm.chat" }];
        // The relay hands out at most two unsealed grants per (site, owner);
        // the site's pump is what lets the third through.
        const first = await h.device.claim(8, capabilities);
        assert.equal(first.status, 200, first.text);
        assert.equal(first.body.jobs.length, 2);
        const report = await app.cloud.pump();
        assert.deepEqual([...report.sealed].sort(), first.body.jobs.map((j) => j.id).sort());
        assert.deepEqual(report.completed, []);
        assert.deepEqual(report.refused, []);
        const rest = await h.device.claim(8, capabilities);
        assert.equal(rest.body.jobs.length, 1);
        assert.deepEqual(await app.cloud.pump(), { sealed: [rest.body.jobs[0].id], completed: [], refused: [] });
        const stubs = Object.fromEntries(
          [...first.body.jobs, ...rest.body.jobs].map((stub) => [stub.id, stub]),
        );
        assert.deepEqual(Object.keys(stubs).sort(), jobs.map((j) => j.id).sort());

        const routed = await h.relay.state.jobs();
        for (const job of jobs) {
          const record = await store.get(job.id);
          const claimedBy = routed.find((r) => r.id === job.id).claimedBy;
          assert.equal(record.state, "claimed");
          assert.equal(record.lease.id, claimedBy.leaseId);
          // The lease's clock, not the relay's short wait-for-payload clock.
          assert.equal(record.lease.expiresAt, claimedBy.leaseExpiresAt);
          const fetched = await h.device.fetchPayload(job.id, stubs[job.id].lease.id);
          assert.equal(fetched.status, 200, fetched.text);
          const opened = await h.device.openPayload(job.id, fetched.body.envelope, stubs[job.id].site);
          assert.equal(opened.ok, true);
        }

        const [okJob, errorJob, chatJob] = jobs;
        const failure = { outcome: "error", code: "backend-down", message: "ollama is not running", retryable: true };
        const errorRan = { model: RAN.model, backendClass: RAN.backendClass, durationMs: 3 };
        for (const [job, outcome, ran, disposition] of [
          [okJob, { outcome: "ok", text: "one" }, RAN, "ok"],
          [errorJob, failure, errorRan, "error"],
          [chatJob, { outcome: "ok", text: "two" }, { ...RAN, stop: "length" }, "ok"],
        ]) {
          const stub = stubs[job.id];
          const posted = await h.device.postResult({
            jobId: job.id,
            leaseId: stub.lease.id,
            envelope: await sealFor(stub, outcome, ran),
            disposition,
          });
          assert.equal(posted.status, 200, posted.text);
        }
        const second = await app.cloud.pump();
        assert.deepEqual([...second.completed].sort(), jobs.map((j) => j.id).sort());
        assert.deepEqual(second.refused, []);

        const ok = await app.result(okJob.id);
        assert.equal(ok.state, "ok");
        assert.equal(ok.outcome.text, "one");
        const failed = await app.result(errorJob.id);
        assert.equal(failed.state, "error");
        assert.deepEqual(failed.outcome, failure);
        assert.deepEqual(failed.provenance, {
          audience: "team",
          runnerId: h.device.runnerId,
          runnerOwner: h.owner,
          backendClass: RAN.backendClass,
          model: RAN.model,
          untrusted: true,
        });
        const chat = await app.result(chatJob.id);
        assert.equal(chat.state, "ok");
        assert.equal(chat.provenance.stop, "length");
      });

      it("a claim for a job this store does not hold is skipped, neither sealed nor refused", async () => {
        // Another instance of the same site (same keys, its own store) publishes a job.
        const { app: elsewhere } = siteOn(h.origin, h.siteId, siteKeys);
        const foreign = await elsewhere.enqueue({ kind: "llm.generate", owner: h.owner, payload: { prompt: "f" } });
        const claim = await h.device.claim();
        assert.equal(claim.body.jobs[0].id, foreign.id);
        const payloadsBefore = h.requestsTo("/relay/site/payload").length;
        assert.deepEqual(await app.cloud.pump(), { sealed: [], completed: [], refused: [] });
        assert.equal(h.requestsTo("/relay/site/payload").length, payloadsBefore);
        // The instance that holds it seals it.
        assert.deepEqual((await elsewhere.cloud.pump()).sealed, [foreign.id]);
      });

      it("an at-rest envelope this site cannot open is refused and nothing is sent for it", async () => {
        // A record whose envelope was sealed by other keys (a restored backup
        // from another deployment, say), published as this site's job.
        const { app: other } = siteOn(h.origin, "unregistered", impl.mod.generateSiteKeys());
        const id = `job-foreign-envelope-${tag()}`;
        const alien = await other.enqueue({ id, kind: "llm.generate", owner: h.owner, payload: { prompt: "x" } }).catch(
          () => null,
        );
        assert.equal(alien, null, "the relay refuses the unregistered site's enqueue");
        const foreignRecord = await other.job(id);
        const record = await store.create(
          {
            id,
            kind: "llm.generate",
            owner: h.owner,
            audience: "team",
            envelope: foreignRecord.envelope,
            sizeClass: foreignRecord.sizeClass,
          },
          Date.now(),
        );
        await app.cloud.publish(record);
        const claim = await h.device.claim();
        assert.equal(claim.body.jobs[0].id, id);
        const payloadsBefore = h.requestsTo("/relay/site/payload").length;
        assert.deepEqual(await app.cloud.pump(), { sealed: [], completed: [], refused: [id] });
        assert.equal(h.requestsTo("/relay/site/payload").length, payloadsBefore);
        assert.equal((await app.job(id)).state, "queued");
      });
    });

    describe("relay refusals and outages", () => {
      let h;
      let siteKeys;
      let app;

      before(async () => {
        siteKeys = impl.mod.generateSiteKeys();
        // The relay's enqueue-time question, answered per purpose so one relay
        // can produce every verdict.
        h = await startRelay({
          siteKeys,
          satisfiable: async ({ purpose }) => {
            if (purpose === "db-blip") throw new Error("policy store unreachable");
            return { verdict: purpose ?? "ok" };
          },
        });
        ({ app } = siteOn(h.origin, h.siteId, siteKeys));
      });
      after(async () => {
        await h?.close();
      });

      const REFUSALS = [
        [
          "not-declared",
          "purpose-not-declared",
          "this site does not declare not-declared — declare it on Developer Sites, and the people who have already connected will each map the new slot before it routes",
        ],
        ["unmapped", "slot-unsatisfiable", "nobody has chosen what answers this yet"],
        ["waiting", "slot-waiting", "nothing can answer this right now — try again later"],
      ];
      for (const [purpose, code, message] of REFUSALS) {
        it(`the real relay's ${code} surfaces as EnqueueRefused(${code})`, async () => {
          const id = `job-${code}-${tag()}`;
          await assert.rejects(
            app.enqueue({ id, kind: "llm.generate", owner: h.owner, payload: { prompt: "p" }, purpose }),
            (error) => {
              assert.ok(error instanceof EnqueueRefused, String(error));
              assert.ok(!(error instanceof RelayUnavailable));
              assert.equal(error.name, "EnqueueRefused");
              assert.equal(error.code, code);
              assert.equal(error.message, message);
              return true;
            },
          );
          // The relay did not queue it; the site's own row stays as the reference leaves it.
          assert.equal((await h.relay.state.jobs()).some((j) => j.id === id), false);
          assert.equal((await app.job(id)).state, "queued");
        });
      }

      it("a relay that cannot check right now (503 server-error) is RelayUnavailable, retryable, job kept", async () => {
        const id = `job-blip-${tag()}`;
        await assert.rejects(
          app.enqueue({ id, kind: "llm.generate", owner: h.owner, payload: { prompt: "p" }, purpose: "db-blip" }),
          (error) => {
            assert.ok(error instanceof RelayUnavailable, String(error));
            assert.equal(error.retryable, true);
            assert.equal(error.code, "server-error");
            assert.equal(
              error.message,
              "enqueue: server-error — we could not check this just now — try again shortly",
            );
            return true;
          },
        );
        assert.equal((await app.job(id)).state, "queued");
      });

      it("a relay that is down behind its ingress (non-JSON 503) is RelayUnavailable, retryable, job kept", async () => {
        const id = `job-down-${tag()}`;
        h.inject("/relay/site/enqueue", {
          status: 503,
          contentType: "text/plain",
          body: "no healthy upstream",
        });
        await assert.rejects(
          app.enqueue({ id, kind: "llm.generate", owner: h.owner, payload: { prompt: "p" } }),
          (error) => {
            assert.ok(error instanceof RelayUnavailable, String(error));
            assert.ok(!(error instanceof EnqueueRefused));
            assert.equal(error.retryable, true);
            assert.equal(error.code, "");
            assert.equal(error.message, "enqueue: refused — HTTP 503");
            return true;
          },
        );
        const kept = await app.job(id);
        assert.equal(kept.state, "queued");
        assert.equal(kept.envelope.recipientKeyId, keyId(siteKeys.identityPublic));
        // Once the relay is back, the stored job can be published again as it is.
        assert.equal((await h.relay.state.jobs()).some((j) => j.id === id), false);
        await app.cloud.publish(kept);
        const routed = (await h.relay.state.jobs()).find((j) => j.id === id);
        assert.equal(routed.state, "queued");
        assert.equal(routed.stub.owner, h.owner);
      });

      it("409 not-ready on enqueue is a retryable RelayUnavailable, not a refusal", async () => {
        h.inject("/relay/site/enqueue", {
          status: 409,
          body: { error: "not-ready", message: "draining" },
        });
        await assert.rejects(
          app.enqueue({ kind: "llm.generate", owner: h.owner, payload: { prompt: "p" } }),
          (error) => {
            assert.ok(error instanceof RelayUnavailable, String(error));
            assert.equal(error.retryable, true);
            assert.equal(error.code, "not-ready");
            assert.equal(error.message, "enqueue: not-ready — draining");
            return true;
          },
        );
      });

      it("a standing refusal on enqueue (keys the relay did not pin: 401) is RelayUnavailable, not retryable", async () => {
        // Signing as our site id with somebody else's keys — the real relay refuses it.
        const stranger = impl.mod.generateSiteKeys();
        const { app: wrongKeys } = siteOn(h.origin, h.siteId, stranger);
        await assert.rejects(
          wrongKeys.enqueue({ kind: "llm.generate", owner: h.owner, payload: { prompt: "p" } }),
          (error) => {
            assert.ok(error instanceof RelayUnavailable, String(error));
            assert.equal(error.retryable, false);
            assert.equal(error.code, "unauthorized");
            assert.equal(error.message, "enqueue: unauthorized — signature check failed");
            return true;
          },
        );
      });

      it("a site whose clock drifted is told so by the real relay: RelayUnavailable clock-skew, not retryable", async () => {
        const store = new MemoryStore();
        const skewed = new ByollmApp({
          store,
          siteKeys,
          now: () => Date.now() - 10 * 60_000,
          lane: { relayOrigin: h.origin, siteId: h.siteId },
        });
        await assert.rejects(skewed.cloud.pump(), (error) => {
          assert.ok(error instanceof RelayUnavailable, String(error));
          assert.equal(error.retryable, false);
          assert.equal(error.code, "clock-skew");
          assert.match(error.message, /^pending: clock-skew — this request's timestamp is too far from the server's clock/);
          return true;
        });
      });

      it("a relay that is not listening at all: the job is kept; ours says RelayUnavailable (retryable) and pump defers", async () => {
        const port = await closedPort();
        const { app: offline } = siteOn(`http://127.0.0.1:${port}`, h.siteId, siteKeys);
        const id = `job-offline-${tag()}`;
        if (impl.mod === reference) {
          // The reference lets the raw fetch error escape, from enqueue and from pump.
          await assert.rejects(
            offline.enqueue({ id, kind: "llm.generate", owner: h.owner, payload: { prompt: "p" } }),
            (error) => {
              assert.equal(error.name, "TypeError");
              assert.equal(error.cause?.code, "ECONNREFUSED");
              return true;
            },
          );
          assert.equal((await offline.job(id)).state, "queued");
          await assert.rejects(offline.cloud.pump(), TypeError);
          return;
        }
        // Deliberate difference: an unreachable relay is "try again later",
        // exactly like a 503 from its ingress.
        await assert.rejects(
          offline.enqueue({ id, kind: "llm.generate", owner: h.owner, payload: { prompt: "p" } }),
          (error) => {
            assert.ok(error instanceof RelayUnavailable, String(error));
            assert.equal(error.retryable, true);
            assert.equal(error.code, "");
            assert.equal(error.message, "enqueue: unreachable — ECONNREFUSED");
            return true;
          },
        );
        assert.equal((await offline.job(id)).state, "queued");
        const report = await offline.cloud.pump();
        assert.deepEqual(report, { sealed: [], completed: [], refused: [], deferred: "pending: unreachable — ECONNREFUSED" });
      });
    });

    describe("a stand-in relay (not the real relay) for an enqueue code the real one cannot send", () => {
      let standIn;
      before(async () => {
        standIn = await startStandIn({
          status: 409,
          body: { error: "quota-exhausted", message: "this site is over its monthly quota" },
        });
      });
      after(async () => {
        await standIn?.close();
      });

      it("an unknown 409 code is still EnqueueRefused, carrying that code", async () => {
        const siteKeys = impl.mod.generateSiteKeys();
        const { app } = siteOn(standIn.origin, "site-x", siteKeys);
        await assert.rejects(
          app.enqueue({ kind: "llm.generate", owner: "o", payload: { prompt: "p" } }),
          (error) => {
            assert.ok(error instanceof EnqueueRefused, String(error));
            assert.equal(error.code, "quota-exhausted");
            assert.equal(error.message, "this site is over its monthly quota");
            return true;
          },
        );
        assert.equal(standIn.received.length, 1);
        assert.equal(standIn.received[0].url, "/relay/site/enqueue");
      });

      it("the same unknown 409 anywhere but enqueue is a non-retryable RelayUnavailable", async () => {
        const siteKeys = impl.mod.generateSiteKeys();
        const { app } = siteOn(standIn.origin, "site-x", siteKeys);
        await assert.rejects(app.cloud.pump(), (error) => {
          assert.ok(error instanceof RelayUnavailable, String(error));
          assert.equal(error.retryable, false);
          assert.equal(error.code, "quota-exhausted");
          assert.equal(error.message, "pending: quota-exhausted — this site is over its monthly quota");
          return true;
        });
      });
    });
  });
}

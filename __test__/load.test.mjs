// A reduced run of scripts/load.mjs (the full one is 50 daemons and 10,000
// jobs, plus a 1,000,000-job soak; see docs/security.md for its numbers):
// simulated daemons in worker threads over loopback HTTP against our handler,
// with cancels, refusals, dying daemons and dependencies; then a soak of the
// in-memory store with retention on.
import { test } from "node:test";
import assert from "node:assert/strict";
import { load, soak } from "../scripts/load.mjs";

test("load: every job ends in one correct terminal state, none runs twice at once, none is lost", { timeout: 90_000 }, async () => {
  const lines = [];
  // A daemon stalled past its 1.5 s lease on a loaded machine may still be
  // running when the job is leased again; the checker accepts that only when
  // the first lease had lapsed by the second claim (summary.releasedAfterLapse).
  const { summary, violations } = await load({ daemons: 8, jobs: 600, workers: 2, leaseMs: 1500, cancelWorkMs: 600, timeoutS: 45, log: (l) => lines.push(l) });
  console.log(`# ${JSON.stringify(summary)}`);
  assert.deepEqual(violations, [], lines.join("\n"));
  // The mix really happened: every mode reached its end state, daemons died and refused.
  for (const key of ["ok:ok", "error:error", "cancel:canceled", "refuse:ok", "die:ok", "parent:ok", "child:ok"]) {
    assert.ok(summary.states[key] > 0, `no ${key} in ${JSON.stringify(summary.states)}`);
  }
  assert.ok((summary.cancelLandedOn.running ?? 0) + (summary.cancelLandedOn.claimed ?? 0) > 0, "no cancel landed on a running job");
  assert.ok((summary.cancelLandedOn.canceled ?? 0) > 0, "no cancel landed on a queued job");
  assert.ok(summary.died > 0, "no daemon died mid-lease");
  assert.ok(summary.refusedReleases > 0, "no job was refused");
  assert.equal(summary.non200, 0);
});

test("soak: the in-memory store with retention stays flat", { timeout: 90_000 }, async () => {
  const { summary, violations } = await soak({ jobs: 30_000, batch: 500, retentionMs: 5_000, log: () => {} });
  console.log(`# ${JSON.stringify({ ...summary, samples: summary.samples.length })}`);
  assert.deepEqual(violations, []);
  assert.equal(summary.probe, "queued");
});

test("load checker: a store that silently drops lease renewals is caught re-leasing a running job", { timeout: 90_000 }, async () => {
  // The daemon is told its lease was renewed, the store lets it lapse anyway:
  // the next claim hands out a job whose holder still holds a valid lease.
  const dropRenewals = (store) =>
    new Proxy(store, {
      get(target, prop) {
        if (prop === "renewLeases") return async () => ({ lost: [] });
        const value = Reflect.get(target, prop, target);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
  // Four 1 s jobs on a 300 ms lease, eight daemons heartbeating every 75 ms
  // while they work: with renewals kept no lease lapses; with them dropped,
  // the idle daemons (polling every 100-300 ms) claim a job its holder still
  // works on. The jobs never finish (every result comes after a lapse), so
  // the run ends at its 5 s limit.
  const scenario = { daemons: 8, jobs: 4, workers: 2, leaseMs: 300, workMs: 1000, timeoutS: 5, log: () => {} };
  const sound = await load(scenario);
  assert.deepEqual(sound.violations, [], "the same scenario on the real store must be clean");
  assert.equal(sound.summary.states["ok:ok"], 4);
  const { violations } = await load({ ...scenario, wrapStore: dropRenewals });
  assert.ok(violations.some((v) => /while still running|runs overlap/.test(v)), `no re-lease caught: ${violations.slice(0, 3).join(" | ")}`);
});

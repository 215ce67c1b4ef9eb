// The differential suite (differential.test.mjs) and the adversarial
// hardening suites that run a site of ours (hardening-inputs,
// hardening-weakspots) with ours on each store other than MemoryStore: a
// plain store of the app's own, postgresStore and supabaseStore (through the
// PostgREST stand-in), each on a database of its own, against the reference
// on its MemoryStore. Each store's run is a child process (the suites' state
// is per process), with a smaller seeded mutation run than the MemoryStore
// pass: the SQL stores answer in milliseconds, not microseconds, and what
// they add is their own storage, not new inputs.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";

const suites = ["differential", "hardening-inputs", "hardening-weakspots"].map((name) =>
  fileURLToPath(new URL(`./${name}.test.mjs`, import.meta.url)),
);

// The seeded mutations' coverage checks (every stage reached at least 3
// times) hold from about 1,000 mutations of the default seed on.
const RUNS = {
  plain: { DIFF_MUTATIONS: "1000", DIFF_APP_MUTATIONS: "150" },
  postgres: { DIFF_MUTATIONS: "1000", DIFF_APP_MUTATIONS: "120" },
  supabase: { DIFF_MUTATIONS: "1000", DIFF_APP_MUTATIONS: "100" },
};

function run(store, sizes) {
  return new Promise((resolve, reject) => {
    // A test runner of its own (NODE_TEST_CONTEXT would make it report to this one).
    const { NODE_TEST_CONTEXT: _, ...env } = process.env;
    const child = spawn(process.execPath, ["--test", "--test-reporter=spec", "--test-concurrency=1", ...suites], {
      env: { ...env, DIFF_STORE: store, ...sizes },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (out += d));
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, out }));
  });
}

for (const [store, sizes] of Object.entries(RUNS)) {
  test(`the differential and hardening suites with ours on ${store}`, { timeout: 300_000 }, async () => {
    const { code, out } = await run(store, sizes);
    const summary = out.split("\n").filter((l) => /^(ℹ|✖|compared|deliberate differences seen|open divergences)/.test(l.trim()));
    console.log(`${store}:\n${summary.join("\n")}`);
    assert.equal(code, 0, out.slice(-20_000));
    // It ran the whole suite, ours on that store.
    assert.match(out, new RegExp(`compared \\(ours on ${store}\\)`));
    assert.ok(Number(/ℹ pass (\d+)/.exec(out)?.[1]) >= 13 + 9 + 11, out.slice(-5_000));
    assert.match(out, /ℹ fail 0/);
  });
}

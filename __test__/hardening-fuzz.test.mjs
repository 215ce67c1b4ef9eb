// CI smoke of the fuzz targets (fuzz/, scripts/fuzz.sh): replays the saved
// regression inputs, then a few seconds of every target. The long runs are
// reported in docs/security.md.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { resolve, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const TARGETS = ["inspect", "open", "verify", "keys", "b64"];

// The timeout covers building the fuzzer too: when npm test's cargo test has
// not run yet (it runs beside the JS files), that build compiles the
// dependencies itself, minutes on two busy cores.
test("fuzz smoke: every target runs without a crash", { timeout: 900_000 }, () => {
  const r = spawnSync("bash", [join(root, "scripts", "fuzz.sh"), "4", ...TARGETS], { cwd: root, encoding: "utf8", env: { ...process.env, FUZZ_SEED: String(Date.now() % 100000) } });
  const out = `${r.stdout}\n${r.stderr}`;
  console.log(r.stdout.split("\n").filter(Boolean).map((l) => `# ${l}`).join("\n"));
  assert.equal(r.status, 0, out.slice(-4000));
  for (const t of TARGETS) {
    const line = r.stdout.split("\n").find((l) => l.startsWith(`target=${t} `));
    assert.ok(line, `no report for ${t}:\n${out.slice(-2000)}`);
    const execs = Number(/execs=(\d+)/.exec(line)[1]);
    assert.ok(execs > 1000, `${t} ran only ${execs} inputs`);
    assert.match(line, /crashes=0 /);
  }
});

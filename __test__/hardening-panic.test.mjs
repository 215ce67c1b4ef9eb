// Defence in depth at the binding layer: a panic inside a native call must
// reach JavaScript as a thrown Error, never abort the process. A copy of the
// addon with the `test-panic` feature (a deliberately panicking export) is
// built into a temp dir; the shipped build never carries that export.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const require = createRequire(import.meta.url);

test("every #[napi] function and method in src/binding carries catch_unwind", () => {
  const dir = join(root, "src", "binding");
  let exported = 0;
  const missing = [];
  for (const file of readdirSync(dir).filter((f) => f.endsWith(".rs"))) {
    const lines = readFileSync(join(dir, file), "utf8").split("\n");
    for (let i = 0; i < lines.length; i++) {
      if (!/^\s*#\[napi\b/.test(lines[i])) continue;
      // The attribute may span lines; collect it up to its closing `]`.
      let attr = lines[i];
      let j = i;
      while (!/\]\s*$/.test(attr) && j + 1 < lines.length) attr += lines[++j];
      // Skip further attributes, docs and blank lines to the item itself.
      let k = j + 1;
      while (k < lines.length && /^\s*(#\[|\/\/|$)/.test(lines[k])) {
        if (/^\s*#\[/.test(lines[k])) while (!/\]\s*$/.test(lines[k]) && k + 1 < lines.length) k++;
        k++;
      }
      const item = lines[k] ?? "";
      if (!/^\s*(pub(\([a-z]+\))?\s+)?(async\s+)?fn\s/.test(item)) continue; // structs, impls, fields
      exported++;
      if (!/\bcatch_unwind\b/.test(attr)) missing.push(`${file}:${i + 1} ${item.trim()}`);
    }
  }
  assert.ok(exported > 40, `found only ${exported} exported functions; the scan is broken`);
  assert.deepEqual(missing, [], "exports without catch_unwind");
});

test("the built addon in the package root has no test-panic export", () => {
  const built = readdirSync(root).filter((f) => /^byollm-server-native\..+\.node$/.test(f));
  assert.ok(built.length > 0, "no built addon in the package root (run npm run build:debug)");
  for (const file of built) {
    const native = require(join(root, file));
    assert.equal(typeof native.nativeVersion, "function", file);
    assert.equal(native.testPanic, undefined, file);
    assert.equal(native.testPanicIndex, undefined, file);
  }
});

test("a panic inside a native call becomes a JS Error", { timeout: 300_000 }, () => {
  const out = mkdtempSync(join(tmpdir(), "byollm-test-panic-"));
  try {
    const napi = join(root, "node_modules", ".bin", "napi");
    // The same profile and target as `npm run build:native` (release,
    // --platform), so the dependencies that build compiled are reused and only
    // this crate is compiled again; a debug build would compile every
    // dependency once more, which takes minutes on two cores.
    const build = spawnSync(napi, ["build", "--platform", "--release", "--features", "node,test-panic", "--output-dir", out, "--no-dts-header", "--dts", "panic.d.ts"], {
      cwd: root,
      encoding: "utf8",
    });
    assert.equal(build.status, 0, `napi build failed:\n${build.stderr}`);
    const addon = readdirSync(out).find((f) => f.endsWith(".node"));
    assert.ok(addon, `no .node file in ${readdirSync(out).join(", ")}`);

    // In a child process, so that if the guard were missing the abort would
    // fail this test instead of killing the runner.
    const probe = `
      const m = require(${JSON.stringify(join(out, addon))});
      const seen = [];
      try { m.testPanic("boom"); seen.push("no throw"); } catch (e) { seen.push([e instanceof Error, String(e.message)]); }
      try { m.testPanicIndex([1, 2, 3], 7); seen.push("no throw"); } catch (e) { seen.push([e instanceof Error, String(e.message)]); }
      seen.push(m.testPanicIndex([1, 2, 3], 1));
      seen.push(typeof m.nativeVersion());
      console.log(JSON.stringify(seen));
    `;
    const run = spawnSync(process.execPath, ["-e", probe], { encoding: "utf8" });
    assert.equal(run.signal, null, `the process was killed by ${run.signal}: ${run.stderr}`);
    assert.equal(run.status, 0, run.stderr);
    const seen = JSON.parse(run.stdout.trim().split("\n").pop());
    assert.equal(seen[0][0], true);
    assert.match(seen[0][1], /test-panic: boom/);
    assert.equal(seen[1][0], true);
    assert.match(seen[1][1], /index out of bounds/);
    assert.equal(seen[2], 2, "the addon still works after two panics");
    assert.equal(seen[3], "string");
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});

// The WebAssembly fallback (wasm32-wasip1-threads, scripts/build-wasi.mjs):
// what picks it, that it is what runs under NAPI_RS_FORCE_WASI (the WASI pass
// of scripts/test.mjs runs this file first, then conformance, the real-daemon
// site and the browser test with that switch set), and the durable store on
// it with a relative path. The error when nothing loads: package.test.mjs.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { root } from "../scripts/pack-release.mjs";

const WASM = join(root, "byollm-server-native.wasm32-wasi.wasm");
const skip = existsSync(WASM) ? undefined : "the fallback is not built (npm run build:wasi)";
if (skip) console.log(`# wasi.test.mjs skipped: ${skip}`);

/** Runs `code` (an ES module) in a fresh Node with `env` added; returns status, stdout, stderr. */
function node(code, env = {}, cwd = root) {
  const clean = { ...process.env };
  delete clean.NAPI_RS_FORCE_WASI;
  return spawnSync(process.execPath, ["--no-warnings", "--input-type=module", "-e", code], {
    cwd,
    env: { ...clean, ...env },
    encoding: "utf8",
    timeout: 60_000,
  });
}
const target = `import { binding } from ${JSON.stringify(join(root, "dist", "native-loader.js"))}; console.log(binding.__napiBindingTarget);`;

test("this process runs the binding the WASI pass asked for", { skip }, async () => {
  const { binding } = await import("../dist/native-loader.js");
  const forced = ["1", "true", "error"].includes(process.env.NAPI_RS_FORCE_WASI ?? "");
  assert.equal(binding.__napiBindingTarget, forced ? "wasm32-wasi" : "native");
});

test("NAPI_RS_FORCE_WASI=1, true and error pick the fallback; unset, 0 and false keep the native addon", { skip }, () => {
  for (const [value, expected] of [["1", "wasm32-wasi"], ["true", "wasm32-wasi"], ["error", "wasm32-wasi"], [undefined, "native"], ["0", "native"], ["false", "native"]]) {
    const r = node(target, value === undefined ? {} : { NAPI_RS_FORCE_WASI: value });
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.stdout.trim(), expected, `NAPI_RS_FORCE_WASI=${value}`);
  }
  // The switch is restored once the loader has run: other napi packages read it too.
  const r = node(`${target} console.log(process.env.NAPI_RS_FORCE_WASI);`, { NAPI_RS_FORCE_WASI: "1" });
  assert.deepEqual(r.stdout.trim().split("\n"), ["wasm32-wasi", "1"]);
});

test("the durable store works in the fallback, and a relative path means the working directory", { skip }, () => {
  const dir = mkdtempSync(join(tmpdir(), "byollm-wasi-"));
  try {
    const dist = JSON.stringify(join(root, "dist", "index.js"));
    const write = `
      import { ByollmApp, MemoryStore, generateSiteKeys } from ${dist};
      const store = new MemoryStore({ path: "jobs.db" });
      const app = new ByollmApp({ store, siteKeys: generateSiteKeys() });
      const job = await app.enqueue({ kind: "llm.generate", payload: { prompt: "kept" }, owner: "alice" });
      store.close();
      console.log(job.id);`;
    const first = node(write, { NAPI_RS_FORCE_WASI: "1" }, dir);
    assert.equal(first.status, 0, first.stderr);
    const id = first.stdout.trim();
    assert.ok(existsSync(join(dir, "jobs.db")), "the file is in the working directory, not at the root");
    // Read back by the native addon: the same file format.
    const read = `
      import { MemoryStore } from ${dist};
      const store = new MemoryStore({ path: "jobs.db" });
      const job = await store.get(${JSON.stringify(id)});
      console.log(job?.state, job?.owner);`;
    const second = node(read, {}, dir);
    assert.equal(second.status, 0, second.stderr);
    assert.equal(second.stdout.trim(), "queued alice");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

// The Supabase Edge Function example (examples/supabase-edge): type-checked
// and its Deno tests run with NO permissions (no FFI, env, net or files),
// against the edge module (edge/) of this checkout.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { installRuntimes } from "../scripts/runtime-matrix.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const fnDir = join(root, "examples", "supabase-edge", "functions", "byollm-result");

test("supabase-edge example: deno check + deno test without permissions", () => {
  if (!existsSync(join(root, "edge", "wasm-inline.js"))) {
    const b = spawnSync(process.execPath, [join(root, "scripts", "build-wasm.mjs")], { cwd: root, stdio: "inherit" });
    assert.equal(b.status, 0, "scripts/build-wasm.mjs failed");
  }
  const { deno } = installRuntimes({ only: ["deno"] });
  assert.ok(deno && existsSync(deno), "deno installed from npm");
  const env = { ...process.env, NO_COLOR: "1" };
  const check = spawnSync(deno, ["check", "--config", "deno.local.json", "index.ts", "handler.ts"], { cwd: fnDir, encoding: "utf8", env });
  assert.equal(check.status, 0, `deno check failed:\n${check.stdout}\n${check.stderr}`);
  const run = spawnSync(deno, ["test", "--no-prompt", "--config", "deno.local.json"], { cwd: fnDir, encoding: "utf8", env });
  assert.equal(run.status, 0, `deno test failed:\n${run.stdout}\n${run.stderr}`);
  const summary = /ok \| (\d+) passed \| (\d+) failed/.exec(run.stdout);
  assert.ok(summary, run.stdout);
  assert.equal(Number(summary[2]), 0);
  assert.ok(Number(summary[1]) >= 5, `only ${summary[1]} Deno tests ran`);
});

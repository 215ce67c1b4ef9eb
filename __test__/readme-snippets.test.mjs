// The README's other `lib/byollm.ts` variants (Supabase, one process) are not
// files of an example, so they are type-checked here, strict, against this
// package's own types installed as `@byollm/server`, and must export what
// the example's routes import from it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { root } from "./site-harness.mjs";

test("the README's Supabase and one-process lib/byollm.ts type-check against the package", { timeout: 120_000 }, () => {
  assert.ok(existsSync(join(root, "dist", "index.d.ts")), "dist/ is built");
  const readme = readFileSync(join(root, "README.md"), "utf8");
  const snippets = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)]
    .map((m) => m[1])
    .filter((s) => s.includes("function byollm()") && !s.includes("postgresStore"));
  assert.equal(snippets.length, 2, "the Supabase and the one-process variants");
  for (const snippet of snippets) {
    for (const name of ["getStore", "getApp", "verificationUrl"]) assert.match(snippet, new RegExp(`^export function ${name}\\(`, "m"), name);
  }

  const work = mkdtempSync(join(tmpdir(), "byollm-readme-ts-"));
  try {
    mkdirSync(join(work, "node_modules", "@byollm"), { recursive: true });
    symlinkSync(root, join(work, "node_modules", "@byollm", "server"), "dir");
    for (const pkg of ["@supabase", "@types", "pg"]) symlinkSync(join(root, "node_modules", pkg), join(work, "node_modules", pkg), "dir");
    snippets.forEach((snippet, i) => writeFileSync(join(work, `variant${i}.ts`), snippet));
    writeFileSync(
      join(work, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: { strict: true, noEmit: true, module: "esnext", moduleResolution: "bundler", target: "ES2022", skipLibCheck: true, types: ["node"] },
        include: ["*.ts"],
      }),
    );
    const tsc = spawnSync(process.execPath, [join(root, "node_modules", "typescript", "bin", "tsc"), "-p", work], { encoding: "utf8" });
    assert.equal(tsc.status, 0, tsc.stdout + tsc.stderr);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
});

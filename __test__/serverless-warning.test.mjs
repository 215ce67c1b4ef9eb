// A MemoryStore without `path` on a serverless host loses pairings between
// instances; the handler says so once, when it starts serving, and only then.
// Each case runs in its own process: the warning is once per process.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { root } from "./site-harness.mjs";

const WARNING = "byollm: a MemoryStore without `path` is serving requests on a serverless host";

/** Builds two handlers on one store (and a second store) and serves requests; returns stderr. */
function serve(env, storeOptions) {
  const script = `
    const { MemoryStore, createFetchHandler, ByollmHandlers, generateSiteKeys } = await import(${JSON.stringify(pathToFileURL(join(root, "dist", "index.js")).href)});
    const { createHandler } = await import(${JSON.stringify(pathToFileURL(join(root, "dist", "next.js")).href)});
    const siteKeys = generateSiteKeys();
    const store = new MemoryStore(${JSON.stringify(storeOptions)});
    const config = { store, siteKeys, verificationUrl: "https://app.example/pair" };
    const handle = createFetchHandler(config);
    new ByollmHandlers(config);
    const route = createHandler(() => config);
    for (const h of [handle, route.POST, handle]) {
      const answer = await h(new Request("https://app.example/byollm/claim", { method: "POST", body: "{}" }));
      if (answer.status >= 500) throw new Error("unexpected " + answer.status);
    }
    store.close?.();
  `;
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !["VERCEL", "AWS_LAMBDA_FUNCTION_NAME", "NETLIFY"].includes(k)));
  const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], { env: { ...clean, ...env }, encoding: "utf8" });
  assert.equal(r.status, 0, r.stderr);
  return r.stderr;
}

const count = (text) => text.split(WARNING).length - 1;

for (const host of [{ VERCEL: "1" }, { AWS_LAMBDA_FUNCTION_NAME: "site" }, { NETLIFY: "true" }]) {
  const name = Object.keys(host)[0];
  test(`with ${name} set, a MemoryStore without path warns once, naming the variable and what to use`, () => {
    const stderr = serve(host, {});
    assert.equal(count(stderr), 1, stderr);
    assert.match(stderr, new RegExp(`\\(${name} is set\\)`));
    assert.match(stderr, /pairings and jobs will not survive between instances/);
    assert.match(stderr, /postgresStore \(@byollm\/server\/postgres\)/);
    assert.match(stderr, /supabaseStore \(@byollm\/server\/supabase\)/);
  });
}

test("no warning off a serverless host, nor with MemoryStore({ path }) on one", () => {
  assert.equal(serve({}, {}), "");
  assert.equal(serve({ VERCEL: "" }, {}), "", "an empty variable is not set");
  const dir = mkdtempSync(join(tmpdir(), "byollm-serverless-"));
  try {
    assert.equal(serve({ VERCEL: "1" }, { path: join(dir, "byollm.db") }), "");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

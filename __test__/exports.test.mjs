// Every runtime export of the reference's `.` and `./next` entries exists in
// ours with the same kind, compared programmatically against the reference
// modules themselves.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as referenceMain from "@byollm/server";
import * as referenceNext from "@byollm/server/next";
import * as ourMain from "../dist/index.js";
import * as ourNext from "../dist/next.js";

/** class / function / the primitive type / object. */
function kindOf(value) {
  if (typeof value === "function") {
    const source = Function.prototype.toString.call(value);
    if (/^class[\s{]/.test(source)) return "class";
    // A native (napi) class prints as `function X() { [native code] }`; it is
    // a class to its users if it has methods on its prototype.
    if (/\[native code\]/.test(source) && Object.getOwnPropertyNames(value.prototype ?? {}).length > 1) return "class";
    return "function";
  }
  if (value === null) return "null";
  return typeof value;
}

function surface(module) {
  return Object.fromEntries(Object.keys(module).sort().map((name) => [name, kindOf(module[name])]));
}

/** Ours beyond the reference's surface, each on purpose (docs/operations.md). */
const ADDED = { createMetricsHandler: "function", jobTraceContext: "function" };

test("entry `.`: the same 24 runtime exports with the same kinds, and the metrics' two", () => {
  const reference = surface(referenceMain);
  assert.equal(Object.keys(reference).length, 24);
  const ours = surface(ourMain);
  for (const name of Object.keys(ADDED)) assert.ok(!(name in reference), `${name} is ours`);
  assert.deepEqual(ours, surface({ ...referenceMain, ...Object.fromEntries(Object.keys(ADDED).map((k) => [k, ourMain[k]])) }));
  assert.deepEqual(Object.fromEntries(Object.keys(ADDED).map((k) => [k, ours[k]])), ADDED);
});

test("entry `./next`: the same runtime exports with the same kinds", () => {
  assert.deepEqual(surface(ourNext), surface(referenceNext));
  assert.deepEqual(Object.keys(ourNext), ["createHandler"]);
});

test("constants and error classes carry the reference's values and names", () => {
  assert.equal(ourMain.SERVED_PROTOCOL_VERSION, referenceMain.SERVED_PROTOCOL_VERSION);
  for (const [name, args] of [
    ["NoRunnerAvailableError", ["job-1", "no-runner-online"]],
    ["ResultTimeoutError", ["job-1", 1234]],
    ["RelayUnavailable", ["pending: refused — nope", false, "unauthorized"]],
    ["EnqueueRefused", ["no", "slot-waiting"]],
  ]) {
    const ours = new ourMain[name](...args);
    const theirs = new referenceMain[name](...args);
    assert.ok(ours instanceof Error, name);
    assert.equal(ours.name, theirs.name, name);
    assert.equal(ours.message, theirs.message, name);
    assert.deepEqual({ ...ours }, { ...theirs }, `${name} own fields`);
  }
});

test("pure helpers agree with the reference", () => {
  for (const input of ["abcd-efgh", "ab cd ef gh", "ß", "x", "ﬁ1234567", ""]) {
    assert.equal(ourMain.normalizeUserCode(input), referenceMain.normalizeUserCode(input), input);
  }
  for (const input of ["", "abc", "héllo 🙂"]) {
    assert.equal(ourMain.hashSecret(input), referenceMain.hashSecret(input));
  }
  for (const [a, b] of [["ab", "ab"], ["ab", "ac"], ["ab", "abc"]]) {
    assert.equal(ourMain.secretsMatch(a, b), referenceMain.secretsMatch(a, b), `${a} ${b}`);
  }
  // Deliberate differences (docs/security.md): malformed hex is never equal
  // (the reference matches these), and false where the reference throws.
  for (const [a, b] of [["abc", "abd"], ["zz", "yy"]]) {
    assert.equal(referenceMain.secretsMatch(a, b), true, `${a} ${b}`);
    assert.equal(ourMain.secretsMatch(a, b), false, `${a} ${b}`);
  }
  assert.equal(ourMain.secretsMatch("zz", "ab"), false);
  assert.throws(() => referenceMain.secretsMatch("zz", "ab"), RangeError);
  const caps = [
    { kind: "llm.chat", model: "a" },
    { kind: "llm.generate", model: "b" },
    { kind: "llm.generate", model: "c" },
  ];
  assert.equal(ourMain.capabilityFor(caps, "llm.generate"), caps[1]);
  assert.equal(ourMain.capabilityFor(caps, "llm.embed"), undefined);
  assert.match(ourMain.generateDeviceCode(), /^[A-Za-z0-9_-]{43}$/);
  assert.match(ourMain.generateRunnerId(), /^runner_[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  assert.match(ourMain.generateJobId(), /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  assert.match(ourMain.generateUserCode(), /^[ABCDEFGHJKMNPQRTWXYZ2346789]{4}-[ABCDEFGHJKMNPQRTWXYZ2346789]{4}$/);
});

test("site keys: generated keys round-trip through formatSiteKeys/siteKeysFromEnv, and the reference reads ours", () => {
  const keys = ourMain.generateSiteKeys(1767225600000);
  assert.equal(keys.createdAt, 1767225600000);
  assert.deepEqual(Object.keys(keys), [
    "version",
    "identityPublic",
    "identityPrivate",
    "encryptionPublic",
    "encryptionPrivate",
    "encryptionSig",
    "createdAt",
  ]);
  const text = ourMain.formatSiteKeys(keys);
  assert.equal(text, referenceMain.formatSiteKeys(keys));
  const line = text.split("\n").find((l) => l.startsWith("BYOLLM_SITE_KEYS="));
  const env = { BYOLLM_SITE_KEYS: line.slice("BYOLLM_SITE_KEYS=".length) };
  assert.deepEqual(ourMain.siteKeysFromEnv("BYOLLM_SITE_KEYS", env), keys);
  assert.deepEqual(referenceMain.siteKeysFromEnv("BYOLLM_SITE_KEYS", env), keys);
  for (const bad of [{}, { BYOLLM_SITE_KEYS: "" }, { BYOLLM_SITE_KEYS: "!!!" }, { BYOLLM_SITE_KEYS: "e30=" }]) {
    let theirs;
    try {
      referenceMain.siteKeysFromEnv("BYOLLM_SITE_KEYS", bad);
    } catch (error) {
      theirs = error.message;
    }
    assert.throws(() => ourMain.siteKeysFromEnv("BYOLLM_SITE_KEYS", bad), (error) => error.message === theirs);
  }
});

// ---------------------------------------------------------------------------
// Types: every name the reference's declarations export is exported by ours,
// and the record/store types are interchangeable in both directions.

import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";

/** Names in the `export { … }` lists of a declaration file (aliases resolved to the exported name). */
function declaredExports(file) {
  const text = readFileSync(file, "utf8");
  const names = [];
  for (const m of text.matchAll(/^export \{([^}]*)\}/gm)) {
    for (const part of m[1].split(",")) {
      const name = part.trim().replace(/^type\s+/, "").split(/\s+as\s+/).pop();
      if (name) names.push(name);
    }
  }
  return names;
}

test("types: every declared export of the reference (`.` and `./next`) type-checks against ours", { timeout: 120_000 }, () => {
  const root = fileURLToPath(new URL("..", import.meta.url));
  const refDir = join(root, "node_modules", "@byollm", "server", "dist");
  const main = declaredExports(join(refDir, "index.d.ts"));
  const next = declaredExports(join(refDir, "next.d.ts"));
  assert.equal(main.length, 54, "24 runtime + 30 type exports");
  const work = mkdtempSync(join(tmpdir(), "byollm-types-"));
  try {
    const ours = join(root, "dist", "index.js");
    const oursNext = join(root, "dist", "next.js");
    const isValue = (n) => n in referenceMain;
    const isClass = (n) => kindOf(referenceMain[n]) === "class";
    const source = [
      `import * as Ours from ${JSON.stringify(ours)};`,
      `import * as OursNext from ${JSON.stringify(oursNext)};`,
      `import type * as Ref from "@byollm/server";`,
      `import type * as RefNext from "@byollm/server/next";`,
      // Exists in ours: as a type for type exports (and classes), as a value otherwise.
      ...main.map((n, i) => (isValue(n) && !isClass(n) ? `type M${i} = typeof Ours.${n};` : `type M${i} = Ours.${n};`)),
      // Our functions and constants are assignable to the reference's declared types.
      ...main.filter((n) => isValue(n) && !isClass(n)).map((n, i) => `const v${i}: typeof Ref.${n} = Ours.${n}; void v${i};`),
      `const n0: typeof RefNext.createHandler = OursNext.createHandler; void n0;`,
      `type N0 = OursNext.NextHandlerConfig; type N1 = OursNext.HandlerConfig;`,
      ...next.filter((n) => !["createHandler", "NextHandlerConfig", "HandlerConfig"].includes(n)).map((n) => `type Unexpected_${n} = OursNext.${n};`),
      // Interchangeable both ways: a reference store is our store and vice versa.
      `declare const refStore: Ref.MemoryStore; const a: Ours.ByollmStore = refStore; void a;`,
      `declare const ourStore: Ours.MemoryStore; const b: Ref.ByollmStore = ourStore; void b;`,
      `declare const ourJob: Ours.JobRecord; const c: Ref.JobRecord = ourJob; void c;`,
      `declare const refJob: Ref.JobRecord; const d: Ours.JobRecord = refJob; void d;`,
      `declare const ourOpts: Ref.ByollmAppOptions; const e: Ours.ByollmAppOptions = ourOpts; void e;`,
      `declare const handle: Ours.JobHandle; const f: Ref.JobHandle = handle; void f;`,
      `declare const cfg: Ref.HandlerConfig; const g: OursNext.NextHandlerConfig = cfg; void g;`,
      "export {};",
    ].join("\n");
    writeFileSync(join(work, "check.ts"), source);
    writeFileSync(
      join(work, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: {
          target: "ES2022",
          module: "NodeNext",
          moduleResolution: "NodeNext",
          strict: true,
          noEmit: true,
          skipLibCheck: true,
          types: ["node"],
          typeRoots: [join(root, "node_modules", "@types")],
          baseUrl: root,
          paths: {
            "@byollm/server": [join(refDir, "index.d.ts")],
            "@byollm/server/next": [join(refDir, "next.d.ts")],
            "@byollm/protocol": [join(root, "node_modules", "@byollm", "protocol", "dist", "index.d.ts")] },
        },
        files: ["check.ts"],
      }),
    );
    const tsc = join(root, "node_modules", "typescript", "bin", "tsc");
    const run = spawnSync(process.execPath, [tsc, "-p", join(work, "tsconfig.json")], { encoding: "utf8" });
    assert.equal(run.status, 0, `tsc:\n${run.stdout}${run.stderr}`);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
});

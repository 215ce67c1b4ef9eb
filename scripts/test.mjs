#!/usr/bin/env node
// Runs the package's tests (docs/testing.md).
//
//   node scripts/test.mjs               everything: the Rust core (fmt, clippy,
//                                       cargo test), every JS test file on Node 22,
//                                       the portable files on Node 24 and 20, the
//                                       WebAssembly fallback's pass
//   node scripts/test.mjs --area NAME   one area after a change (core, memory,
//                                       postgres, supabase, http, next, ...; --area
//                                       alone lists them): rebuilds what is stale (the
//                                       debug addon, dist/), then its Rust tests and
//                                       its JS files on Node 22
//   node scripts/test.mjs --js-only     everything but the Rust steps
//   node scripts/test.mjs FILE...       these JS files on Node 22, 24 and 20
//   --jobs N                            test files run at once (default 4;
//                                       BYOLLM_TEST_JOBS)
//
// Test files share nothing (each makes its own temp dirs, loopback ports and
// PostgreSQL database), so they run concurrently (node --test starts them in
// the order of their paths). Node 22 and 24 come from npm (devDependencies
// `node` and `node24`); Node 20 is the machine's own.
//
// It brings up what the chosen files need first: PostgreSQL, this checkout's
// own server (scripts/pg-start.sh; BYOLLM_PG_URL names another), and
// Chromium (/usr/bin/chromium, or BYOLLM_CHROMIUM), each installed from
// Debian's packages when missing (as root, or through sudo without a password).
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { join, resolve, dirname, relative } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const args = process.argv.slice(2);
const flag = (name) => {
  const at = args.indexOf(name);
  if (at < 0) return undefined;
  const value = args[at + 1] !== undefined && !args[at + 1].startsWith("--") ? args[at + 1] : "";
  args.splice(at, value === "" ? 1 : 2);
  return value;
};
const areaName = flag("--area");
const jobs = Math.max(1, Number(flag("--jobs") ?? process.env.BYOLLM_TEST_JOBS ?? 4) || 4);
const jsOnly = flag("--js-only") !== undefined;
const only = args.filter((a) => !a.startsWith("--"));
const started = Date.now();
const seconds = (ms) => `${(ms / 1000).toFixed(0)} s`;

// ---------------------------------------------------------------------------
// Areas: a file belongs to every area whose pattern its name matches (a new
// file named like its neighbours joins their area). `rust` is the cargo test
// run with it.

const AREAS = {
  core: {
    about: "the Rust core's rules and crypto: cargo test, and beside it the JS files on the golden vectors",
    rust: true,
    files: /^(rules|crypto|api-vectors|seal-checked|open-input|protocol-types)\.test/,
  },
  parity: {
    about: "the core against the reference on seeded random input: rules, crypto, the differential suite (minutes)",
    files: /^(rules-parity|crypto-interop|differential)\.test/,
  },
  memory: {
    about: "MemoryStore (in memory and on a file): the store contract, its records, the engine's operations run in place",
    files: /^(store-|durable-store|direct|fetch-stored|large-fetch|engine-stores)/,
  },
  postgres: {
    about: "postgresStore and its migrations on this checkout's PostgreSQL, and the idle fleet across app processes",
    files: /^(postgres|metrics-postgres|engine-faults|engine-stores|engine-idle|idle-)/,
  },
  supabase: {
    about: "supabaseStore through supabase-js and the PostgREST stand-in",
    files: /^supabase/,
  },
  http: {
    about: "the HTTP mount: createFetchHandler, ByollmHandlers, ./next's route, against the reference's answers and the conformance kit",
    files: /^(handlers|malformed-http|api|api-vectors|conformance|hardening-inputs|hardening-weakspots|exports|store-patched)\.test/,
  },
  next: {
    about: "the Next.js examples built with next build and served with next start",
    files: /^next-/,
  },
  site: {
    about: "the example site: a simulated and the real daemon, Chromium",
    files: /^(site|browser)/,
  },
  metrics: { about: "metrics and OpenTelemetry", files: /^metrics/ },
  edge: { about: "the edge WebAssembly module in Deno and Chromium", files: /^edge/ },
  package: {
    about: "the packages as users install them, the WebAssembly fallback, the runtimes",
    files: /^(package|dropin|install-platforms|addon-elf|first-run|runtimes|wasi)\.test/,
  },
  hardening: {
    about: "what no input may grow past, fuzzing, panics, load and crash runs",
    files: /^(hardening|load|durable-crash|bounds)/,
  },
  cloud: { about: "the cloud lane against a real relay", files: /^cloud/ },
};

const testDir = join(root, "__test__");
const allFiles = readdirSync(testDir)
  .filter((f) => f.endsWith(".test.mjs"))
  .sort()
  .map((f) => join("__test__", f));
const baseName = (f) => f.split("/").pop();

if (areaName === "" || (areaName !== undefined && !(areaName in AREAS))) {
  if (areaName) console.error(`no area ${JSON.stringify(areaName)}`);
  console.log("node scripts/test.mjs --area NAME (npm run test:area -- NAME), one of:\n");
  for (const [name, area] of Object.entries(AREAS)) {
    const files = allFiles.filter((f) => area.files.test(baseName(f))).map(baseName);
    console.log(`  ${name.padEnd(10)} ${area.about}\n  ${"".padEnd(10)} ${area.rust ? "cargo test, " : ""}${files.join(", ")}\n`);
  }
  const loose = allFiles.filter((f) => !Object.values(AREAS).some((a) => a.files.test(baseName(f)))).map(baseName);
  if (loose.length) console.log(`  in no area (npm test runs them): ${loose.join(", ")}`);
  process.exit(areaName ? 1 : 0);
}
const area = areaName === undefined ? undefined : AREAS[areaName];
const files = area ? allFiles.filter((f) => area.files.test(baseName(f))) : only.length ? only : allFiles;
const env = { ...process.env, BYOLLM_TEST: "1" };

const failures = [];
/** A step run to its end before the next begins, its output as it comes. */
function run(label, cmd, cmdArgs, opts = {}) {
  console.log(`\n=== ${label}: ${cmd} ${cmdArgs.join(" ")}`);
  const t0 = Date.now();
  const r = spawnSync(cmd, cmdArgs, { cwd: root, stdio: "inherit", ...opts });
  if (r.status !== 0) failures.push(label);
  timings.push([label, Date.now() - t0]);
  return r.status === 0;
}
const timings = [];

// A Node binary that is not the node_modules/.bin shim npm puts first on PATH.
function systemNode() {
  for (const dir of (process.env.PATH ?? "").split(":")) {
    if (dir.includes("node_modules")) continue;
    const candidate = join(dir, "node");
    if (existsSync(candidate)) return candidate;
  }
  return process.execPath;
}
const node22 = join(root, "node_modules", "node", "bin", "node");
const node24 = join(root, "node_modules", "node24", "bin", "node");
const nodeSystem = systemNode();
const versionOf = (bin) => spawnSync(bin, ["--version"], { encoding: "utf8" }).stdout.trim();

// ---------------------------------------------------------------------------
// After a change, an area runs against what the change builds: the addon in
// debug (the release build's LTO takes minutes) and dist/, each when older
// than its sources.

function newest(dir, test) {
  let latest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) latest = Math.max(latest, newest(path, test));
    else if (test(entry.name)) latest = Math.max(latest, statSync(path).mtimeMs);
  }
  return latest;
}
const mtime = (path) => (existsSync(path) ? statSync(path).mtimeMs : 0);
if (area) {
  const addon = readdirSync(root).find((f) => /^byollm-server-native\..*\.node$/.test(f) && !f.includes("wasm32"));
  const rustChanged = Math.max(newest(join(root, "src"), (n) => n.endsWith(".rs")), mtime(join(root, "Cargo.toml")), mtime(join(root, "build.rs")));
  if (!addon || rustChanged > mtime(join(root, addon))) run("the addon, changed since its build (debug)", "npm", ["run", "build:debug"]);
  if (newest(join(root, "ts"), (n) => n.endsWith(".ts")) > mtime(join(root, "dist", "index.js"))) run("dist/, changed since its build", "npm", ["run", "build:ts"]);
  if (failures.length) {
    console.error(`\nFAILED: ${failures.join(", ")}`);
    process.exit(1);
  }
}

// ---------------------------------------------------------------------------
// What the tests need from the machine.

const sourceOf = (f) => readFileSync(join(root, f), "utf8");
const needsPostgres = files.some((f) => /postgres-db\.mjs|supabase-standin\.mjs/.test(sourceOf(f)));
const needsChromium = files.some((f) => /playwright-core/.test(sourceOf(f)));
// The metrics tests parse the exposition with Prometheus's own Python parser.
const needsPromParser = files.some((f) => /prometheus_client/.test(sourceOf(f)));
const hasPromParser = () =>
  ["/usr/bin/python3", "python3"].some((python) => spawnSync(python, ["-c", "import prometheus_client"], { stdio: "ignore" }).status === 0);
const chromiumPath = process.env.BYOLLM_CHROMIUM ?? "/usr/bin/chromium";
const postgresInstalled = () => readdirSync("/usr/lib/postgresql", { withFileTypes: true }).some((d) => existsSync(join("/usr/lib/postgresql", d.name, "bin", "initdb")));
const safely = (check) => {
  try {
    return check();
  } catch {
    return false;
  }
};

const missing = [];
if (needsPostgres && !process.env.BYOLLM_PG_URL && !safely(postgresInstalled)) missing.push("postgresql");
if (needsPromParser && !hasPromParser()) missing.push("python3-prometheus-client");
if (needsChromium && !existsSync(chromiumPath)) {
  if (process.env.BYOLLM_CHROMIUM) {
    console.error(`\nBYOLLM_CHROMIUM is ${chromiumPath}, which does not exist.`);
    failures.push("chromium (BYOLLM_CHROMIUM)");
  } else {
    missing.push("chromium");
  }
}
if (missing.length) {
  // apt-get as root, else through sudo when it needs no password.
  const asRoot = process.getuid?.() === 0;
  const canInstall = spawnSync("apt-get", ["--version"]).status === 0 && (asRoot || spawnSync("sudo", ["-n", "true"]).status === 0);
  const apt = (args) => (asRoot ? ["apt-get", args] : ["sudo", ["-n", "apt-get", ...args]]);
  const aptEnv = { env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" } };
  if (canInstall) {
    run("apt-get update", ...apt(["update", "-qq"]), aptEnv);
    run(`install ${missing.join(" and ")}`, ...apt(["install", "-y", "-qq", ...missing]), aptEnv);
  } else {
    console.error(
      `\nThe tests need ${missing.join(" and ")}, which this machine lacks: install ${missing.length > 1 ? "them" : "it"} ` +
        `(Debian: apt-get install ${missing.join(" ")})${missing.includes("chromium") ? ", or point BYOLLM_CHROMIUM at a Chromium" : ""}.`,
    );
    failures.push(`missing ${missing.join(", ")}`);
  }
}
if (needsPostgres && !env.BYOLLM_PG_URL) {
  // This checkout's own server, started once here for every file and Node
  // version; each file makes its own database on it (__test__/postgres-db.mjs).
  console.log(`\n=== PostgreSQL for the store tests: bash scripts/pg-start.sh`);
  const pg = spawnSync("bash", [join(root, "scripts", "pg-start.sh")], { cwd: root, encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
  const url = pg.stdout?.trim().split("\n").at(-1);
  if (pg.status === 0 && url) {
    console.log(url);
    env.BYOLLM_PG_URL = url;
  } else {
    failures.push("PostgreSQL (scripts/pg-start.sh failed)");
  }
}

// ---------------------------------------------------------------------------
// The Rust core. One clippy per feature set the crate is built with (the
// core alone with its tests, the Node binding, the edge's wasm binding), one
// cargo test, and the crypto again on the AVX2 curve backend.

// The host's target triple, named explicitly so cargo test builds into the
// directory `napi build --platform` uses (target/<triple>/debug): the debug
// addon and the tests share their compiled dependencies.
const host = /^host: (\S+)$/m.exec(spawnSync("rustc", ["-vV"], { encoding: "utf8" }).stdout ?? "")?.[1];
const cargoTest = ["test", "--features", "wasm", ...(host ? ["--target", host] : [])];
const rustSteps = [];
if (area?.rust) {
  // Beside the area's JS files, which test the addon already built.
  rustSteps.push(() => spawnStep("cargo test", "cargo", cargoTest));
} else if (!area && !jsOnly && only.length === 0) {
  // rustfmt and clippy are rustup components a minimal toolchain leaves out.
  const hasTool = (tool) => spawnSync("cargo", [tool, "--version"], { stdio: "ignore" }).status === 0;
  const toolsMissing = ["fmt", "clippy"].filter((tool) => !hasTool(tool));
  if (toolsMissing.length > 0) run("rustup component add rustfmt clippy", "rustup", ["component", "add", "rustfmt", "clippy"]);
  run("cargo fmt", "cargo", ["fmt", "--all", "--", "--check"]);
  // The rest runs beside the JS tests (below), one step after another:
  // cargo test first, as the fuzzer's build (hardening-fuzz) waits for its
  // lock on target/debug and then shares what it compiled.
  const step = (label, cmd, cmdArgs, opts) => () => spawnStep(label, cmd, cmdArgs, opts);
  // A check never links, so the SQLite its build script compiles is never
  // used: unoptimised, without debug info. In a target dir of its own, so a
  // check never holds the lock of target/debug, where the builds of cargo
  // test and the fuzzer (hardening-fuzz, meanwhile) keep their build scripts;
  // a check shares nothing with a build anyway.
  const checkOnly = ["--config", 'profile.dev.package."libsqlite3-sys".opt-level=0', "--config", 'profile.dev.package."libsqlite3-sys".debug=false'];
  const checkEnv = { env: { ...process.env, CARGO_TARGET_DIR: join(root, "target", "clippy") } };
  rustSteps.push(
    // The core's tests plus the wasm binding's host-side tests.
    step("cargo test", "cargo", cargoTest),
    step("cargo clippy (core)", "cargo", ["clippy", ...checkOnly, "--all-targets", "--", "-D", "warnings"], checkEnv),
    step("cargo clippy (node binding)", "cargo", ["clippy", ...checkOnly, "--features", "node", "--", "-D", "warnings"], checkEnv),
    // The wasm build picks getrandom's host-supplied source by cfg (as scripts/build-wasm.mjs does);
    // its own target dir keeps these RUSTFLAGS from invalidating the native build's cache.
    step("cargo clippy (wasm binding)", "cargo", ["clippy", "--features", "wasm", "--target", "wasm32-unknown-unknown", "--", "-D", "warnings"], {
      env: {
        ...process.env,
        RUSTFLAGS: [process.env.RUSTFLAGS, '--cfg getrandom_backend="custom"'].filter(Boolean).join(" "),
        CARGO_TARGET_DIR: join(root, "target", "wasm-clippy"),
      },
    }),
    // The core's tests again on curve25519-dalek's AVX2 backend.
    // .cargo/config.toml compiles in the AVX-512 IFMA one, which this
    // machine's CPU selects, while a CPU without AVX-512 IFMA (most Intel
    // desktops, older EPYCs) runs the AVX2 code: this build leaves IFMA out,
    // so that code is what the tests run. (RUSTFLAGS replaces the config's
    // flags; its own target dir keeps caches apart. Every unit test, not the
    // crypto's by name: running them costs seconds, the build is the cost.)
    step("cargo test (AVX2 curve backend)", "cargo", ["test", "--lib", "--profile", "avx2"], {
      env: {
        ...process.env,
        RUSTFLAGS: [process.env.RUSTFLAGS, '--cfg curve25519_dalek_backend="simd"'].filter(Boolean).join(" "),
        CARGO_TARGET_DIR: join(root, "target", "avx2"),
      },
    }),
  );
}

// ---------------------------------------------------------------------------
// Which files run on which Node.
//
// Every file runs on Node 22. On Node 24 and 20 the PORTABLE files run: what
// they exercise is what changes with the Node version (the addon's loading,
// N-API values, web Request/Response and streams, node:http, fs and the
// thread pool, V8's string limits), through the public API. The other files
// reach the same N-API calls; their subject is the Rust core's rules, the
// SQL, a build, Chromium or the reference's behaviour, which the Node version
// does not change (scripts/runtime-matrix.mjs, in runtimes.test.mjs, also
// runs a full job on Node 20, 22 and 24, Bun and Deno).
const PORTABLE = new Map([
  ["api.test.mjs", "the app API end to end: enqueue, a daemon's whole cycle, delivery's timers"],
  ["api-vectors.test.mjs", "the API's refusals and texts against the reference's recorded answers"],
  ["crypto.test.mjs", "the binding's crypto: buffers, strings and errors across N-API"],
  ["rules.test.mjs", "the native rules on JSON values from this V8"],
  ["store-native.test.mjs", "MemoryStore's whole contract"],
  ["durable-store.test.mjs", "MemoryStore on a file: paths, SQLite through the addon, a restart"],
  ["store-lazy-envelope.test.mjs", "records with an accessor: property order, freezing, JSON"],
  ["store-large-answers.test.mjs", "answers larger than one V8 string may hold"],
  ["seal-checked.test.mjs", "work on Node's thread pool"],
  ["large-fetch.test.mjs", "a large answer's text from the core through Response"],
  ["fetch-stored.test.mjs", "a large payload's at-rest seal made later"],
  ["wasi.test.mjs", "which binary this Node loads, and the fallback"],
  ["conformance.test.mjs", "the conformance kit through createFetchHandler and ./next (Node 24: the reference needs 22.14)"],
  ["handlers.test.mjs", "the recorded HTTP session through createFetchHandler (Node 24)"],
  ["malformed-http.test.mjs", "bad requests through this Node's HTTP parser (Node 24)"],
]);

// Files that import the reference packages need Node >= 22.14; the rest run on 20 too.
const usesReference = (f) => /from\s+["']@byollm\/|import\(\s*["']@byollm\//.test(sourceOf(f));

/** The files of `list` that run on another Node than 22, saying why the others do not. */
function alsoOn(label, list, { node20 = false } = {}) {
  if (only.length) return node20 ? list.filter((f) => !usesReference(f)) : list;
  const kept = list.filter((f) => PORTABLE.has(baseName(f)) && !(node20 && usesReference(f)));
  const left = list.filter((f) => !kept.includes(f)).map(baseName);
  if (left.length) {
    console.log(
      `(${label}: ${kept.length} portable files (PORTABLE in scripts/test.mjs); ${left.length} run on Node 22 only, ` +
        `their subject (the core's rules, SQL, builds, Chromium, the reference's behaviour) not changing with the Node version` +
        `${node20 ? " or their import of the reference, which needs Node >= 22.14" : ""}: ${left.join(", ")})`,
    );
  }
  return kept;
}

// ---------------------------------------------------------------------------
// The JS runs: `node --test` per Node version (its summary lines close each
// one), several at once, each output printed whole when it ends.

const timesDir = join(root, "target", "test-times");
rmSync(timesDir, { recursive: true, force: true });
mkdirSync(timesDir, { recursive: true });
const mainReporter = process.stdout.isTTY ? "spec" : "tap";

/** A step run beside others: its output is printed whole when it ends. */
function spawnStep(label, cmd, cmdArgs, opts = {}) {
  console.log(`\n--- started: ${label}`);
  const t0 = Date.now();
  return new Promise((done) => {
    const child = spawn(cmd, cmdArgs, { cwd: root, ...opts, stdio: ["ignore", "pipe", "pipe"] });
    const out = [];
    child.stdout.on("data", (chunk) => out.push(chunk));
    child.stderr.on("data", (chunk) => out.push(chunk));
    const end = (code, signal) => {
      const ms = Date.now() - t0;
      timings.push([label, ms]);
      const shown = cmdArgs.map((a) => a.replace(`${root}/`, ""));
      console.log(`\n=== ${label}: ${cmd.startsWith(root) ? relative(root, cmd) : cmd} ${shown.join(" ")}`);
      process.stdout.write(Buffer.concat(out));
      console.log(`=== ${label}: ${code === 0 ? "passed" : `FAILED (${signal ?? `exit ${code}`})`} in ${seconds(ms)}`);
      if (code !== 0) failures.push(label);
      done();
    };
    child.on("error", (error) => {
      out.push(Buffer.from(`${error.message}\n`));
      end(-1, null);
    });
    child.on("close", end);
  });
}

/** One `node --test` run of `list` on `bin`. */
function testRun(label, bin, list, { concurrency = jobs, extraEnv = {} } = {}) {
  const timesFile = join(timesDir, `${label.replace(/[^a-z0-9.]+/gi, "-")}.jsonl`);
  const cmdArgs = [
    "--test",
    `--test-concurrency=${concurrency}`,
    `--test-reporter=${mainReporter}`,
    "--test-reporter-destination=stdout",
    `--test-reporter=${join(root, "scripts", "test-times.mjs")}`,
    `--test-reporter-destination=${timesFile}`,
    ...list,
  ];
  return spawnStep(`${label} (${list.length} files, ${concurrency} at once)`, bin, cmdArgs, { env: { ...env, ...extraEnv } });
}

/** Steps in order, one after the other. */
const chain = async (...steps) => {
  for (const step of steps) await step();
};
/** Two of the runs at a time, in the order given: each lane takes the next when its run ends. */
async function twoAtATime(runs) {
  const queue = [...runs];
  const lane = async () => {
    for (let next = queue.shift(); next !== undefined; next = queue.shift()) await next();
  };
  await Promise.all([lane(), lane()]);
}

// The Node 22 run and the Rust steps (one unit: they take cargo's locks in
// turn) first, then the shorter runs, each on whichever lane is free first.
const lanes = [];
if (files.length) {
  const v22 = versionOf(node22);
  lanes.push(() => testRun(`node ${v22}`, node22, files));
  if (rustSteps.length) lanes.push(() => chain(...rustSteps));
  if (!area) {
    const others = [];
    if (existsSync(node24)) {
      const v24 = versionOf(node24);
      const on24 = alsoOn(`node ${v24}`, files);
      if (on24.length) others.push(() => testRun(`node ${v24}`, node24, on24, { concurrency: 2 }));
    } else {
      console.error(`\nnode_modules/node24 is missing (run npm ci): the Node 24 run cannot happen`);
      failures.push("node 24 (not installed)");
    }
    const v20 = versionOf(nodeSystem);
    if (v20 !== v22) {
      const on20 = alsoOn(`node ${v20}`, files, { node20: true });
      if (on20.length) others.push(() => testRun(`node ${v20}`, nodeSystem, on20, { concurrency: 2 }));
    } else {
      console.log(`(the machine's node is ${v20}, the same as node@22: no second run)`);
    }
    // The WebAssembly fallback (wasm32-wasip1-threads, scripts/build-wasi.mjs)
    // on all three Node versions: the same public API through
    // NAPI_RS_FORCE_WASI=1, over the files that drive all of it from outside
    // (the conformance kit through createFetchHandler and the Next.js mount,
    // the real daemon against the example site, Chromium on that site).
    // wasi.test.mjs first proves the switch took. The conformance file loads
    // the reference here on Node 20 too: the fallback's Node 20 is what it
    // certifies.
    const WASI_PASS = ["wasi.test.mjs", "conformance.test.mjs", "site-real-daemon.test.mjs", "browser.test.mjs"];
    const wasiFiles = files.filter((f) => WASI_PASS.includes(baseName(f))).sort((a, b) => WASI_PASS.indexOf(baseName(a)) - WASI_PASS.indexOf(baseName(b)));
    if (wasiFiles.length) {
      for (const bin of [node22, node24, nodeSystem]) {
        if (!existsSync(bin) || (bin === nodeSystem && versionOf(bin) === v22)) continue;
        others.push(() => testRun(`WebAssembly fallback, node ${versionOf(bin)}`, bin, wasiFiles, { concurrency: 2, extraEnv: { NAPI_RS_FORCE_WASI: "1" } }));
      }
    }
    lanes.push(...others);
  }
}
await twoAtATime(lanes);

// ---------------------------------------------------------------------------
// What took the time: each step, and the slowest files.

const fileTimes = new Map();
for (const name of existsSync(timesDir) ? readdirSync(timesDir) : []) {
  if (!name.startsWith("node-v22")) continue;
  for (const line of readFileSync(join(timesDir, name), "utf8").split("\n").filter(Boolean)) {
    const { file, ms } = JSON.parse(line);
    fileTimes.set(baseName(file), ms);
  }
}
if (fileTimes.size) {
  const slowest = [...fileTimes].sort(([, a], [, b]) => b - a).slice(0, 12);
  const sum = [...fileTimes.values()].reduce((a, b) => a + b, 0);
  console.log(`\nNode 22, the slowest files (each file's own time; ${fileTimes.size} files, ${seconds(sum)} in all):`);
  for (const [file, ms] of slowest) console.log(`  ${seconds(ms).padStart(6)}  ${file}`);
}
console.log(`\nsteps:`);
for (const [label, ms] of timings) console.log(`  ${seconds(ms).padStart(6)}  ${label}`);
console.log(`  ${seconds(Date.now() - started).padStart(6)}  in all (wall)`);

if (failures.length) {
  console.error(`\nFAILED: ${failures.join(", ")}`);
  process.exit(1);
}
console.log("\nall test steps passed");

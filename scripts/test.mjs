#!/usr/bin/env node
// Runs every test of the package: the Rust core (fmt, clippy, cargo test), then
// the JS tests under Node 22 (the reference packages need >= 22.14), then
// under Node 24 and the machine's own Node (20 here), which skip the few slow
// files listed in NODE22_ONLY: the package supports all three. Node 22 and 24
// come from npm (devDependencies `node` and `node24`).
//
//   node scripts/test.mjs            everything
//   node scripts/test.mjs --js-only  skip the Rust steps
//   node scripts/test.mjs FILE...    only these JS test files (Node 22, 24 and 20)
//
// It brings up what the chosen files need first: PostgreSQL, this checkout's
// own server (scripts/pg-start.sh; BYOLLM_PG_URL names another), and
// Chromium (/usr/bin/chromium, or BYOLLM_CHROMIUM), each installed from
// Debian's packages when missing (as root, or through sudo without a password).
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const args = process.argv.slice(2);
const jsOnly = args.includes("--js-only");
const only = args.filter((a) => !a.startsWith("--"));

const failures = [];
function run(label, cmd, cmdArgs, opts = {}) {
  console.log(`\n=== ${label}: ${cmd} ${cmdArgs.join(" ")}`);
  const r = spawnSync(cmd, cmdArgs, { cwd: root, stdio: "inherit", ...opts });
  if (r.status !== 0) failures.push(label);
  return r.status === 0;
}

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

const testDir = join(root, "__test__");
const files = only.length
  ? only
  : readdirSync(testDir)
      .filter((f) => f.endsWith(".test.mjs"))
      .sort()
      .map((f) => join("__test__", f));
const env = { ...process.env, BYOLLM_TEST: "1" };

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
  // This checkout's own server, started once here for every file and Node version.
  console.log(`\n=== PostgreSQL for the store tests: bash scripts/pg-start.sh`);
  const started = spawnSync("bash", [join(root, "scripts", "pg-start.sh")], { cwd: root, encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
  const url = started.stdout?.trim().split("\n").at(-1);
  if (started.status === 0 && url) {
    console.log(url);
    env.BYOLLM_PG_URL = url;
  } else {
    failures.push("PostgreSQL (scripts/pg-start.sh failed)");
  }
}

if (!jsOnly && only.length === 0) {
  // rustfmt and clippy are rustup components a minimal toolchain leaves out.
  const hasTool = (tool) => spawnSync("cargo", [tool, "--version"], { stdio: "ignore" }).status === 0;
  const toolsMissing = ["fmt", "clippy"].filter((tool) => !hasTool(tool));
  if (toolsMissing.length > 0) run("rustup component add rustfmt clippy", "rustup", ["component", "add", "rustfmt", "clippy"]);
  run("cargo fmt", "cargo", ["fmt", "--all", "--", "--check"]);
  run("cargo clippy (core)", "cargo", ["clippy", "--all-targets", "--", "-D", "warnings"]);
  run("cargo clippy (node binding)", "cargo", ["clippy", "--features", "node", "--", "-D", "warnings"]);
  // The wasm build picks getrandom's host-supplied source by cfg (as scripts/build-wasm.mjs does);
  // its own target dir keeps these RUSTFLAGS from invalidating the native build's cache.
  run("cargo clippy (wasm binding)", "cargo", ["clippy", "--features", "wasm", "--target", "wasm32-unknown-unknown", "--", "-D", "warnings"], {
    env: {
      ...process.env,
      RUSTFLAGS: [process.env.RUSTFLAGS, '--cfg getrandom_backend="custom"'].filter(Boolean).join(" "),
      CARGO_TARGET_DIR: join(root, "target", "wasm-clippy"),
    },
  });
  // The core's tests plus the wasm binding's host-side tests.
  run("cargo test", "cargo", ["test", "--features", "wasm"]);
  // The crypto again on curve25519-dalek's AVX2 backend. .cargo/config.toml
  // compiles in the AVX-512 IFMA one, which this machine's CPU selects, while
  // a CPU without AVX-512 IFMA (most Intel desktops, older EPYCs) runs the
  // AVX2 code: this build leaves IFMA out, so that code is what the tests run.
  // (RUSTFLAGS replaces the config's flags; its own target dir keeps caches apart.)
  run("cargo test (AVX2 curve backend)", "cargo", ["test", "--lib", "--", "envelope", "keys", "signing", "site_keys", "direct"], {
    env: {
      ...process.env,
      RUSTFLAGS: [process.env.RUSTFLAGS, '--cfg curve25519_dalek_backend="simd"'].filter(Boolean).join(" "),
      CARGO_TARGET_DIR: join(root, "target", "avx2"),
    },
  });
}

// Files that import the reference packages need Node >= 22.14; the rest run on both.
const usesReference = (f) => /from\s+["']@byollm\/|import\(\s*["']@byollm\//.test(sourceOf(f));

// Files whose subject does not change with the Node version run on Node 22
// only: they check the Rust core (a build, a fuzzer, seeded input against the
// reference's rules), a SQLite file across SIGKILLs, or a page in Chromium,
// through the same N-API calls every other file makes on 24 and 20. Each costs
// tens of seconds to minutes; running them three times would take the suite
// past its time budget without testing anything new.
const NODE22_ONLY = new Map([
  ["hardening-panic.test.mjs", "builds an addon with a panicking export; catch_unwind is Rust's, not Node's"],
  ["hardening-fuzz.test.mjs", "fuzzes the Rust core in a Rust binary"],
  ["differential.test.mjs", "seeded inputs through ours and the reference's rules"],
  ["rules-parity.test.mjs", "the core's rules against the reference's"],
  ["durable-crash.test.mjs", "SIGKILL loops over the SQLite file"],
  ["load.test.mjs", "a load run of the in-memory store"],
  ["metrics-load.test.mjs", "10,000 jobs through 4 app processes on PostgreSQL; its subject is the SQL counts"],
  ["browser.test.mjs", "Chromium drives the example site"],
  ["browser-restart.test.mjs", "Chromium drives the example site across a restart"],
  ["edge-browser.test.mjs", "the edge .wasm inside Chromium"],
]);
const baseName = (f) => f.split("/").pop();
function alsoOn(label, list) {
  const skipped = list.filter((f) => NODE22_ONLY.has(baseName(f)));
  for (const f of skipped) console.log(`(${label}: ${baseName(f)} runs on Node 22 only: ${NODE22_ONLY.get(baseName(f))})`);
  return list.filter((f) => !NODE22_ONLY.has(baseName(f)));
}

if (files.length) {
  const v22 = spawnSync(node22, ["--version"], { encoding: "utf8" }).stdout.trim();
  run(`node ${v22} --test`, node22, ["--test", "--test-concurrency=1", ...files], { env });
  // Every file again on Node 24: the reference packages run there too.
  if (existsSync(node24)) {
    const v24 = spawnSync(node24, ["--version"], { encoding: "utf8" }).stdout.trim();
    const on24 = only.length ? files : alsoOn(`node ${v24}`, files);
    if (on24.length) run(`node ${v24} --test`, node24, ["--test", "--test-concurrency=1", ...on24], { env });
  } else {
    console.error(`\nnode_modules/node24 is missing (run npm ci): the Node 24 run cannot happen`);
    failures.push("node 24 (not installed)");
  }
  const v20 = spawnSync(nodeSystem, ["--version"], { encoding: "utf8" }).stdout.trim();
  const portable = (only.length ? files : alsoOn(`node ${v20}`, files)).filter((f) => !usesReference(f));
  if (v20 !== v22 && portable.length) {
    run(`node ${v20} --test`, nodeSystem, ["--test", "--test-concurrency=1", ...portable], { env });
  } else if (v20 === v22) {
    console.log(`(the machine's node is ${v20}, the same as node@22: no second run)`);
  }
}

if (failures.length) {
  console.error(`\nFAILED: ${failures.join(", ")}`);
  process.exit(1);
}
console.log("\nall test steps passed");

// The edge WebAssembly module (the byollm-server-native-edge package, edge/), proven where it is meant to run: Deno WITHOUT
// --allow-ffi. Node 22 makes randomized cases with the reference
// (@byollm/protocol), Deno checks them and the golden vectors with the edge
// module (__test__/edge-deno-check.mjs) and writes its own sealed envelopes,
// signatures and keys back, and Node 22 checks those with the reference.
//
// Deno comes from the npm registry (scripts/runtime-matrix.mjs installs it
// once into a temp dir). The .wasm is built by `npm run build:wasm`; if it is
// missing, this test builds it first.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { gunzipSync } from "node:zlib";
import * as protocol from "@byollm/protocol";
import { installRuntimes } from "../scripts/runtime-matrix.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const vectors = join(root, "tests", "vectors");
const fixture = JSON.parse(readFileSync(join(vectors, "keys.fixture.json"), "utf8"));

// Seeded, so a failure names a case that can be replayed (seed printed below).
const SEED = Number(process.env.BYOLLM_EDGE_SEED ?? 20260101);
function mulberry32(a) {
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const rand = mulberry32(SEED);
const pick = (xs) => xs[Math.floor(rand() * xs.length)];
const ALPHABET = ["a", "Z", "0", " ", "\n", '"', "\\", "é", "—", "你", "🙂", "\u2028", "\u0000", "{", "}"];
const randomText = (max) => Array.from({ length: Math.floor(rand() * max) }, () => pick(ALPHABET)).join("");
const sha256 = (text) => createHash("sha256").update(text, "utf8").digest("hex");

function ensureWasm() {
  if (existsSync(join(root, "edge", "wasm-inline.js")) && existsSync(join(root, "edge", "byollm_edge.wasm"))) return;
  console.log("# edge: the .wasm is not built yet; running scripts/build-wasm.mjs");
  const r = spawnSync(process.execPath, [join(root, "scripts", "build-wasm.mjs")], { cwd: root, stdio: "inherit" });
  assert.equal(r.status, 0, "scripts/build-wasm.mjs failed");
}

test("edge module under Deno without --allow-ffi: golden vectors and randomized interop with @byollm/protocol", async () => {
  ensureWasm();
  const { deno } = installRuntimes({ only: ["deno"] });
  assert.ok(deno && existsSync(deno), "deno binary installed from npm");
  console.log(`# edge: seed ${SEED}`);

  const work = mkdtempSync(join(tmpdir(), "byollm-edge-"));
  try {
    const now = 1767225600000;
    const parties = [fixture.site, fixture.device, protocol.generateKeys(now), protocol.generateKeys(now)];
    const cases = { now, refSealed: [], refSigned: [], toSeal: [], toSign: [] };
    for (let i = 0; i < 24; i++) {
      const sender = pick(parties);
      const recipient = pick(parties);
      const plaintext = randomText(i === 0 ? 0 : 400);
      const context = {
        jobId: `job-${i}-${Math.floor(rand() * 1e9)}`,
        senderKeyId: protocol.keyId(sender.identityPublic),
        recipientKeyId: protocol.keyId(recipient.identityPublic),
        deadlineAt: now + Math.floor(rand() * 86_400_000) + 1,
        direction: pick(["payload", "result"]),
      };
      const envelope = await protocol.seal({ plaintext, senderKeys: sender, recipientEncryptionPublic: recipient.encryptionPublic, context });
      const { deadlineAt: _d, ...expected } = context;
      // Flip one character in the middle of the ciphertext (still base64url).
      const at = envelope.ciphertext.length >> 1;
      const flipped = envelope.ciphertext[at] === "A" ? "B" : "A";
      cases.refSealed.push({
        i,
        plaintext,
        open: { envelope, recipientKeys: recipient, senderIdentityPublic: sender.identityPublic, expected },
        tamperedCiphertext: envelope.ciphertext.slice(0, at) + flipped + envelope.ciphertext.slice(at + 1),
      });
      cases.toSeal.push({ i, plaintext: randomText(300), senderKeys: sender, recipientKeys: recipient, context });

      const request = {
        endpoint: pick(["claim", "fetch", "heartbeat", "result", "release"]),
        runnerId: `runner_${Math.floor(rand() * 1e12)}`,
        issuedAt: now + Math.floor(rand() * 1e6),
        body: JSON.stringify({ protocolVersion: "2", note: randomText(120) }),
      };
      const signature = protocol.signRequest(sender, request);
      cases.refSigned.push({
        i,
        keys: sender,
        request,
        canonical: protocol.canonicalRequest(request).toString("utf8"),
        verify: { identityPublic: sender.identityPublic, endpoint: request.endpoint, body: request.body, signature, now: request.issuedAt + 5_000 },
      });
      cases.toSign.push({ i, request });
    }
    const casesPath = join(work, "cases.json");
    const outPath = join(work, "out.json");
    writeFileSync(casesPath, JSON.stringify(cases));

    const args = [
      "run",
      "--no-prompt",
      `--allow-read=${vectors},${work}`,
      `--allow-write=${work}`,
      join(root, "__test__", "edge-deno-check.mjs"),
      vectors,
      casesPath,
      outPath,
    ];
    assert.ok(!args.some((a) => a.startsWith("--allow-ffi") || a === "-A" || a === "--allow-all"));
    const r = spawnSync(deno, args, { cwd: root, encoding: "utf8", env: { ...process.env, NO_COLOR: "1" } });
    assert.equal(r.status, 0, `deno failed:\n${r.stdout}\n${r.stderr}`);
    const out = JSON.parse(readFileSync(outPath, "utf8"));

    // 1. Everything Deno checked.
    const failed = out.results.filter((x) => !x.ok);
    assert.deepEqual(failed, [], `${failed.length} edge checks failed in Deno`);
    const count = (prefix) => out.results.filter((x) => x.name.startsWith(prefix)).length;
    assert.ok(count("envelopes/tampered/") >= 40, "every tampered envelope vector was checked");
    assert.ok(count("verifyRequest/") >= 18 && count("signatures/") >= 4 && count("fingerprints/") >= 4);
    assert.equal(count("interop/reference sealed"), 24);
    console.log(`# edge: all ${out.results.length} checks passed in Deno`);

    // 2. What the edge module made, checked by the reference.
    const named = (n) => fixture[n];
    let opened = 0;
    for (const e of out.edgeSealed) {
      const recipientKeys = e.recipientKeys ?? named(e.recipient);
      const senderIdentityPublic = e.senderIdentityPublic ?? named(e.sender).identityPublic;
      const res = await protocol.open({ envelope: e.envelope, recipientKeys, senderIdentityPublic, expected: e.expected });
      assert.equal(res.ok, true, `reference could not open the edge envelope ${e.name}: ${res.reason}`);
      if (e.plaintext !== undefined) assert.equal(res.plaintext, e.plaintext, e.name);
      if (e.plaintextSha256 !== undefined) assert.equal(sha256(res.plaintext), e.plaintextSha256, e.name);
      if (e.plaintextUtf16Hex !== undefined) {
        assert.equal(Buffer.from(res.plaintext, "utf16le").toString("hex"), e.plaintextUtf16Hex, `${e.name}: lone surrogate kept`);
      }
      opened++;
    }
    assert.equal(opened, out.edgeSealed.length);
    assert.ok(opened >= 24 + 6, `reference opened ${opened} edge envelopes`);

    for (const s of out.edgeSigned) {
      const verdict = protocol.verifyRequest({
        identityPublic: s.identityPublic,
        endpoint: s.request.endpoint,
        body: s.request.body,
        signature: s.signature,
        now: s.request.issuedAt,
      });
      assert.equal(verdict, null, `reference refused edge signature #${s.i}`);
      const other = protocol.verifyRequest({
        identityPublic: s.identityPublic,
        endpoint: s.request.endpoint,
        body: s.request.body + " ",
        signature: s.signature,
        now: s.request.issuedAt,
      });
      assert.equal(other, "bad-signature");
    }
    assert.equal(out.edgeSigned.length, 24);

    for (const k of out.edgeKeys) {
      assert.deepEqual(Object.keys(k), ["version", "identityPublic", "identityPrivate", "encryptionPublic", "encryptionPrivate", "encryptionSig", "createdAt"]);
      assert.equal(protocol.verifyPublicIdentity(protocol.publicIdentityOf(k)), true, "edge-made keys verify with the reference");
      // The reference can sign with edge-made private keys (PKCS#8 interop).
      const sig = protocol.signRequest(k, { endpoint: "claim", runnerId: "r", issuedAt: now, body: "{}" });
      assert.equal(protocol.verifyRequest({ identityPublic: k.identityPublic, endpoint: "claim", body: "{}", signature: sig, now }), null);
    }
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
});

test("edge module in Node too (no Deno): the embedded .wasm loads and errors are plain Errors", async () => {
  ensureWasm();
  const edge = await import("../edge/index.js");
  assert.equal(edge.isReady(), true);
  const keys = edge.generateKeys(1767225600000);
  assert.equal(protocol.verifyPublicIdentity(edge.publicIdentityOf(keys)), true);
  assert.throws(() => edge.publicIdentityOf({ version: 2 }), (e) => e instanceof Error && /not a valid StoredKeys/.test(e.message));
  assert.equal(edge.verifyPublicIdentity(undefined), false);
  assert.equal(edge.verifyPublicIdentity({ identity: 5 }), false);
  await assert.rejects(
    edge.seal({ plaintext: "x", senderKeys: keys, recipientEncryptionPublic: "short", context: {} }),
    (e) => e instanceof Error && /context\.jobId|32 bytes/.test(e.message),
  );
  const size = statSync(join(root, "edge", "byollm_edge.wasm")).size;
  assert.ok(size <= 300 * 1024, `edge/byollm_edge.wasm is ${size} bytes, over the 300 KB budget`);
});

test("edge module: an envelope past 256 KiB opens (the native build checks its signature on a second thread; WebAssembly has none)", async () => {
  ensureWasm();
  const edge = await import("../edge/index.js");
  const site = protocol.generateKeys(Date.now());
  const device = protocol.generateKeys(Date.now());
  const plaintext = "é and more ".repeat(40_000);
  const context = {
    jobId: "6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b",
    senderKeyId: protocol.keyId(device.identityPublic),
    recipientKeyId: protocol.keyId(site.identityPublic),
    deadlineAt: Date.now() + 3_600_000,
    direction: "result",
  };
  const envelope = await protocol.seal({ plaintext, senderKeys: device, recipientEncryptionPublic: site.encryptionPublic, context });
  const { deadlineAt: _deadline, ...expected } = context;
  const opened = await edge.open({ envelope, recipientKeys: site, senderIdentityPublic: device.identityPublic, expected });
  assert.equal(opened.ok, true);
  assert.equal(opened.plaintext, plaintext);
});

test("edge/wasm-inline.js is edge/byollm_edge.wasm gzipped, and unpacks without node:zlib too", async () => {
  ensureWasm();
  // One module, two forms (the package root embeds it, /workers and /manual
  // load the file): the embedded one must be exactly the file, compressed.
  const wasm = readFileSync(join(root, "edge", "byollm_edge.wasm"));
  const { default: embedded } = await import("../edge/wasm-inline.js");
  const packed = Buffer.from(embedded, "base64");
  assert.equal(packed.subarray(0, 2).toString("hex"), "1f8b", "the embedded module is not gzip");
  assert.ok(gunzipSync(packed).equals(wasm), "the embedded module differs from edge/byollm_edge.wasm");
  assert.ok(packed.length < wasm.length * 0.6, `the embedded module is ${packed.length} bytes for a ${wasm.length}-byte .wasm`);
  // Deno, Supabase and browsers have no process.getBuiltinModule: they take
  // the DecompressionStream path, exercised here in a fresh Node process.
  const script = `let streams = 0;
const Native = globalThis.DecompressionStream;
globalThis.DecompressionStream = class extends Native { constructor(f) { super(f); streams++; } };
process.getBuiltinModule = undefined;
const edge = await import(${JSON.stringify(new URL("../edge/index.js", import.meta.url).href)});
console.log(JSON.stringify([streams, edge.keyId(${JSON.stringify(fixture.site.identityPublic)})]));`;
  const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8" });
  assert.equal(r.status, 0, r.stderr);
  assert.deepEqual(JSON.parse(r.stdout.trim().split("\n").pop()), [1, "BYOLLM-EA1K-Z4XJ-89JV-57J7-CG5C-KY87"]);
});

test("edge module: a trap in the core becomes a plain Error and a fresh instance takes over", async () => {
  ensureWasm();
  const { call } = await import("../edge/core.js");
  const edge = await import("../edge/index.js");
  assert.throws(() => call("__panicForTests", []), (e) => e instanceof Error && !(e instanceof WebAssembly.RuntimeError) && /internal error/.test(e.message));
  // The replacement instance works, with its own memory.
  assert.equal(edge.keyId(fixture.site.identityPublic), "BYOLLM-EA1K-Z4XJ-89JV-57J7-CG5C-KY87");
  const keys = edge.generateKeys(1767225600000);
  assert.equal(edge.verifyPublicIdentity(edge.publicIdentityOf(keys)), true);
  assert.throws(() => call("nope", []), /unknown operation/);
});

test("edge/workers.js: loads from a precompiled WebAssembly.Module, as Wrangler hands a .wasm import over", () => {
  ensureWasm();
  // A Node module hook stands in for Wrangler: it turns `import x from "*.wasm"`
  // into a default export of a compiled WebAssembly.Module.
  const work = mkdtempSync(join(tmpdir(), "byollm-workers-"));
  try {
    writeFileSync(
      join(work, "hooks.mjs"),
      `export async function load(url, context, next) {
  if (!url.endsWith(".wasm")) return next(url, context);
  return { format: "module", shortCircuit: true,
    source: "import { readFileSync } from 'node:fs'; export default new WebAssembly.Module(readFileSync(new URL(" + JSON.stringify(url) + ")));" };
}\n`,
    );
    writeFileSync(join(work, "register.mjs"), `import { register } from "node:module";\nregister("./hooks.mjs", import.meta.url);\n`);
    const script = `const edge = await import(${JSON.stringify(new URL("../edge/workers.js", import.meta.url).href)});
const keys = edge.generateKeys(1767225600000);
console.log(JSON.stringify([edge.isReady(), edge.verifyPublicIdentity(edge.publicIdentityOf(keys)), edge.keyId(${JSON.stringify(fixture.site.identityPublic)})]));`;
    const r = spawnSync(process.execPath, ["--import", join(work, "register.mjs"), "--input-type=module", "-e", script], { encoding: "utf8" });
    assert.equal(r.status, 0, r.stderr);
    assert.deepEqual(JSON.parse(r.stdout.trim().split("\n").pop()), [true, true, "BYOLLM-EA1K-Z4XJ-89JV-57J7-CG5C-KY87"]);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
});

test("the edge package (edge/package.json) carries the built module (git ignores it, npm must not)", () => {
  ensureWasm();
  const edgeDir = join(root, "edge");
  const r = spawnSync("npm", ["pack", "--dry-run", "--ignore-scripts", "--json"], { cwd: edgeDir, encoding: "utf8" });
  assert.equal(r.status, 0, r.stderr);
  const files = JSON.parse(r.stdout)[0].files.map((f) => f.path);
  for (const f of ["index.js", "core.js", "api.js", "workers.js", "manual.js", "index.d.ts", "byollm_edge.wasm", "wasm-inline.js"]) {
    assert.ok(files.includes(f), `${f} is not in the edge package`);
  }
  const pkg = JSON.parse(readFileSync(join(edgeDir, "package.json"), "utf8"));
  const main = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
  assert.equal(pkg.name, "byollm-server-native-edge");
  assert.equal(pkg.version, main.version, "the edge package is released at the main package's version");
  assert.equal(pkg.exports["."].import, "./index.js");
  assert.equal(pkg.exports["./workers"].import, "./workers.js");
  assert.equal(pkg.exports["./manual"].import, "./manual.js");
  // And the main package no longer ships a second copy of the WebAssembly.
  assert.equal(Object.keys(main.exports).some((k) => k.startsWith("./edge")), false);
  assert.equal(main.files.includes("edge"), false);
});

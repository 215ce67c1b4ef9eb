// The durable store (`new MemoryStore({ path })`): the store contract on it,
// and a restart: a site enqueues, pairs a daemon, has jobs claimed and
// completed, closes; a new site on the same file finds the jobs, results,
// pairing and runner, and the paired daemon's signed requests still work.
// One process owns the file: a second one is refused with a clear error.
// Node 22 (the contract suite runs the reference store too elsewhere; here
// only ours).
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { spawnSync } from "node:child_process";
import { MemoryStore } from "../dist/memory.js";
import { storeContract } from "./store-contract.mjs";
import { makeSite, listen, Daemon } from "./hardening-harness.mjs";

const dir = mkdtempSync(join(tmpdir(), "byollm-durable-"));
after(() => rmSync(dir, { recursive: true, force: true }));
let files = 0;
const freshPath = () => join(dir, `store-${(files += 1)}.db`);

storeContract("durable MemoryStore (SQLite file)", () => new MemoryStore({ path: freshPath() }), {
  cleanup: (store) => store.close(),
});

test("a restarted site keeps its jobs, results, pairings and paired runners", { timeout: 60_000 }, async () => {
  const path = freshPath();
  let store = new MemoryStore({ path });
  let site = await makeSite("ours", { store });
  let server = await listen(site.handler);
  const daemon = new Daemon(server.url);
  const runner = await daemon.pair(site.app, "alice");
  const ids = [];
  for (let i = 0; i < 4; i += 1) {
    ids.push((await site.app.enqueue({ kind: "llm.generate", payload: { prompt: `p${i}` }, owner: "alice" })).id);
  }
  const claimed = await daemon.claim(2);
  assert.equal(claimed.status, 200);
  const [done, held] = claimed.body.jobs;
  const fetched = await daemon.fetchJob(done);
  assert.equal(fetched.status, 200);
  assert.match(JSON.stringify(daemon.openPayload(done, fetched.body.envelope)), /p0/);
  const answered = await daemon.result(done, { outcome: "ok", text: "kept" });
  assert.equal(answered.status, 200);
  const before = store.allJobs().map((job) => [job.id, job.state]);
  await server.close();
  store.close();
  // A closed store refuses further changes rather than losing them.
  await assert.rejects(async () => store.cancel(ids[3], Date.now()), /closed/);

  // The "restart": a new store on the same file, the same site keys.
  store = new MemoryStore({ path });
  site = await makeSite("ours", { store, siteKeys: site.keys });
  server = await listen(site.handler);
  daemon.url = server.url;
  try {
    assert.deepEqual(
      store.allJobs().map((job) => [job.id, job.state]),
      before,
    );
    const result = await site.app.result(done.id);
    assert.equal(result.state, "ok");
    assert.equal(result.outcome.text, "kept");
    const kept = await store.getRunner(runner.id);
    assert.equal(kept.owner, "alice");
    assert.equal(kept.revokedAt, null);
    assert.deepEqual(kept.device, daemon.identity);
    // The paired daemon authenticates: its held lease is still its own, and it claims the rest.
    const heartbeat = await daemon.heartbeat([{ jobId: held.id, leaseId: held.lease.id }]);
    assert.equal(heartbeat.status, 200, JSON.stringify(heartbeat.body));
    assert.deepEqual(heartbeat.body.lost ?? [], []);
    const more = await daemon.claim(4);
    assert.equal(more.status, 200);
    assert.deepEqual(
      more.body.jobs.map((j) => j.id).sort(),
      ids.filter((id) => id !== done.id && id !== held.id).sort(),
    );
    // A job completed before the restart stays completed once.
    const again = await daemon.result(done, { outcome: "ok", text: "twice" });
    assert.equal(again.status, 200);
    assert.deepEqual(again.body, { accepted: false, duplicate: true, state: "ok" });
    assert.equal((await site.app.result(done.id)).outcome.text, "kept");
    const heldResult = await daemon.result(held, { outcome: "ok", text: "after restart" });
    assert.equal(heldResult.status, 200, JSON.stringify(heldResult.body));
    // A payload is on disk only sealed.
    store.close();
    assert.ok(statSync(path).size > 0);
  } finally {
    await server.close();
    store.close();
  }
});

test("a second process opening the file is refused with a clear error", () => {
  const path = freshPath();
  const store = new MemoryStore({ path });
  try {
    const child = spawnSync(
      process.execPath,
      [
        "--input-type=module",
        "-e",
        `import { MemoryStore } from ${JSON.stringify(new URL("../dist/memory.js", import.meta.url).href)};
         try { new MemoryStore({ path: ${JSON.stringify(path)} }); console.log("opened"); }
         catch (e) { console.log("refused: " + e.message); }`,
      ],
      { encoding: "utf8", timeout: 30_000 },
    );
    assert.match(child.stdout, /refused: .*in use by another process/, child.stderr);
    // The same process is refused too: one store per file.
    assert.throws(() => new MemoryStore({ path }), /in use by another process/);
  } finally {
    store.close();
  }
  // Once closed, the file is free again.
  const reopened = new MemoryStore({ path });
  reopened.close();
});

test("an unreadable file is an error, not a crash", () => {
  const path = freshPath();
  const fs = spawnSync("sh", ["-c", `head -c 8192 /dev/urandom > ${JSON.stringify(path)}`]);
  assert.equal(fs.status, 0);
  assert.throws(
    () => new MemoryStore({ path }),
    (error) => error.message.startsWith(`the file ${path} is not a byollm store (it is not a SQLite database)`),
  );
});

test("another program's SQLite file is refused, named, and left as it was", () => {
  const path = freshPath();
  // Made by node:sqlite of the Node 22 the devDependencies install (Node 20 has none).
  const node22 = fileURLToPath(new URL("../node_modules/node/bin/node", import.meta.url));
  const made = spawnSync(node22, ["--no-warnings", "--input-type=module", "-e", `
    import { DatabaseSync } from "node:sqlite";
    const db = new DatabaseSync(${JSON.stringify(path)});
    db.exec("create table notes (id integer primary key, text text); insert into notes values (1, 'mine'); pragma user_version = 3;");
    db.close();
  `], { encoding: "utf8" });
  assert.equal(made.status, 0, made.stderr);
  const before = readFileSync(path);
  assert.throws(() => new MemoryStore({ path }), (error) => {
    assert.match(error.message, /is not a byollm store/);
    assert.ok(error.message.includes(path), error.message);
    return true;
  });
  assert.deepEqual(readFileSync(path), before);
  assert.equal(existsSync(`${path}-wal`), false);
});

test("the store's file and its WAL are readable by their owner only", { skip: process.platform === "win32" && "no POSIX modes on Windows" }, () => {
  const path = freshPath();
  const store = new MemoryStore({ path });
  try {
    store.createPairing({
      deviceCodeHash: "h", userCode: "C", state: "pending", owner: null, runnerId: null, collected: false,
      label: "l", platform: "linux", daemonVersion: "1", capabilities: [], device: { identity: "i", encryption: "e", encryptionSig: "s" },
      expiresAt: Date.now() + 60_000, createdAt: Date.now(),
    });
    for (const file of [path, `${path}-wal`]) {
      assert.equal(statSync(file).mode & 0o777, 0o600, file);
    }
  } finally {
    store.close();
  }
});

test("a large payload (the thread-pool enqueue) is on disk sealed and opens after a restart", { timeout: 60_000 }, async () => {
  const path = freshPath();
  let store = new MemoryStore({ path });
  let site = await makeSite("ours", { store });
  let server = await listen(site.handler);
  const daemon = new Daemon(server.url);
  await daemon.pair(site.app, "alice");
  const prompt = "large ".repeat(60_000); // 360,000 characters: past the 64 KiB in-line threshold
  const { id } = await site.app.enqueue({ kind: "llm.generate", payload: { prompt }, owner: "alice" });
  await server.close();
  store.close();
  // The plaintext is nowhere in the file.
  const { readFileSync } = await import("node:fs");
  assert.equal(readFileSync(path).includes("large large large"), false);

  store = new MemoryStore({ path });
  site = await makeSite("ours", { store, siteKeys: site.keys });
  server = await listen(site.handler);
  daemon.url = server.url;
  try {
    const claimed = await daemon.claim(1);
    assert.equal(claimed.status, 200);
    assert.deepEqual(claimed.body.jobs.map((j) => j.id), [id]);
    const fetched = await daemon.fetchJob(claimed.body.jobs[0]);
    assert.equal(fetched.status, 200);
    const opened = daemon.openPayload(claimed.body.jobs[0], fetched.body.envelope);
    assert.ok(JSON.stringify(opened).includes(prompt.slice(0, 600)));
  } finally {
    await server.close();
    store.close();
  }
});

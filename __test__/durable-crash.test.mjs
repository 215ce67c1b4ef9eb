// Crash test of the durable store: a site on `MemoryStore({ path })` serves
// HTTP in a child process while 16 simulated daemons claim, fetch and
// complete jobs and the owner enqueues; the child is killed with SIGKILL at a
// random moment, 20 times. After each kill the file passes SQLite's
// `PRAGMA integrity_check`, and after each restart every acknowledged
// enqueue is present, every acknowledged result reads back as it was given,
// no job was accepted as completed twice, and every paired daemon still
// authenticates (a signed heartbeat answers 200).
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { generateSiteKeys } from "../dist/index.js";
import { DatabaseSync } from "node:sqlite";
import { Daemon } from "./hardening-harness.mjs";
import { xorshift32 } from "../scripts/prng.mjs";

const KILLS = 20;
const DAEMONS = 16;
// Acknowledged enqueues and results each round sees before its kill.
const MIN_PER_ROUND = 5;
/** SQLite's `PRAGMA integrity_check` of the store file, opened read-only: "ok" or the problems it lists. */
function integrityCheck(path) {
  const db = new DatabaseSync(path, { readOnly: true });
  try {
    return db.prepare("pragma integrity_check").all().map((row) => row.integrity_check).join("\n");
  } finally {
    db.close();
  }
}

const SERVER = fileURLToPath(new URL("./helpers/durable-server.mjs", import.meta.url));
const dir = mkdtempSync(join(tmpdir(), "byollm-crash-"));
after(() => rmSync(dir, { recursive: true, force: true }));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function start(path, siteKeys) {
  const child = spawn(process.execPath, [SERVER], {
    env: { ...process.env, BYOLLM_DB: path, BYOLLM_SITE_KEYS: JSON.stringify(siteKeys) },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
  let stderr = "";
  child.stderr.on("data", (chunk) => (stderr += chunk));
  const url = new Promise((resolve, reject) => {
    let out = "";
    child.stdout.on("data", (chunk) => {
      out += chunk;
      const m = /LISTENING (\S+)/.exec(out);
      if (m) resolve(m[1]);
    });
    exited.then(() => reject(new Error(`server exited before listening: ${stderr}`)));
  });
  return { child, exited, url, stderr: () => stderr };
}

async function admin(url, call, body) {
  const r = await fetch(`${url}/admin/${call}`, { method: "POST", body: JSON.stringify(body) });
  const json = await r.json();
  if (r.status !== 200) throw new Error(`${call}: ${r.status} ${JSON.stringify(json)}`);
  return json;
}

test("kill -9 under load, 20 times: nothing acknowledged is lost or done twice", { timeout: 170_000 }, async () => {
  const path = join(dir, "crash.db");
  const siteKeys = generateSiteKeys();
  const rand = xorshift32(20261202);
  const enqueued = new Set(); // acknowledged enqueues
  const results = new Map(); // jobId -> text of the acknowledged (accepted) result
  const violations = [];
  let server = start(path, siteKeys);
  // Whatever fails, the server child does not outlive the test.
  after(() => server.child.kill("SIGKILL"));
  let url = await server.url;
  const daemons = [];
  for (let i = 0; i < DAEMONS; i += 1) {
    const daemon = new Daemon(url);
    await daemon.pair({ approvePairing: (args) => admin(url, "approve", args) }, i % 2 ? "alice" : "bob");
    daemons.push(daemon);
  }

  for (let round = 0; round < KILLS; round += 1) {
    let dead = false;
    const enqueuer = async () => {
      for (let n = 0; !dead; n += 1) {
        try {
          const { id } = await admin(url, "enqueue", { owner: n % 2 ? "alice" : "bob", prompt: `round ${round} #${n}` });
          enqueued.add(id);
        } catch {
          if (!dead) await sleep(5);
        }
      }
    };
    const worker = async (daemon, index) => {
      while (!dead) {
        try {
          const claimed = await daemon.claim(2);
          if (claimed.status !== 200) continue;
          if (claimed.body.jobs.length === 0) {
            await sleep(10);
            continue;
          }
          for (const stub of claimed.body.jobs) {
            const fetched = await daemon.fetchJob(stub);
            if (fetched.status !== 200) continue;
            const text = `${stub.id} by ${index}`;
            const answer = await daemon.result(stub, { outcome: "ok", text });
            if (answer.status === 200 && answer.body.accepted === true) {
              if (results.has(stub.id)) violations.push(`${stub.id} accepted twice`);
              results.set(stub.id, text);
            }
          }
        } catch {
          // The server died under us.
        }
      }
    };
    const running = [enqueuer(), enqueuer(), enqueuer(), enqueuer(), ...daemons.map(worker)];
    // The kill lands while work is flowing: first some enqueues and results of
    // this round are acknowledged (however slow a loaded machine is), then a
    // random moment later.
    const [enqueuedBefore, resultsBefore] = [enqueued.size, results.size];
    for (let waited = 0; waited < 30_000 && (enqueued.size < enqueuedBefore + MIN_PER_ROUND || results.size < resultsBefore + MIN_PER_ROUND); waited += 10) {
      await sleep(10);
    }
    await sleep((rand() * 600) | 0);
    server.child.kill("SIGKILL");
    const { signal } = await server.exited;
    dead = true;
    await Promise.all(running);
    assert.equal(signal, "SIGKILL", server.stderr());
    assert.equal(integrityCheck(path), "ok", `after kill ${round + 1}`);

    server = start(path, siteKeys);
    url = await server.url;
    for (const daemon of daemons) daemon.url = url;
    // A job can be claimed and completed before its enqueue's answer
    // reached the owner (killed in between): read the results' jobs too.
    const ids = [...new Set([...enqueued, ...results.keys()])];
    const found = {};
    for (let at = 0; at < ids.length; at += 500) {
      Object.assign(found, await admin(url, "results", { ids: ids.slice(at, at + 500) }));
    }
    const missing = [...enqueued].filter((id) => found[id] === null || found[id] === undefined);
    assert.deepEqual(missing, [], `acknowledged enqueues lost after kill ${round + 1}`);
    for (const [id, text] of results) {
      const now = found[id];
      if (now?.state !== "ok" || now.text !== text) violations.push(`${id}: acknowledged "${text}", reads ${JSON.stringify(now)}`);
    }
    for (const [index, daemon] of daemons.entries()) {
      const beat = await daemon.heartbeat();
      if (beat.status !== 200) violations.push(`daemon ${index} after kill ${round + 1}: ${beat.status} ${JSON.stringify(beat.body)}`);
    }
    assert.deepEqual(violations, []);
  }
  server.child.kill("SIGKILL");
  await server.exited;
  console.log(`${KILLS} kills: ${enqueued.size} acknowledged enqueues, ${results.size} acknowledged results, all kept`);
  assert.ok(enqueued.size >= KILLS * MIN_PER_ROUND, `too little load: ${enqueued.size} enqueues`);
  assert.ok(results.size >= KILLS * MIN_PER_ROUND, `too little load: ${results.size} results`);
});

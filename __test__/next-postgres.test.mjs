// The README's recipe, run as a user runs it: examples/next-postgres (whose
// files the README shows verbatim, see docs-links.test.mjs) with this package
// installed as `@byollm/server`, `npm run migrate` on an empty database, one
// `next build` without secrets, then two `next start` processes on that one
// database. The real daemon byollm@0.1.1 talks to them through a loopback
// proxy that sends its requests to the two processes in turn, as a serverless
// host's instances would get them: it pairs through one, the person approves
// and enqueues on the other, and a job claimed through one is fetched and
// answered through the other.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, request as httpRequest } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { freePort } from "./helpers/net.mjs";
import { installExample, nextBin, run, startNext, stopChild, Browserless } from "./helpers/next-app.mjs";
import { adminUrl, TRUNCATE, testPool } from "./postgres-db.mjs";
import { makeTarget, ours } from "./postgres-target.mjs";
import { certifyAllowingTimingRetries } from "./helpers/certify.mjs";
import { CHECKS, formatReport } from "@byollm/conformance";
import { root } from "./site-harness.mjs";

const daemonBin = join(root, "node_modules", "byollm", "dist", "bin.js");
const [major, minor] = process.versions.node.split(".").map(Number);
// One `next build` is slow on 2 cores: it runs once, under Node 22 (the real daemon needs >= 22.14).
const skip = major < 22 || (major === 22 && minor < 14) ? `built and run under Node >= 22.14 only (this is ${process.version})` : false;
if (skip) console.log(`# skipped: ${skip}`);

const PUBLIC_ORIGIN_SENTENCE = "PUBLIC_ORIGIN must be the absolute http(s) origin people and daemons reach this site at";
const SERVERLESS_WARNING = "MemoryStore without `path` is serving requests on a serverless host";

let work;
let app;
let database;
let databaseUrl;
let keyLine;
let buildOutput;
let migrateOutput;
const servers = [];
const children = [];
let proxy;
let proxyOrigin;
let model;
let home;
/** Which backend (0 or 1) answered each daemon request, by path. */
const routed = [];

before(async () => {
  if (skip) return;
  work = mkdtempSync(join(tmpdir(), "byollm-next-pg-"));
  ({ app, keyLine } = await installExample("next-postgres", work, ["pg", "@next/env"]));

  const admin = adminUrl();
  database = `byollm_next_pg_${process.pid}`;
  const client = new pg.Client({ connectionString: admin });
  await client.connect();
  await client.query(`drop database if exists ${database} with (force)`);
  await client.query(`create database ${database}`);
  await client.end();
  const url = new URL(admin);
  url.pathname = `/${database}`;
  databaseUrl = url.toString();

  // The README's steps: migrate (reading DATABASE_URL from .env.local, as a developer keeps it), build, start.
  writeFileSync(join(app, ".env.local"), `DATABASE_URL=${databaseUrl}\n`);
  const { DATABASE_URL: _unset, ...withoutUrl } = process.env;
  migrateOutput = await run(process.execPath, ["scripts/migrate.mjs"], { cwd: app, env: withoutUrl });
  rmSync(join(app, ".env.local"));
  const base = { ...process.env, NEXT_TELEMETRY_DISABLED: "1", NODE_ENV: "production" };
  delete base.PUBLIC_ORIGIN;
  delete base.DATABASE_URL;
  // A build machine without secrets and, here, without PUBLIC_ORIGIN: the build says so.
  buildOutput = await run(process.execPath, [nextBin(app), "build"], { cwd: app, env: base });

  const proxyPort = await freePort();
  proxyOrigin = `http://127.0.0.1:${proxyPort}`;
  const env = {
    ...base,
    // As on Vercel: the serverless warning is for MemoryStore only.
    VERCEL: "1",
    DATABASE_URL: databaseUrl,
    BYOLLM_SITE_KEYS: keyLine.slice("BYOLLM_SITE_KEYS=".length),
    SESSION_SECRET: "next-postgres-test-secret",
    PUBLIC_ORIGIN: proxyOrigin,
  };
  for (let i = 0; i < 2; i += 1) servers.push(await startNext(app, env));

  // Each request to the next backend in turn; the job calls (claim, fetch,
  // result) take turns among themselves, so a heartbeat between them cannot
  // put a job's claim and its fetch on the same process.
  const turns = { job: 0, other: 0 };
  proxy = createServer((req, res) => {
    const kind = /^\/byollm\/(claim|fetch|result)$/.test(req.url) ? "job" : "other";
    const backend = turns[kind] % 2;
    turns[kind] += 1;
    routed.push([backend, req.url]);
    const upstream = httpRequest(
      { host: "127.0.0.1", port: servers[backend].port, method: req.method, path: req.url, headers: req.headers },
      (answer) => {
        res.writeHead(answer.statusCode, answer.headers);
        answer.pipe(res);
      },
    );
    upstream.on("error", () => {
      res.writeHead(502);
      res.end();
    });
    req.pipe(upstream);
  });
  await new Promise((r) => proxy.listen(proxyPort, "127.0.0.1", r));

  model = await startModel();
  home = mkdtempSync(join(tmpdir(), "byollm-daemon-"));
  writeFileSync(
    join(home, "config.json"),
    JSON.stringify({
      services: {
        primary: {
          type: "openai-http",
          baseUrl: `http://127.0.0.1:${model.address().port}/v1`,
          model: "echo-model",
          kinds: ["llm.generate"],
          offer: "private",
        },
      },
    }),
  );
});

after(async () => {
  for (const child of children) await stopChild(child);
  for (const server of servers) await stopChild(server.child);
  proxy?.close();
  model?.close();
  if (database) {
    const client = new pg.Client({ connectionString: adminUrl() });
    await client.connect();
    await client.query(`drop database if exists ${database} with (force)`);
    await client.end();
  }
  if (home) rmSync(home, { recursive: true, force: true });
  if (work) rmSync(work, { recursive: true, force: true });
});

/** An OpenAI-compatible stand-in model on loopback answering "echo: <prompt>". */
function startModel() {
  const server = createServer(async (req, res) => {
    let body = "";
    for await (const chunk of req) body += chunk;
    res.setHeader("content-type", "application/json");
    if (req.method === "GET" && req.url === "/v1/models") {
      return res.end(JSON.stringify({ object: "list", data: [{ id: "echo-model", object: "model" }] }));
    }
    if (req.method === "POST" && req.url === "/v1/chat/completions") {
      const request = JSON.parse(body);
      const prompt = request.messages.at(-1).content;
      return res.end(
        JSON.stringify({
          id: "chatcmpl-test",
          object: "chat.completion",
          created: 1,
          model: request.model,
          choices: [{ index: 0, message: { role: "assistant", content: `echo: ${prompt}` }, finish_reason: "stop" }],
        }),
      );
    }
    res.statusCode = 404;
    res.end("{}");
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}

function daemon(args) {
  const child = spawn(process.execPath, [daemonBin, ...args], {
    env: { ...process.env, BYOLLM_HOME: home, HOME: home, NO_COLOR: "1" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.push(child);
  const io = { out: "", exit: new Promise((r) => child.once("exit", (code) => r(code))) };
  child.stdout.setEncoding("utf8").on("data", (d) => (io.out += d));
  child.stderr.setEncoding("utf8").on("data", (d) => (io.out += d));
  return { child, io };
}

async function until(what, predicate, timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await predicate();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

test("npm run migrate applies the package's migrations from .env.local", { skip }, () => {
  assert.match(migrateOutput, /^byollm: \d+ migrations applied$/m);
});

test("next build says once that PUBLIC_ORIGIN is missing", { skip }, () => {
  assert.equal(buildOutput.split(PUBLIC_ORIGIN_SENTENCE).length - 1, 1, buildOutput);
  assert.match(buildOutput, /it is not set\./);
});

test("the real daemon pairs through one next start, and runs a job approved and enqueued through another", { skip, timeout: 120_000 }, async () => {
  const [first, second] = servers.map((s) => s.origin);
  const alice = new Browserless(second);
  await alice.request("/api/session", { method: "POST", form: { name: "alice", next: "/pair" } });
  assert.ok(alice.cookie);

  // The proxy's first request goes to the first process: the pair request.
  const connect = daemon(["connect", proxyOrigin, "--name", "pg-daemon"]);
  const [, code] = await until("the pairing code", () => /Enter code: ([A-Z0-9]{4}-[A-Z0-9]{4})/.exec(connect.io.out));
  assert.deepEqual(routed[0], [0, "/byollm/pair"]);
  assert.match(connect.io.out, new RegExp(`Open: +${proxyOrigin}/pair\\n`));

  // The person sees and approves it on the second process.
  const pending = await alice.request(`/pair?code=${code}`);
  assert.equal(pending.status, 200);
  assert.match(pending.text, /pg-daemon/);
  assert.match(pending.text, /echo-model/);
  const approved = await alice.request("/api/pairings/approve", { method: "POST", form: { code } });
  assert.equal(approved.status, 200, approved.text);
  assert.equal(await connect.io.exit, 0, connect.io.out);
  assert.match(connect.io.out, /paired as alice/);

  const runner = daemon(["run"]);
  await until("the daemon to start serving", () => /serving as/.test(runner.io.out));
  const enqueued = await alice.request("/api/prompts", { method: "POST", form: { prompt: "hello from two processes" } });
  assert.equal(enqueued.status, 201, enqueued.text);
  const { id } = JSON.parse(enqueued.text);
  const done = await until("the job to finish", async () => {
    const body = JSON.parse((await new Browserless(first, alice.cookie).request(`/api/prompts/${id}`)).text);
    return ["ok", "error", "canceled", "expired"].includes(body.state) ? body : null;
  });
  assert.equal(done.state, "ok", `${JSON.stringify(done)}\n${runner.io.out}`);
  assert.deepEqual(done.outcome, { outcome: "ok", text: "echo: hello from two processes" });
  assert.equal(done.provenance.runnerOwner, "alice");

  // The job was claimed through one process and fetched through the other: a
  // lease taken through one was honoured by the other.
  const fetched = routed.findIndex(([, path]) => path === "/byollm/fetch");
  assert.ok(fetched > 0, JSON.stringify(routed));
  const claimBefore = routed.slice(0, fetched).findLast(([, path]) => path === "/byollm/claim");
  assert.notEqual(claimBefore[0], routed[fetched][0], JSON.stringify(routed));
  assert.ok(routed.some(([, path]) => path === "/byollm/result"), JSON.stringify(routed));

  // postgresStore on a serverless-looking host: no MemoryStore warning, and no error.
  for (const server of servers) {
    assert.ok(!server.output().includes(SERVERLESS_WARNING), server.output());
    assert.doesNotMatch(server.output(), /\bError\b/, server.output());
  }
});

test("without PUBLIC_ORIGIN, the first request is answered 500 and the log says the same sentence as the build", { skip, timeout: 60_000 }, async () => {
  const env = { ...process.env, NEXT_TELEMETRY_DISABLED: "1", NODE_ENV: "production", DATABASE_URL: databaseUrl, BYOLLM_SITE_KEYS: keyLine.slice("BYOLLM_SITE_KEYS=".length) };
  delete env.PUBLIC_ORIGIN;
  const server = await startNext(app, env);
  servers.push(server);
  const answer = await fetch(`${server.origin}/byollm/pair`, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" });
  assert.equal(answer.status, 500);
  await until("the log line", () => server.output().includes(PUBLIC_ORIGIN_SENTENCE), 5_000);
  assert.match(server.output(), /it is not set\./);
});

/**
 * The kit's checks that need the processes' own clock to move: a lease
 * running out (the recipe's 60 s) and a pairing code expiring (10 min). The
 * kit advances time in this process only, so through `next start` they would
 * wait for real; both run on the real clock over postgresStore in
 * postgres-conformance.test.mjs.
 */
const NEEDS_THE_SERVERS_CLOCK = ["C004_LEASE_RECLAIM", "C020_PAIR_CODE_EXPIRES"];

test("the conformance kit passes through the two next start processes (30 of its 32 checks)", { skip, timeout: 300_000 }, async () => {
  // The kit's daemons talk to the two processes in turn; its app side (enqueue,
  // approve, cancel, sweep) is a ByollmApp of this process on the same
  // database, another instance of the site, on the clock the kit advances.
  const { siteKeysFromEnv } = await import("../dist/index.js");
  const { postgresStore } = await import("../dist/postgres.js");
  process.env.BYOLLM_NEXT_PG_SITE_KEYS = keyLine.slice("BYOLLM_SITE_KEYS=".length);
  const siteKeys = siteKeysFromEnv("BYOLLM_NEXT_PG_SITE_KEYS");
  delete process.env.BYOLLM_NEXT_PG_SITE_KEYS;
  const pool = testPool(databaseUrl, 4);
  try {
    const target = makeTarget({
      name: "examples/next-postgres, two next start processes",
      stack: await ours(),
      siteKeys,
      makeStore: (ttlMs) => postgresStore({ pool, defaultTtlMs: ttlMs }),
      truncate: () => pool.query(TRUNCATE),
      fakeClock: true,
      leaseMs: 60_000,
      ttlMs: 30_000,
    });
    let turn = 0;
    const backends = servers.slice(0, 2).map((server) => server.origin);
    const only = CHECKS.map((check) => check.id).filter((id) => !NEEDS_THE_SERVERS_CLOCK.includes(id));
    const report = await certifyAllowingTimingRetries(
      {
        ...target,
        origin: proxyOrigin,
        fetch: async (request) => {
          const url = new URL(request.url);
          const backend = backends[turn++ % 2];
          const body = request.method === "GET" || request.method === "HEAD" ? undefined : await request.text();
          return fetch(`${backend}${url.pathname}${url.search}`, { method: request.method, headers: request.headers, body });
        },
      },
      { only },
    );
    const failed = report.results.filter((r) => !r.passed);
    if (failed.length > 0) console.log(formatReport(report));
    assert.equal(report.results.length, 30);
    assert.deepEqual(failed.map((r) => `${r.check.id}: ${r.error}`), []);
    assert.ok(turn > 100, `the kit's requests reached both processes (${turn})`);
  } finally {
    await pool.end();
  }
});

// The REAL daemon (`byollm@0.1.1`, its own CLI, unmodified) against the
// example site: `byollm connect`, approval through the site's page,
// `byollm run`, a prompt enqueued on the site, the answer back on the site.
//
// The daemon's state lives in a temp dir (BYOLLM_HOME, the daemon's own test
// seam, and HOME). Its model is a stand-in OpenAI-compatible server on
// loopback (the `openai-http` backend type), answering "echo: <prompt>"; the
// daemon talks to nothing but 127.0.0.1.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SiteUser, root, startSiteProcess } from "./site-harness.mjs";

const daemonBin = join(root, "node_modules", "byollm", "dist", "bin.js");
// byollm@0.1.1 needs Node >= 22.14. On an older Node (20) the daemon runs on
// the Node 22 npm ci installs (devDependency `node`), and the site, which is
// what this file tests, on this one.
const [major, minor] = process.versions.node.split(".").map(Number);
const tooOld = major < 22 || (major === 22 && minor < 14);
const daemonNode = tooOld ? join(root, "node_modules", "node", "bin", "node") : process.execPath;
const skip = tooOld && !existsSync(daemonNode) ? `the real daemon needs Node >= 22.14 (this is ${process.version}) and node_modules/node is missing` : false;
if (skip) console.log(`# skipped: ${skip}`);

let site;
let model;
let home;
const children = [];
const prompts = [];

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
      prompts.push(prompt);
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

/** Run the daemon CLI; resolves with the child and a live view of its output. */
function daemon(args) {
  const child = spawn(daemonNode, [daemonBin, ...args], {
    env: { ...process.env, BYOLLM_HOME: home, HOME: home, NO_COLOR: "1" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.push(child);
  const io = { out: "", exit: new Promise((r) => child.once("exit", (code) => r(code))) };
  child.stdout.setEncoding("utf8").on("data", (d) => (io.out += d));
  child.stderr.setEncoding("utf8").on("data", (d) => (io.out += d));
  return { child, io };
}

async function until(what, predicate, timeoutMs = 20_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await predicate();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

before(async () => {
  if (skip) return;
  model = await startModel();
  site = await startSiteProcess();
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
  for (const child of children) {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((r) => child.once("exit", r));
      child.kill("SIGTERM");
      await exited;
    }
  }
  await site?.stop();
  model?.close();
  if (home) rmSync(home, { recursive: true, force: true });
});

test("byollm connect + byollm run serve a prompt from the example site", { skip, timeout: 90_000 }, async () => {
  const alice = new SiteUser(site.origin);
  await alice.signIn("alice");
  const siteKey = /site key fingerprint: (\S+)/.exec(site.output().stdout)[1];

  // Given a URL with a path, the daemon keeps only its origin and still
  // finds the protocol at /byollm — which is why the mount lives there.
  const connect = daemon(["connect", `${site.origin}/settings/devices`, "--name", "real-daemon"]);
  const [, code] = await until("the pairing code", () => /Enter code: ([A-Z0-9]{4}-[A-Z0-9]{4})/.exec(connect.io.out));
  assert.match(connect.io.out, new RegExp(`Open: +${site.origin}/pair\\n`), "the daemon sends the person to the approval page");
  const [, deviceFingerprint] = /\n\s+(BYOLLM-[A-Z0-9-]+)\n/.exec(connect.io.out);

  const pending = await alice.request(`/pair?code=${code}`);
  assert.equal(pending.status, 200);
  assert.match(pending.text, /<td id="label">real-daemon<\/td>/);
  assert.ok(pending.text.includes(deviceFingerprint), "the page shows the fingerprint the daemon printed");
  assert.match(pending.text, /echo-model/, "the daemon offered the stand-in model");
  assert.equal((await alice.request("/pair/approve", { method: "POST", form: { code } })).status, 200);

  assert.equal(await connect.io.exit, 0, connect.io.out);
  assert.match(connect.io.out, /paired as alice/);
  assert.match(connect.io.out, new RegExp(`pinned: ${siteKey}`), "the daemon pinned this site's key");

  const run = daemon(["run"]);
  await until("the daemon to start serving", () => /serving as/.test(run.io.out));
  const jobId = await alice.sendPrompt("hello from the real daemon");
  const done = await until("the job to finish", async () => {
    const job = await alice.job(jobId);
    return ["ok", "error", "canceled", "expired"].includes(job.body.state) ? job.body : null;
  });
  assert.equal(done.state, "ok", `${JSON.stringify(done)}\n${run.io.out}`);
  assert.deepEqual(done.outcome, { outcome: "ok", text: "echo: hello from the real daemon" });
  assert.equal(done.provenance.runnerOwner, "alice");
  assert.equal(done.provenance.model, "echo-model");
  assert.deepEqual(prompts, ["hello from the real daemon"]);

  // Revoking it on the site stops it: its next signed call is refused.
  const devices = await alice.request("/devices");
  const runnerId = /data-runner="([^"]+)"/.exec(devices.text)[1];
  assert.equal(done.provenance.runnerId, runnerId);
  assert.equal((await alice.request("/devices/revoke", { method: "POST", form: { id: runnerId } })).status, 303);
  await until("the daemon to notice the revocation", () => /revoked/i.test(run.io.out), 30_000);

  // The site's console told it in one line each: the pairing, the job, the revocation and the refusal.
  const printed = site.output().stdout;
  assert.match(printed, /^\d\d:\d\d:\d\d pairing approved: real-daemon \((linux|darwin|win32), byollm 0\.1\.1\) now runs prompts for alice$/m);
  assert.match(printed, new RegExp(`^\\d\\d:\\d\\d:\\d\\d job ${jobId.slice(0, 8)} for alice: answered on real-daemon \\(echo-model\\) after `, "m"));
  assert.match(printed, /^\d\d:\d\d:\d\d device revoked: alice revoked real-daemon$/m);
  assert.match(printed, /^\d\d:\d\d:\d\d refused POST \/byollm\/\w+ from real-daemon \(alice\): 403 revoked: /m);
});

test("byollm connect <origin>/api asks <origin>/byollm/pair, so an app mounted only at /api/byollm cannot pair", { skip, timeout: 30_000 }, async () => {
  // Stands in for a Next.js app laid out as the reference README suggests:
  // the protocol only under /api/byollm, Next's HTML 404 everywhere else.
  const seen = [];
  const app = createServer((req, res) => {
    seen.push(`${req.method} ${req.url}`);
    if (req.url.startsWith("/api/byollm/")) {
      res.writeHead(500, { "content-type": "application/json" });
      return res.end(JSON.stringify({ error: "server-error", message: "the test app was reached at /api/byollm" }));
    }
    res.writeHead(404, { "content-type": "text/html; charset=utf-8" });
    res.end("<!doctype html><title>404: This page could not be found.</title>");
  });
  await new Promise((r) => app.listen(0, "127.0.0.1", r));
  try {
    const appOrigin = `http://127.0.0.1:${app.address().port}`;
    const connect = daemon(["connect", `${appOrigin}/api`, "--name", "readme-layout"]);
    assert.equal(await connect.io.exit, 1, connect.io.out);
    assert.match(connect.io.out, new RegExp(`Connecting to ${appOrigin}\\n`), "the path was dropped");
    assert.match(connect.io.out, /returned HTTP 404 with a body that is not JSON/);
    assert.deepEqual(seen, ["POST /byollm/pair"]);
  } finally {
    app.close();
  }
});

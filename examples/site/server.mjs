#!/usr/bin/env node
// The example site behind `npm start`: one process, node:http, the in-memory
// store. It shows the whole loop a real app has to build around the library:
//
//   sign in → approve the pairing code a daemon printed → enqueue a prompt →
//   watch the result come back from that person's own device.
//
// Everything here is deliberately plain (no framework, no build step) so the
// calls into the library are the only interesting lines. They are marked
// "LIBRARY" in the comments.
//
// Environment:
//   PORT                  port on 127.0.0.1 (default 8787; 0 picks a free one)
//   HOST                  interface to listen on (default 127.0.0.1)
//   PUBLIC_ORIGIN         origin people and daemons use (default http://HOST:PORT)
//   BYOLLM_SITE_KEYS      the site identity; when unset it is read from
//   BYOLLM_SITE_ENV_FILE  (default examples/site/.env.local), which is created
//                         once with fresh keys and reused on every restart.
//   BYOLLM_DB             the store's file (default examples/site/byollm.db):
//                         jobs and paired devices survive a restart. Set it
//                         empty for a store that lives in memory only.
//   METRICS_TOKEN         when set, GET /metrics (the Prometheus exposition)
//                         asks for `Authorization: Bearer <METRICS_TOKEN>`;
//                         unset, it answers anyone who can reach the site.
//
// It prints one line per pairing decision, finished job and refusal.
import { createServer } from "node:http";
import { randomBytes } from "node:crypto";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { Readable } from "node:stream";
import { fileURLToPath } from "node:url";
// keyId is the fingerprint function both ends print; the daemon shows its own
// at `byollm connect` and asks the person to compare it with this page. (An
// app that shows it declares @byollm/protocol itself; here it is a devDependency.)
import { keyId } from "@byollm/protocol";
import {
  ByollmApp,
  MemoryStore,
  createFetchHandler,
  createMetricsHandler,
  formatSiteKeys,
  generateSiteKeys,
  normalizeUserCode,
  siteKeysFromEnv,
} from "byollm-server-native";

const here = dirname(fileURLToPath(import.meta.url));
const SESSION_COOKIE = "byollm_example_session";
const FORM_LIMIT_BYTES = 1024 * 1024;

// ---------------------------------------------------------------------------
// Site identity: generated once, kept. A daemon pins this identity when its
// owner approves the pairing, so regenerating it on every start would make
// every paired device pair again.

function loadSiteKeys(envFile) {
  if (process.env.BYOLLM_SITE_KEYS) {
    return { keys: siteKeysFromEnv("BYOLLM_SITE_KEYS"), source: "the BYOLLM_SITE_KEYS environment variable" };
  }
  let created = false;
  if (!existsSync(envFile)) {
    // LIBRARY: the same text `npx --no keygen` prints.
    // `wx` so two processes starting at once cannot overwrite each other's keys.
    writeFileSync(envFile, formatSiteKeys(generateSiteKeys()), { mode: 0o600, flag: "wx" });
    created = true;
  }
  const line = readFileSync(envFile, "utf8")
    .split(/\r?\n/)
    .find((l) => l.startsWith("BYOLLM_SITE_KEYS="));
  const value = line === undefined ? undefined : line.slice("BYOLLM_SITE_KEYS=".length).trim();
  // LIBRARY: strict parse; throws a message that says what is wrong with the value.
  const keys = siteKeysFromEnv("BYOLLM_SITE_KEYS", { BYOLLM_SITE_KEYS: value });
  const shown = relative(process.cwd(), envFile);
  const where = shown === "" || shown.startsWith("..") ? envFile : shown;
  return { keys, source: `${where} (${created ? "created now" : "reused"})` };
}

// ---------------------------------------------------------------------------
// Small HTTP helpers.

const escapeHtml = (value) =>
  String(value).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);

function cookiesOf(req) {
  const out = new Map();
  for (const part of (req.headers.cookie ?? "").split(";")) {
    const at = part.indexOf("=");
    if (at > 0) out.set(part.slice(0, at).trim(), part.slice(at + 1).trim());
  }
  return out;
}

async function readForm(req) {
  const chunks = [];
  let size = 0;
  for await (const chunk of req) {
    size += chunk.length;
    if (size > FORM_LIMIT_BYTES) throw new HttpError(413, "That form is larger than this example accepts.");
    chunks.push(chunk);
  }
  return new URLSearchParams(Buffer.concat(chunks).toString("utf8"));
}

class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function send(res, status, contentType, body, headers = {}) {
  res.writeHead(status, { "content-type": contentType, "cache-control": "no-store", ...headers });
  res.end(body);
}
const sendHtml = (res, status, html, headers) => send(res, status, "text/html; charset=utf-8", html, headers);
const sendJson = (res, status, value) => send(res, status, "application/json", JSON.stringify(value));
const redirect = (res, location, headers = {}) => {
  res.writeHead(303, { location, "cache-control": "no-store", ...headers });
  res.end();
};

// Only same-site paths may be used as a post-sign-in destination.
const safeNext = (value) => (typeof value === "string" && value.startsWith("/") && !value.startsWith("//") ? value : "/");

// Node's request → a Fetch API Request, the shape createFetchHandler takes.
// The body is streamed through untouched: the handler enforces the protocol's
// size limit and signs over the exact bytes received.
function toFetchRequest(req, origin) {
  const headers = new Headers();
  for (let i = 0; i < req.rawHeaders.length; i += 2) headers.append(req.rawHeaders[i], req.rawHeaders[i + 1]);
  const init = { method: req.method, headers };
  if (req.method !== "GET" && req.method !== "HEAD") {
    init.body = Readable.toWeb(req);
    init.duplex = "half";
  }
  const request = new Request(new URL(req.url, origin), init);
  socketAddresses.set(request, req.socket.remoteAddress);
  return request;
}

// Each protocol request's source, for the pairing bounds: the socket's
// address (this server faces clients directly). Behind a proxy you trust,
// take the first hop of the x-forwarded-for it writes instead; never a header
// a client could have written itself (docs/security.md, "Pairing floods").
const socketAddresses = new WeakMap();


// ---------------------------------------------------------------------------
// Words and times for people. Machine codes (job states, availability
// reasons) are translated here and never shown as they are.

/** A device counts as online when it sent a heartbeat this recently (passed to the app too). */
const LIVENESS_MS = 35_000;
const HOUR_MS = 3_600_000;
const FINISHED = new Set(["ok", "error", "canceled", "expired"]);
const ACTIVE = new Set(["claimed", "running"]);

/** How a job's state reads, and its badge's colour. */
const STATES = {
  queued: ["Waiting for a device", "wait"],
  claimed: ["Picked up", "live"],
  running: ["Running", "live"],
  ok: ["Answered", "ok"],
  error: ["Failed", "bad"],
  canceled: ["Canceled", "bad"],
  expired: ["Expired", "bad"],
};

const AVAILABILITY = {
  "no-runner-paired": "You have no device yet. Pair one first: run <code>npx byollm connect ORIGIN</code> on it, then approve its code.",
  "no-runner-online": "None of your devices is online right now. Start one with <code>npx byollm run</code>; prompts wait in the queue until then.",
  "no-matching-capability": "None of your devices offers a model for prompts. Configure one in its byollm settings.",
};
const AVAILABILITY_OTHER = "No device of yours can take prompts right now; they wait in the queue.";

// "in 9 minutes", "2 s ago". One function: the server renders it into the
// page, and the page's script (which gets this same source) keeps it current.
function relativeTime(at, now) {
  const seconds = Math.round((at - now) / 1000);
  const size = Math.abs(seconds);
  if (size < 2) return "just now";
  const count = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;
  const text =
    size < 60
      ? `${size} s`
      : size < 3600
        ? count(Math.floor(size / 60), "minute")
        : size < 86400
          ? count(Math.floor(size / 3600), "hour")
          : count(Math.floor(size / 86400), "day");
  return seconds < 0 ? `${text} ago` : `in ${text}`;
}

/** A duration such as "1.2 s" or "3 minutes". */
function duration(ms) {
  return ms < 60_000 ? `${(ms / 1000).toFixed(ms < 10_000 ? 1 : 0)} s` : relativeTime(ms, 0).replace(/^in /, "");
}

const timeTag = (at, now = Date.now()) =>
  `<time datetime="${new Date(at).toISOString()}" data-at="${at}">${escapeHtml(relativeTime(at, now))}</time>`;

const stateBadge = (state, id) => {
  const [text, tone] = STATES[state] ?? [state, ""];
  return `<span class="badge ${tone}" data-state="${escapeHtml(state)}"${id ? ` id="${id}"` : ""}>${escapeHtml(text)}</span>`;
};

// ---------------------------------------------------------------------------
// Pages. Plain HTML; every value from a person, a daemon or a model is escaped.

const FAVICON = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><rect width="32" height="32" rx="7" fill="#2f5bea"/><path d="M9 22V10h6.5a3.5 3.5 0 0 1 0 7H9m6.5 0H17a3 3 0 0 1 0 6H9" fill="none" stroke="#fff" stroke-width="2.6" stroke-linejoin="round"/></svg>`;

const STYLE = `
:root{--fg:#1d2330;--muted:#5f6b7d;--line:#e3e6eb;--bg:#f5f6f8;--accent:#2f5bea;--accent-dark:#2447c4;--danger:#c4302b;--ok:#177245;--warn:#8f5200}
*{box-sizing:border-box}
body{margin:0;font:16px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg)}
a{color:var(--accent)}
header{background:#fff;border-bottom:1px solid var(--line)}
.bar{max-width:60rem;margin:0 auto;padding:.55rem 1rem;display:flex;gap:.75rem;align-items:center;flex-wrap:wrap}
.brand{font-weight:700;color:var(--fg);text-decoration:none;display:flex;gap:.45rem;align-items:center;margin-right:.5rem}
.brand img{width:22px;height:22px}
nav{display:flex;gap:.15rem;flex-wrap:wrap}
nav a{color:var(--muted);text-decoration:none;padding:.3rem .6rem;border-radius:7px}
nav a:hover{color:var(--fg)} nav a.here{color:var(--fg);background:var(--bg);font-weight:600}
.who{margin-left:auto;display:flex;gap:.5rem;align-items:center;color:var(--muted);font-size:.9rem}
.who form{margin:0}
main{max-width:60rem;margin:1.5rem auto 3rem;padding:0 1rem}
h1{font-size:1.45rem;margin:0 0 1rem} h2{font-size:1.05rem;margin:0 0 .75rem}
.card{background:#fff;border:1px solid var(--line);border-radius:12px;padding:1.25rem 1.5rem;margin-bottom:1rem}
.card>:first-child{margin-top:0} .card>:last-child{margin-bottom:0}
button,.button{font:inherit;font-size:.95rem;border-radius:8px;padding:.5rem 1rem;border:1px solid #cfd4dc;background:#fff;color:var(--fg);cursor:pointer;text-decoration:none;display:inline-block;line-height:1.4}
button:hover,.button:hover{background:#f0f2f5}
.primary{background:var(--accent);border-color:var(--accent);color:#fff;font-weight:600}
.primary:hover{background:var(--accent-dark)}
.danger{color:var(--danger);border-color:#ecc3c1}
.danger:hover{background:#fdeeed}
.danger.solid{background:var(--danger);border-color:var(--danger);color:#fff;font-weight:600}
.danger.solid:hover{background:#a82824}
.quiet{border-color:transparent;background:none;color:var(--muted);padding:.3rem .5rem}
.small{font-size:.85rem;padding:.3rem .7rem}
.actions{display:flex;gap:.75rem;align-items:center;flex-wrap:wrap;margin-top:1.25rem}
.actions form{margin:0}
label{display:block;font-weight:600;margin:.9rem 0 .3rem}
input,textarea{width:100%;font:inherit;padding:.55rem .7rem;border:1px solid #cfd4dc;border-radius:8px;background:#fff;color:inherit}
input:focus,textarea:focus{outline:2px solid #b9c9fb;border-color:var(--accent)}
textarea{min-height:7rem;resize:vertical;display:block}
.inline-input{display:flex;gap:.5rem;align-items:stretch} .inline-input input{flex:1}
table{width:100%;border-collapse:collapse}
th,td{padding:.6rem .5rem;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
tr:last-child td,tr:last-child th{border-bottom:none}
th{color:var(--muted);font-weight:500;font-size:.85rem}
table.facts th{width:9rem}
.badge{display:inline-block;border-radius:999px;padding:.08rem .6rem;font-size:.8rem;font-weight:600;background:#eef0f3;color:var(--muted);white-space:nowrap}
.badge.ok{background:#e2f4e9;color:var(--ok)} .badge.live{background:#e5ecff;color:var(--accent)}
.badge.bad{background:#fdeceb;color:var(--danger)} .badge.wait{background:#fff3dc;color:var(--warn)}
.muted{color:var(--muted)} .small-text{font-size:.85rem}
.error{color:var(--danger)}
.fp{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:1rem;letter-spacing:.02em;background:#f2f4f7;padding:.1rem .4rem;border-radius:6px}
code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:.9em;background:#f2f4f7;border-radius:6px}
code{padding:.1rem .35rem} pre{padding:.7rem 1rem;white-space:pre-wrap;word-break:break-word;margin:.4rem 0}
.who-said{font-size:.8rem;font-weight:600;color:var(--muted);margin-top:.5rem}
.bubble{border-radius:12px;padding:.75rem 1rem;white-space:pre-wrap;word-break:break-word;margin:.25rem 0 .75rem}
.bubble.you{background:#eaf0ff}
.bubble.answer{background:#f2f4f7}
.bubble.pending{color:var(--muted);font-style:italic;white-space:normal}
.numbers{display:grid;grid-template-columns:repeat(auto-fit,minmax(9.5rem,1fr));gap:.75rem;margin-bottom:1rem}
.number{background:#fff;border:1px solid var(--line);border-radius:12px;padding:.8rem 1rem}
a.number{text-decoration:none;color:inherit} a.number:hover{border-color:#c9cfd8}
.number b{display:block;font-size:1.9rem;line-height:1.15}
.number span{color:var(--muted);font-size:.85rem}
.notice{border-radius:10px;padding:.65rem 1rem;margin-bottom:1rem;background:#e2f4e9;color:#124d30}
.notice.warn{background:#fff3dc;color:#6b3d00}
.steps{padding-left:1.2rem} .steps li{margin:.4rem 0}
details{margin-top:1rem} summary{cursor:pointer;color:var(--muted);font-size:.9rem}
.chart svg{width:100%;height:auto;display:block}
.legend{display:flex;gap:1rem;margin-top:.5rem;font-size:.85rem;color:var(--muted)} .legend i{display:inline-block;width:.8rem;height:.8rem;border-radius:3px;margin-right:.3rem;vertical-align:-1px}
`;

// Runs in every page: keeps the human times current, with the exact time on hover.
const PAGE_SCRIPT = `const relativeTime = ${relativeTime.toString()};
function tick() {
  const now = Date.now();
  for (const t of document.querySelectorAll("time[data-at]")) {
    const at = Number(t.dataset.at);
    t.textContent = relativeTime(at, now);
    if (!t.title) t.title = new Date(at).toLocaleString();
  }
}
tick();
setInterval(tick, 1000);`;

/** A script block; `<` is escaped so no value can close it. */
const script = (code) => `<script>${code.replace(/<\/(script)/gi, "<\\/$1")}</script>`;
const jsonForScript = (value) => JSON.stringify(value).replace(/</g, "\\u003c");

const NAV = [
  ["/", "Home"],
  ["/prompts", "Prompts"],
  ["/devices", "Devices"],
  ["/status", "Status"],
  ["/pair", "Pair a device"],
];

function page(title, user, body, { here = "", scripts = "" } = {}) {
  const nav = user
    ? `<nav>${NAV.map(([href, text]) => `<a href="${href}"${href === here ? ` class="here" aria-current="page"` : ""}>${text}</a>`).join("")}</nav>
       <div class="who"><span>Signed in as <b id="who">${escapeHtml(user)}</b></span>
       <form method="post" action="/signout"><button class="quiet small">Sign out</button></form></div>`
    : "";
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(title)} · byollm example</title>
<link rel="icon" href="/favicon.svg" type="image/svg+xml">
<style>${STYLE}</style></head><body>
<header><div class="bar"><a class="brand" href="/"><img src="/favicon.svg" alt="">byollm example</a>${nav}</div></header>
<main><h1>${escapeHtml(title)}</h1>${body}</main>
${script(PAGE_SCRIPT)}${scripts}</body></html>`;
}

const errorPage = (res, status, user, message) =>
  sendHtml(
    res,
    status,
    page("Something went wrong", user, `<div class="card"><p class="error" id="error">${escapeHtml(message)}</p><p><a href="/">Back to the start</a></p></div>`),
  );

// ---------------------------------------------------------------------------

export async function startSite(options = {}) {
  const host = options.host ?? process.env.HOST ?? "127.0.0.1";
  const port = Number(options.port ?? process.env.PORT ?? 8787);
  const envFile = options.envFile ?? process.env.BYOLLM_SITE_ENV_FILE ?? join(here, ".env.local");
  const log = options.log ?? ((line) => console.log(`${new Date().toISOString().slice(11, 19)} ${line}`));
  const { keys: siteKeys, source: keySource } = loadSiteKeys(envFile);

  // LIBRARY: one store shared by the protocol handler and the app, kept in
  // one local file so a restart keeps the queue and the paired devices.
  const dbPath = options.dbPath ?? process.env.BYOLLM_DB ?? join(here, "byollm.db");
  const store = new MemoryStore(dbPath === "" ? {} : { path: dbPath });
  const app = new ByollmApp({ store, siteKeys, livenessMs: LIVENESS_MS });

  const sessions = new Map(); // session token → signed-in name
  // The app's own record of what each person sent: the payload is sealed at
  // rest, so the prompt to show beside its answer is kept here.
  const sent = new Map(); // job id → { id, owner, prompt, createdAt }
  const sentByOwner = new Map(); // owner → job ids, newest first

  const server = createServer();
  await new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, resolve);
  });
  const address = server.address();
  const hostForUrl = address.family === "IPv6" ? `[${address.address}]` : address.address;
  const origin = (options.publicOrigin ?? process.env.PUBLIC_ORIGIN ?? `http://${hostForUrl}:${address.port}`).replace(/\/+$/, "");

  // LIBRARY: the protocol, mounted at /byollm. The daemon keeps only the
  // origin of the URL it is given and always calls <origin>/byollm/<endpoint>,
  // so this is the one mount point a daemon can reach.
  const protocol = createFetchHandler({
    store,
    siteKeys,
    // What the daemon prints as "Open: …" next to the code: the approval page.
    verificationUrl: `${origin}/pair`,
    // Where each request came from, so one client cannot crowd out pairings.
    source: (request) => socketAddresses.get(request),
  });

  // LIBRARY: the Prometheus exposition of this site's metrics, at /metrics.
  const metricsToken = options.metricsToken ?? process.env.METRICS_TOKEN;
  const metrics = createMetricsHandler(app, metricsToken ? { token: metricsToken } : { public: true });

  // The operator's view on the status page: app.metrics() now, and a sample
  // every 5 s for the chart of the last five minutes.
  const SAMPLE_MS = options.sampleMs ?? 5_000;
  const samples = [];
  async function sampleMetrics() {
    const m = await app.metrics(); // LIBRARY
    samples.push({ at: m.at, queued: m.jobs?.queued ?? 0, finished: m.jobLatency.total.count });
    if (samples.length > 61) samples.shift();
    return m;
  }
  const sampler = setInterval(() => sampleMetrics().catch(() => undefined), SAMPLE_MS);
  sampler.unref();
  server.on("close", () => clearInterval(sampler));

  async function siteStatus() {
    const m = await sampleMetrics();
    const jobs = m.jobs ?? { queued: 0, claimed: 0, running: 0, ok: 0, error: 0, canceled: 0, expired: 0 };
    const pct = (h) => ({ p50: h.p50, p90: h.p90, p99: h.p99, count: h.count });
    return {
      jobs,
      runners: m.runners,
      claim: pct(m.endpoints.claim.latency),
      queueWait: pct(m.jobLatency.queueWait),
      total: pct(m.jobLatency.total),
      refused: Object.values(m.refusals).reduce((a, b) => a + b, 0),
      // Per sample interval: jobs that finished in it, and the queue at its end.
      history: samples.slice(1).map((x, i) => ({ at: x.at, finished: x.finished - samples[i].finished, queued: x.queued })),
      sampleMs: SAMPLE_MS,
    };
  }

  const userOf = (req) => {
    const token = cookiesOf(req).get(SESSION_COOKIE);
    return token === undefined ? undefined : sessions.get(token);
  };

  async function ownJob(user, id) {
    const record = await app.job(id); // LIBRARY
    return record !== null && record.owner === user ? record : null;
  }

  async function deviceNames(user) {
    return new Map((await app.runners(user)).map((r) => [r.id, r.label])); // LIBRARY
  }

  /** What a page shows about one job: words, not codes. */
  function describe(entry, record, names) {
    const described = {
      id: entry.id,
      prompt: entry.prompt,
      state: record.state,
      createdAt: entry.createdAt,
      device: record.provenance ? (names.get(record.provenance.runnerId) ?? "a device that was removed") : null,
    };
    if (FINISHED.has(record.state)) described.tookMs = record.updatedAt - entry.createdAt;
    return described;
  }

  // One console line when a job ends, from the store's own change signal.
  function watch(entry) {
    const stop = store.subscribe(entry.id, async () => {
      const record = await app.job(entry.id);
      if (record === null || !FINISHED.has(record.state) || entry.logged) return;
      entry.logged = true;
      stop();
      const took = duration(record.updatedAt - entry.createdAt);
      const by = record.provenance ? ` on ${(await deviceNames(entry.owner)).get(record.provenance.runnerId) ?? record.provenance.runnerId} (${record.provenance.model})` : "";
      const why = record.outcome?.outcome === "error" ? `: ${record.outcome.message}` : "";
      log(`job ${entry.id.slice(0, 8)} for ${entry.owner}: ${STATES[record.state][0].toLowerCase()}${by} after ${took}${why}`);
    });
  }

  // The store kept its jobs across a restart (it is a file); what this page
  // keeps beside them (the prompt text, shown with its answer) was in memory.
  // The jobs are listed again, their prompt sealed where the site left it.
  for (const record of store.allJobs()) {
    const entry = { id: record.id, owner: record.owner, prompt: "(sent before the site restarted)", createdAt: record.createdAt, logged: FINISHED.has(record.state) };
    sent.set(entry.id, entry);
    sentByOwner.set(record.owner, [entry.id, ...(sentByOwner.get(record.owner) ?? [])]);
    if (!entry.logged) watch(entry);
  }

  async function availabilityHtml(user) {
    // LIBRARY: is one of this person's devices online and able to run it?
    const availability = await app.runnerAvailability({ kind: "llm.generate", owner: user });
    if (availability.available) {
      return `<div class="notice" id="availability">A device of yours can run this: your prompt goes straight to it.</div>`;
    }
    // Revoked devices count as none at all.
    const allRevoked = (await app.runners(user)).every((r) => r.revokedAt !== null); // LIBRARY
    const reason = availability.reason === "no-runner-online" && allRevoked ? "no-runner-paired" : availability.reason;
    const text = (AVAILABILITY[reason] ?? AVAILABILITY_OTHER).replace("ORIGIN", escapeHtml(origin));
    return `<div class="notice warn" id="availability">${text}</div>`;
  }

  async function statusOf(user, now = Date.now(), site) {
    const runners = await app.runners(user); // LIBRARY
    const live = runners.filter((r) => r.revokedAt === null);
    const online = live.filter((r) => now - r.lastHeartbeatAt <= LIVENESS_MS).length;
    const counts = { queued: 0, running: 0, answered: 0, failed: 0 };
    // Twelve five-minute buckets of the last hour, oldest first.
    const buckets = Array.from({ length: 12 }, () => ({ answered: 0, failed: 0 }));
    for (const id of sentByOwner.get(user) ?? []) {
      const entry = sent.get(id);
      if (now - entry.createdAt > 2 * HOUR_MS) break; // newest first: nothing older can count
      const record = await app.job(id); // LIBRARY
      if (record === null) continue;
      if (record.state === "queued") counts.queued += 1;
      else if (ACTIVE.has(record.state)) counts.running += 1;
      else if (now - record.updatedAt <= HOUR_MS) {
        const kind = record.state === "ok" ? "answered" : "failed";
        counts[kind] += 1;
        buckets[Math.min(11, Math.floor((HOUR_MS - (now - record.updatedAt)) / (HOUR_MS / 12)))][kind] += 1;
      }
    }
    return { now, devices: { online, paired: live.length }, jobs: counts, buckets, ...(site ? { site } : {}) };
  }

  const routes = {
    "GET /": async (req, res, user, url) => {
      if (!user) {
        const next = safeNext(url.searchParams.get("next") ?? "/");
        return sendHtml(
          res,
          200,
          page(
            "Sign in",
            user,
            `<div class="card"><p>This example has no passwords: a name is enough to be somebody. A real app uses its own sign-in here.</p>
             <form method="post" action="/signin"><input type="hidden" name="next" value="${escapeHtml(next)}">
             <label for="name">Your name</label>
             <div class="inline-input"><input name="name" id="name" required maxlength="64" autofocus autocomplete="username">
             <button class="primary" id="signin">Sign in</button></div></form></div>`,
          ),
        );
      }
      const status = await statusOf(user);
      return sendHtml(
        res,
        200,
        page(
          "Run prompts on your own machine",
          user,
          `<div class="numbers">
             <a class="number" href="/devices"><b>${status.devices.online}</b><span>device${status.devices.online === 1 ? "" : "s"} online, ${status.devices.paired} paired</span></a>
             <a class="number" href="/status"><b>${status.jobs.answered}</b><span>answered in the last hour</span></a>
           </div>
           <div class="card"><h2>Get started</h2>
           <ol class="steps">
             <li>On the machine with the model: <pre>npx byollm connect ${escapeHtml(origin)}</pre></li>
             <li><a href="/pair">Approve the device</a> with the code it prints.</li>
             <li>Start it: <pre>npx byollm run</pre></li>
             <li><a href="/prompts">Send a prompt</a> and watch the answer arrive.</li>
           </ol>
           <p class="muted small-text">This site's key fingerprint (the daemon prints it as "pinned"): <span class="fp" id="site-key">${escapeHtml(keyId(siteKeys.identityPublic))}</span></p></div>`,
          { here: "/" },
        ),
      );
    },

    "POST /signin": async (req, res) => {
      const form = await readForm(req);
      const name = (form.get("name") ?? "").trim();
      if (!/^[\p{L}\p{N} ._@-]{1,64}$/u.test(name)) {
        throw new HttpError(400, "A name is 1 to 64 letters, digits, spaces or . _ @ -");
      }
      const token = randomBytes(32).toString("base64url");
      sessions.set(token, name);
      redirect(res, safeNext(form.get("next")), {
        "set-cookie": `${SESSION_COOKIE}=${token}; Path=/; HttpOnly; SameSite=Lax`,
      });
    },

    "POST /signout": async (req, res) => {
      const token = cookiesOf(req).get(SESSION_COOKIE);
      if (token !== undefined) sessions.delete(token);
      redirect(res, "/", { "set-cookie": `${SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0` });
    },

    // The verificationUrl. Shows what is about to be approved before asking.
    "GET /pair": async (req, res, user, url) => {
      const code = (url.searchParams.get("code") ?? "").trim();
      const form = `<form method="get" action="/pair"><label for="code">The code your device printed</label>
        <div class="inline-input"><input name="code" id="code" value="${escapeHtml(code)}" required autocomplete="off" autofocus placeholder="ABCD-1234" style="font-family:ui-monospace,monospace;letter-spacing:.08em">
        <button class="primary" id="lookup">Continue</button></div></form>`;
      if (code === "") {
        return sendHtml(
          res,
          200,
          page(
            "Approve a device",
            user,
            `<div class="card">${form}<p class="muted small-text">Run <code>npx byollm connect ${escapeHtml(origin)}</code> on the machine with the model to get a code.</p></div>`,
            { here: "/pair" },
          ),
        );
      }

      // LIBRARY: what the code refers to — null for unknown, expired or already decided.
      const pending = await app.pendingPairing(code);
      if (pending === null) {
        return sendHtml(
          res,
          404,
          page(
            "Approve a device",
            user,
            `<div class="card"><p class="error" id="error">No device is waiting with that code. It may have expired (codes last 10 minutes) or been used already.</p>${form}</div>`,
            { here: "/pair" },
          ),
        );
      }
      // The device's fingerprint, so the person can compare it with the one
      // `byollm connect` printed on their machine before trusting it.
      const record = await store.getPairingByUserCode(normalizeUserCode(code));
      const fingerprint = record === null ? "unknown" : keyId(record.device.identity);
      const models = pending.capabilities.map((c) => `<li>${escapeHtml(c.model)} <span class="muted small-text">(${escapeHtml(c.kind)})</span></li>`).join("");
      const platforms = { darwin: "macOS", linux: "Linux", win32: "Windows" };
      return sendHtml(
        res,
        200,
        page(
          `Approve ${pending.label}?`,
          user,
          `<div class="card"><table id="pending" class="facts">
            <tr><th>Device</th><td id="label">${escapeHtml(pending.label)}</td></tr>
            <tr><th>Runs on</th><td>${escapeHtml(platforms[pending.platform] ?? pending.platform)}, byollm ${escapeHtml(pending.daemonVersion)}</td></tr>
            <tr><th>Fingerprint</th><td><span class="fp" id="fingerprint">${escapeHtml(fingerprint)}</span></td></tr>
            <tr><th>Offers</th><td><ul style="margin:0;padding-left:1.1rem">${models || "<li>nothing yet</li>"}</ul></td></tr>
            <tr><th>Code expires</th><td>${timeTag(pending.expiresAt)}</td></tr>
          </table>
          <p>Approve it only if you started this on your own machine and the fingerprint matches the one it printed. It will run the prompts you send as <b>${escapeHtml(user)}</b>.</p>
          <div class="actions">
            <form method="post" action="/pair/approve"><input type="hidden" name="code" value="${escapeHtml(code)}"><button class="primary" id="approve">Approve ${escapeHtml(pending.label)}</button></form>
            <form method="post" action="/pair/deny"><input type="hidden" name="code" value="${escapeHtml(code)}"><button class="danger" id="deny">This was not me — deny</button></form>
          </div></div>`,
          { here: "/pair" },
        ),
      );
    },

    "POST /pair/approve": async (req, res, user) => {
      const form = await readForm(req);
      let runner;
      try {
        // LIBRARY: the owner comes from this site's session, never from the daemon.
        runner = await app.approvePairing({ userCode: form.get("code") ?? "", owner: user });
      } catch (error) {
        throw new HttpError(400, `That code could not be approved: ${error instanceof Error ? error.message : String(error)}`);
      }
      log(`pairing approved: ${runner.label} (${runner.platform}, byollm ${runner.daemonVersion}) now runs prompts for ${user}`);
      sendHtml(
        res,
        200,
        page(
          `${runner.label} is yours`,
          user,
          `<div class="card"><p id="approved"><b>${escapeHtml(runner.label)}</b> is approved. It finishes pairing by itself within a few seconds; then start it on that machine:</p>
           <pre>npx byollm run</pre>
           <div class="actions"><a class="button primary" href="/prompts">Send it a prompt</a><a class="button" href="/devices">See your devices</a></div>
           <details><summary>Technical details</summary><p class="small-text">Device id <code id="runner-id">${escapeHtml(runner.id)}</code></p></details></div>`,
          { here: "/pair" },
        ),
      );
    },

    "POST /pair/deny": async (req, res, user) => {
      const form = await readForm(req);
      const code = form.get("code") ?? "";
      const pending = await app.pendingPairing(code); // LIBRARY
      await app.denyPairing(code); // LIBRARY
      if (pending !== null) log(`pairing denied: ${user} did not recognise ${pending.label} (${pending.platform})`);
      sendHtml(
        res,
        200,
        page(
          "Request declined",
          user,
          `<div class="card"><p id="denied">Declined: that device is not paired, and it is told so on its next poll. If someone else is trying to connect a machine to your account, nothing more is needed.</p>
           <div class="actions"><a class="button" href="/">Back to the start</a></div></div>`,
          { here: "/pair" },
        ),
      );
    },

    "GET /prompts": async (req, res, user) => {
      const initial = await jobList(user);
      sendHtml(
        res,
        200,
        page(
          "Prompts",
          user,
          `<div id="availability-slot">${await availabilityHtml(user)}</div>
           <div class="card"><form method="post" action="/prompts">
             <label for="prompt" style="margin-top:0">Prompt</label>
             <textarea name="prompt" id="prompt" required placeholder="Ask your own model anything…"></textarea>
             <details><summary>System prompt (optional)</summary><textarea name="system" id="system" style="margin-top:.5rem;min-height:4rem" placeholder="You are a helpful assistant."></textarea></details>
             <div class="actions"><button class="primary" id="send">Send to my device</button></div>
           </form></div>
           <div class="card"><h2>Recent</h2><div id="recent"></div></div>`,
          {
            here: "/prompts",
            scripts: script(`${RECENT_SCRIPT}\nrender(${jsonForScript(initial)});\nsetInterval(refresh, 2000);`),
          },
        ),
      );
    },

    "POST /prompts": async (req, res, user) => {
      const form = await readForm(req);
      const prompt = form.get("prompt") ?? "";
      const payload = { prompt };
      const system = form.get("system") ?? "";
      if (system !== "") payload.system = system;
      let handle;
      try {
        // LIBRARY: validated, sealed at rest, queued for this person's own devices.
        handle = await app.enqueue({ kind: "llm.generate", owner: user, audience: "private", payload });
      } catch (error) {
        throw new HttpError(400, error instanceof Error ? error.message : String(error));
      }
      const entry = { id: handle.id, owner: user, prompt, createdAt: Date.now(), logged: false };
      sent.set(entry.id, entry);
      const ids = sentByOwner.get(user) ?? [];
      ids.unshift(entry.id);
      sentByOwner.set(user, ids);
      watch(entry);
      redirect(res, `/prompts/${handle.id}`);
    },

    "GET /api/prompts": async (req, res, user) => {
      sendJson(res, 200, { availability: await availabilityHtml(user), ...(await jobList(user)) });
    },

    "GET /devices": async (req, res, user, url) => {
      const now = Date.now();
      const runners = await app.runners(user); // LIBRARY (revoked ones included)
      const revoked = runners.find((r) => r.id === url.searchParams.get("revoked"));
      const rows = runners
        .sort((a, b) => (a.revokedAt !== null) - (b.revokedAt !== null) || b.createdAt - a.createdAt)
        .map((r) => {
          const online = r.revokedAt === null && now - r.lastHeartbeatAt <= LIVENESS_MS;
          const state = r.revokedAt !== null ? "revoked" : online ? "online" : "offline";
          const status =
            state === "revoked"
              ? `<span class="badge bad">Revoked</span> <span class="muted small-text">${timeTag(r.revokedAt, now)}</span>`
              : online
                ? `<span class="badge ok">Online</span>`
                : `<span class="badge">Offline</span> <span class="muted small-text">last seen ${timeTag(r.lastHeartbeatAt, now)}</span>`;
          const models = [...new Set(r.capabilities.map((c) => c.model))].map(escapeHtml).join(", ") || "—";
          return `<tr data-runner="${escapeHtml(r.id)}" data-state="${state}"><td><b>${escapeHtml(r.label)}</b><div class="muted small-text">paired ${timeTag(r.createdAt, now)}</div></td>
            <td>${status}</td><td>${models}</td>
            <td style="text-align:right">${r.revokedAt === null ? `<a class="button danger small" href="/devices/revoke?id=${encodeURIComponent(r.id)}">Revoke…</a>` : ""}</td></tr>`;
        })
        .join("");
      sendHtml(
        res,
        200,
        page(
          "Devices",
          user,
          `${revoked ? `<div class="notice" id="revoked-notice"><b>${escapeHtml(revoked.label)}</b> is revoked: it can no longer run your prompts.</div>` : ""}
           <div class="card">${
             rows
               ? `<table id="devices"><tr><th>Device</th><th>Status</th><th>Models</th><th></th></tr>${rows}</table>`
               : `<p class="muted" id="devices">No devices yet. Run <code>npx byollm connect ${escapeHtml(origin)}</code> on one, then <a href="/pair">approve its code</a>.</p>`
           }</div>`,
          { here: "/devices" },
        ),
      );
    },

    // Revoking asks first: it cannot be undone (the device would have to pair again).
    "GET /devices/revoke": async (req, res, user, url) => {
      const id = url.searchParams.get("id") ?? "";
      const runner = (await app.runners(user)).find((r) => r.id === id); // LIBRARY
      if (!runner) throw new HttpError(404, "You have no device with that id.");
      if (runner.revokedAt !== null) return redirect(res, "/devices");
      sendHtml(
        res,
        200,
        page(
          `Revoke ${runner.label}?`,
          user,
          `<div class="card" id="confirm"><p><b>${escapeHtml(runner.label)}</b> will stop running your prompts at once: this site refuses its next request. Using it again means pairing it again with <code>npx byollm connect</code>.</p>
           <div class="actions">
             <form method="post" action="/devices/revoke"><input type="hidden" name="id" value="${escapeHtml(runner.id)}"><button class="danger solid" id="confirm-revoke">Revoke ${escapeHtml(runner.label)}</button></form>
             <a class="button" href="/devices" id="keep">Keep it</a>
           </div></div>`,
          { here: "/devices" },
        ),
      );
    },

    "POST /devices/revoke": async (req, res, user) => {
      const form = await readForm(req);
      const id = form.get("id") ?? "";
      const runner = (await app.runners(user)).find((r) => r.id === id);
      if (!runner) throw new HttpError(404, "You have no device with that id.");
      await app.revokeRunner(id); // LIBRARY: its next signed request gets 403 revoked
      log(`device revoked: ${user} revoked ${runner.label}`);
      redirect(res, `/devices?revoked=${encodeURIComponent(id)}`);
    },

    "GET /status": async (req, res, user) => {
      sendHtml(
        res,
        200,
        page(
          "Status",
          user,
          `<div class="numbers" id="numbers"></div>
           <div class="card chart"><h2>Finished prompts, last hour</h2><div id="chart"></div>
           <div class="legend"><span><i style="background:#2e9e63"></i>answered</span><span><i style="background:#d9534f"></i>failed or expired</span></div></div>
           <p class="muted small-text">Your devices and prompts; it updates by itself every 2 seconds.</p>
           <h2 style="margin-top:1.5rem">This site, everyone's jobs</h2>
           <div class="numbers" id="site-numbers"></div>
           <div class="card chart"><h2>Jobs finished, last five minutes</h2><div id="site-chart"></div>
           <div class="legend"><span><i style="background:#2f5bea"></i>finished per interval</span><span><i style="background:#8f5200"></i>waiting</span></div></div>
           <p class="muted small-text">From <code>app.metrics()</code>; the same figures are at <a href="/metrics">/metrics</a> for Prometheus.</p>`,
          { here: "/status", scripts: script(`${STATUS_SCRIPT}\nrender(${jsonForScript(await statusOf(user, Date.now(), await siteStatus()))});\nsetInterval(refresh, 2000);`) },
        ),
      );
    },

    "GET /api/status": async (req, res, user) => sendJson(res, 200, await statusOf(user, Date.now(), await siteStatus())),
  };

  async function jobList(user) {
    const names = await deviceNames(user);
    const jobs = [];
    for (const id of (sentByOwner.get(user) ?? []).slice(0, 20)) {
      const record = await app.job(id); // LIBRARY
      if (record !== null) jobs.push(describe(sent.get(id), record, names));
    }
    return { jobs, states: STATES };
  }

  // The page for one prompt: the prompt, then its answer, which the page's
  // script fetches every second until the job ends.
  async function promptPage(res, user, id) {
    const record = await ownJob(user, id);
    const entry = sent.get(id);
    if (record === null || entry === undefined) throw new HttpError(404, "You have no prompt with that id.");
    sendHtml(
      res,
      200,
      page(
        "Prompt",
        user,
        `<div class="card">
           <div class="who-said">You, ${timeTag(entry.createdAt)}</div>
           <div class="bubble you" id="prompt-text">${escapeHtml(entry.prompt)}</div>
           <div class="who-said"><span id="answerer">Your device</span> ${stateBadge(record.state, "state")}</div>
           <div class="bubble answer pending" id="waiting">Waiting for one of your devices to pick it up…</div>
           <div class="bubble answer" id="result" hidden></div>
           <p id="meta" class="muted small-text"></p>
           <div class="actions"><a class="button primary" href="/prompts">New prompt</a></div>
           <details><summary>Technical details</summary><p class="small-text">Job id <code id="job-id">${escapeHtml(id)}</code></p></details>
         </div>`,
        { here: "/prompts", scripts: script(`${PROMPT_SCRIPT}\npoll(${jsonForScript(id)}, ${jsonForScript(STATES)});`) },
      ),
    );
  }

  async function sendProtocolResponse(req, res, response) {
    const headers = {};
    response.headers.forEach((value, name) => {
      headers[name] = value;
    });
    const body = Buffer.from(await response.arrayBuffer());
    if (response.status >= 400) {
      // One line per refusal: what was asked, the answer's code and message, and which device asked.
      let answer = {};
      try {
        answer = JSON.parse(body.toString("utf8"));
      } catch {
        answer = {};
      }
      const runnerId = req.headers["x-byollm-runner"];
      const runner = typeof runnerId === "string" && runnerId.length < 200 ? await store.getRunner(runnerId) : null;
      const who = runner ? ` from ${runner.label} (${runner.owner})` : "";
      const why = [answer.error, answer.message].filter((part) => typeof part === "string").join(": ");
      log(`refused ${req.method} ${new URL(req.url, origin).pathname}${who}: ${response.status} ${why}`.trimEnd());
    }
    res.writeHead(response.status, headers);
    res.end(body);
  }

  server.on("request", async (req, res) => {
    let user;
    let url;
    try {
      url = new URL(req.url ?? "/", origin);
      if (url.pathname === "/byollm" || url.pathname.startsWith("/byollm/")) {
        return await sendProtocolResponse(req, res, await protocol(toFetchRequest(req, origin)));
      }
      if (url.pathname === "/metrics") {
        const response = await metrics(toFetchRequest(req, origin)); // LIBRARY
        res.writeHead(response.status, Object.fromEntries(response.headers));
        return res.end(await response.text());
      }
      if (url.pathname === "/favicon.svg" || url.pathname === "/favicon.ico") {
        return send(res, 200, "image/svg+xml", FAVICON, { "cache-control": "public, max-age=86400" });
      }
      user = userOf(req);
      const jobApi = /^\/api\/jobs\/([^/]+)$/.exec(url.pathname);
      if (jobApi && req.method === "GET") {
        if (!user) return sendJson(res, 401, { error: "sign in first" });
        const id = decodeURIComponent(jobApi[1]);
        const record = await ownJob(user, id);
        if (record === null) return sendJson(res, 404, { error: "no such job" });
        // LIBRARY: {jobId, state, outcome?, provenance?}; plus, once it ended, the device's name and how long it took.
        const result = await app.result(id);
        if (!FINISHED.has(result.state)) return sendJson(res, 200, result);
        const { device, tookMs } = describe(sent.get(id), record, await deviceNames(user));
        return sendJson(res, 200, { ...result, device, tookMs });
      }
      const promptMatch = /^\/prompts\/([^/]+)$/.exec(url.pathname);
      const key = promptMatch && req.method === "GET" ? "GET /prompts/:id" : `${req.method} ${url.pathname}`;
      const open = key === "GET /" || key === "POST /signin" || key === "POST /signout";
      if (!open && !user) {
        if (key.startsWith("GET /api/")) return sendJson(res, 401, { error: "sign in first" });
        if (req.method === "GET") return redirect(res, `/?next=${encodeURIComponent(url.pathname + url.search)}`);
        throw new HttpError(401, "Sign in first.");
      }
      if (key === "GET /prompts/:id") return await promptPage(res, user, decodeURIComponent(promptMatch[1]));
      const route = routes[key];
      if (!route) throw new HttpError(404, "No such page.");
      await route(req, res, user, url);
    } catch (error) {
      if (res.headersSent) return res.destroy();
      if (error instanceof HttpError) {
        log(`refused ${req.method} ${url?.pathname ?? req.url}${user ? ` for ${user}` : ""}: ${error.status} ${error.message}`);
        return errorPage(res, error.status, user, error.message);
      }
      console.error(error);
      errorPage(res, 500, user, "The example site hit an unexpected error; see its console.");
    }
  });

  return { server, origin, app, store, keySource, siteKeyId: keyId(siteKeys.identityPublic) };
}

// ---------------------------------------------------------------------------
// The pages' own scripts. Every text from a model, a device or a person goes
// in with textContent, never innerHTML.

const RECENT_SCRIPT = `
function el(tag, props = {}, children = []) {
  const node = Object.assign(document.createElement(tag), props);
  node.append(...children);
  return node;
}
function render({ jobs, states, availability }) {
  if (availability !== undefined) document.getElementById("availability-slot").innerHTML = availability;
  const box = document.getElementById("recent");
  if (!jobs.length) { box.replaceChildren(el("p", { className: "muted", textContent: "Nothing yet: your prompts and their answers appear here." })); return; }
  const table = el("table", { id: "recent-table" });
  table.append(el("tr", {}, ["Prompt", "Status", "Device", "Sent"].map((t) => el("th", { textContent: t }))));
  for (const job of jobs) {
    const [label, tone] = states[job.state] ?? [job.state, ""];
    const link = el("a", { href: "/prompts/" + encodeURIComponent(job.id), textContent: job.prompt.length > 80 ? job.prompt.slice(0, 79) + "…" : job.prompt });
    const badge = el("span", { className: "badge " + tone, textContent: label });
    badge.dataset.state = job.state;
    const sentAt = el("time", { dateTime: new Date(job.createdAt).toISOString(), textContent: relativeTime(job.createdAt, Date.now()) });
    sentAt.dataset.at = job.createdAt;
    const device = el("td", { textContent: job.device ?? "—", className: job.device ? "" : "muted" });
    const row = el("tr", {}, [el("td", {}, [link]), el("td", {}, [badge]), device, el("td", { className: "muted small-text" }, [sentAt])]);
    row.dataset.job = job.id;
    table.append(row);
  }
  box.replaceChildren(table);
}
async function refresh() {
  const r = await fetch("/api/prompts", { headers: { accept: "application/json" } });
  if (r.ok) render(await r.json());
}`;

const PROMPT_SCRIPT = `
const durationText = ${duration.toString()};
async function poll(id, states) {
  let job;
  try {
    const r = await fetch("/api/jobs/" + encodeURIComponent(id), { headers: { accept: "application/json" } });
    job = await r.json();
  } catch {
    return setTimeout(() => poll(id, states), 2000);
  }
  const badge = document.getElementById("state");
  const [label, tone] = states[job.state] ?? [job.state ?? "unknown", ""];
  badge.textContent = label;
  badge.className = "badge " + tone;
  badge.dataset.state = job.state;
  const done = ["ok", "error", "canceled", "expired"].includes(job.state);
  const waiting = document.getElementById("waiting");
  if (job.state === "claimed" || job.state === "running") waiting.textContent = "Your device is working on it…";
  if (done) {
    waiting.hidden = true;
    const out = document.getElementById("result");
    out.hidden = false;
    const o = job.outcome;
    if (o?.outcome === "ok") out.textContent = o.text;
    else {
      out.classList.add("error");
      out.textContent = o?.outcome === "error" ? "Your device could not answer: " + o.message
        : job.state === "expired" ? "No device of yours picked it up in time, so it expired."
        : "This prompt was canceled.";
    }
    if (job.device) document.getElementById("answerer").textContent = job.device;
    const meta = [];
    if (job.device) meta.push("Answered by " + job.device + (job.provenance ? " with " + job.provenance.model : ""));
    if (job.provenance?.untrusted) meta.push("from someone else's machine");
    if (typeof job.tookMs === "number") meta.push(durationText(job.tookMs) + " after you sent it");
    document.getElementById("meta").textContent = meta.join(" · ");
    return;
  }
  setTimeout(() => poll(id, states), 1000);
}`;

const STATUS_SCRIPT = `
// Boxes of [key, number, caption] into the element with this id, each marked data-<attr>=key.
function showNumbers(id, attr, numbers) {
  document.getElementById(id).replaceChildren(...numbers.map(([key, n, text]) => {
    const box = document.createElement("div");
    box.className = "number";
    box.dataset[attr] = key;
    const b = document.createElement("b");
    b.textContent = n;
    const span = document.createElement("span");
    span.textContent = text;
    box.append(b, span);
    return box;
  }));
}
function render(s) {
  const numbers = [
    ["online", s.devices.online, "device" + (s.devices.online === 1 ? "" : "s") + " online, " + s.devices.paired + " paired"],
    ["queued", s.jobs.queued, "waiting for a device"],
    ["running", s.jobs.running, "running now"],
    ["answered", s.jobs.answered, "answered in the last hour"],
    ["failed", s.jobs.failed, "failed or expired in the last hour"],
  ];
  showNumbers("numbers", "count", numbers);
  // Twelve stacked bars, five minutes each: answered below, failed above.
  const W = 600, H = 120, pad = 24, gap = 8, bw = (W - pad - gap * 12) / 12;
  const max = Math.max(1, ...s.buckets.map((b) => b.answered + b.failed));
  const y = (v) => ((H - 20) * v) / max;
  let bars = "";
  s.buckets.forEach((b, i) => {
    const x = pad + gap / 2 + i * (bw + gap);
    const ok = y(b.answered), bad = y(b.failed);
    bars += '<rect x="' + x + '" y="' + (H - 20 - ok) + '" width="' + bw + '" height="' + ok + '" rx="3" fill="#2e9e63"><title>' + b.answered + ' answered</title></rect>';
    bars += '<rect x="' + x + '" y="' + (H - 20 - ok - bad) + '" width="' + bw + '" height="' + bad + '" rx="3" fill="#d9534f"><title>' + b.failed + ' failed</title></rect>';
    if (b.answered + b.failed === 0) bars += '<rect x="' + x + '" y="' + (H - 22) + '" width="' + bw + '" height="2" fill="#e3e6eb"/>';
  });
  const axis = '<text x="' + pad + '" y="' + (H - 4) + '" font-size="11" fill="#5f6b7d">60 min ago</text>'
    + '<text x="' + (W / 2 + pad / 2) + '" y="' + (H - 4) + '" font-size="11" fill="#5f6b7d" text-anchor="middle">30 min ago</text>'
    + '<text x="' + W + '" y="' + (H - 4) + '" font-size="11" fill="#5f6b7d" text-anchor="end">now</text>'
    + '<text x="0" y="12" font-size="11" fill="#5f6b7d">' + max + '</text><text x="0" y="' + (H - 22) + '" font-size="11" fill="#5f6b7d">0</text>';
  document.getElementById("chart").innerHTML = '<svg id="chart-svg" viewBox="0 0 ' + W + ' ' + H + '" role="img" aria-label="Finished prompts per five minutes over the last hour">' + bars + axis + '</svg>';
  if (s.site) renderSite(s.site);
}
// The whole site, from app.metrics(): numbers with latency percentiles, and
// the last five minutes as bars (jobs finished per interval) and a line (waiting).
function renderSite(site) {
  const ms = (v) => v === null ? "—" : v < 1 ? (v * 1000).toFixed(v < 0.01 ? 1 : 0) + " ms" : v.toFixed(v < 10 ? 1 : 0) + " s";
  const j = site.jobs;
  const numbers = [
    ["queued", j.queued, "waiting for a device"],
    ["running", j.claimed + j.running, "running now"],
    ["ok", j.ok, "answered, all time"],
    ["failed", j.error + j.expired + j.canceled, "failed, expired or canceled"],
    ["online", site.runners ? site.runners.online : "—", "devices online of " + (site.runners ? site.runners.paired : "—") + " paired"],
    ["claim", ms(site.claim.p50), "claim answered, p50 (p99 " + ms(site.claim.p99) + ")"],
    ["wait", ms(site.queueWait.p50), "enqueue to first claim, p50 (p90 " + ms(site.queueWait.p90) + ")"],
    ["total", ms(site.total.p50), "enqueue to result, p50 (p90 " + ms(site.total.p90) + ")"],
  ];
  showNumbers("site-numbers", "site", numbers);
  const W = 600, H = 120, pad = 24, n = 60, bw = (W - pad) / n;
  const h = site.history.slice(-n);
  const max = Math.max(1, ...h.map((x) => Math.max(x.finished, x.queued)));
  const y = (v) => ((H - 20) * v) / max;
  let bars = "";
  h.forEach((x, i) => {
    const left = pad + (n - h.length + i) * bw;
    bars += '<rect x="' + left + '" y="' + (H - 20 - y(x.finished)) + '" width="' + Math.max(1, bw - 2) + '" height="' + y(x.finished) + '" fill="#2f5bea"><title>' + x.finished + ' finished</title></rect>';
  });
  const line = h.map((x, i) => (pad + (n - h.length + i + 0.5) * bw) + "," + (H - 20 - y(x.queued))).join(" ");
  const axis = '<text x="' + pad + '" y="' + (H - 4) + '" font-size="11" fill="#5f6b7d">' + Math.round((n * site.sampleMs) / 60000) + ' min ago</text>'
    + '<text x="' + W + '" y="' + (H - 4) + '" font-size="11" fill="#5f6b7d" text-anchor="end">now</text>'
    + '<text x="0" y="12" font-size="11" fill="#5f6b7d">' + max + '</text><text x="0" y="' + (H - 22) + '" font-size="11" fill="#5f6b7d">0</text>';
  document.getElementById("site-chart").innerHTML = '<svg id="site-chart-svg" viewBox="0 0 ' + W + ' ' + H + '" role="img" aria-label="Jobs finished per interval and jobs waiting, last five minutes">' + bars
    + (h.length > 1 ? '<polyline fill="none" stroke="#8f5200" stroke-width="2" points="' + line + '"/>' : "") + axis + '</svg>';
}
async function refresh() {
  const r = await fetch("/api/status", { headers: { accept: "application/json" } });
  if (r.ok) render(await r.json());
}`;

// Run directly (`npm start`), not when imported.
if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const site = await startSite();
  console.log(
    [
      `byollm example site listening on ${site.origin}`,
      `  site keys: ${site.keySource}`,
      `  site key fingerprint: ${site.siteKeyId}`,
      ``,
      `Connect a daemon (on the machine that runs the model; the daemon needs Node >= 22.14):`,
      `  npx byollm connect ${site.origin}`,
      `Then sign in at ${site.origin}/ , approve the code it prints at ${site.origin}/pair ,`,
      `start it with \`npx byollm run\`, and send a prompt from ${site.origin}/prompts .`,
      ``,
    ].join("\n"),
  );
  const stop = () => {
    site.server.close(() => {
      site.store.close?.();
      process.exit(0);
    });
    site.server.closeAllConnections();
  };
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);
}

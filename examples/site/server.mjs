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
import { createServer } from "node:http";
import { randomBytes } from "node:crypto";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { Readable } from "node:stream";
import { fileURLToPath } from "node:url";
// keyId is the fingerprint function both ends print; the daemon shows its own
// at `byollm connect` and asks the person to compare it with this page.
import { keyId } from "@byollm/protocol";
import {
  ByollmApp,
  MemoryStore,
  createFetchHandler,
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
    // LIBRARY: the same text `npx --package @byollm/server keygen` prints.
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
  return new Request(new URL(req.url, origin), init);
}

async function sendFetchResponse(res, response) {
  const headers = {};
  response.headers.forEach((value, name) => {
    headers[name] = value;
  });
  const body = Buffer.from(await response.arrayBuffer());
  res.writeHead(response.status, headers);
  res.end(body);
}

// ---------------------------------------------------------------------------
// Pages. Plain HTML; every value from a person, a daemon or a model is escaped.

function page(title, user, body) {
  const nav = user
    ? `<nav><a href="/">Home</a> · <a href="/pair">Approve a device</a> · <a href="/prompts">Prompts</a> · <a href="/devices">Devices</a>
       <form method="post" action="/signout" class="inline"><span>signed in as <b id="who">${escapeHtml(user)}</b></span> <button>Sign out</button></form></nav>`
    : `<nav><a href="/">Home</a></nav>`;
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(title)} · byollm example</title>
<style>
 body{font:16px/1.5 system-ui,sans-serif;max-width:48rem;margin:2rem auto;padding:0 1rem;color:#222}
 nav{display:flex;gap:.5rem;align-items:center;flex-wrap:wrap;border-bottom:1px solid #ddd;padding-bottom:.5rem;margin-bottom:1rem}
 .inline{display:inline;margin-left:auto} code,pre{background:#f4f4f4;padding:.1rem .3rem;border-radius:3px}
 pre{padding:.75rem;white-space:pre-wrap} table{border-collapse:collapse} td,th{padding:.25rem .6rem;border-bottom:1px solid #eee;text-align:left}
 .error{color:#a00} .muted{color:#666} textarea{width:100%;min-height:6rem} .fp{font-family:monospace;font-size:1.1rem}
</style></head><body>${nav}<main><h1>${escapeHtml(title)}</h1>${body}</main></body></html>`;
}

const errorPage = (res, status, user, message) =>
  sendHtml(res, status, page("Something went wrong", user, `<p class="error" id="error">${escapeHtml(message)}</p><p><a href="/">Back</a></p>`));

// ---------------------------------------------------------------------------

export async function startSite(options = {}) {
  const host = options.host ?? process.env.HOST ?? "127.0.0.1";
  const port = Number(options.port ?? process.env.PORT ?? 8787);
  const envFile = options.envFile ?? process.env.BYOLLM_SITE_ENV_FILE ?? join(here, ".env.local");
  const { keys: siteKeys, source: keySource } = loadSiteKeys(envFile);

  // LIBRARY: one store shared by the protocol handler and the app.
  const store = new MemoryStore();
  const app = new ByollmApp({ store, siteKeys });

  const sessions = new Map(); // session token → signed-in name
  const jobsByOwner = new Map(); // owner → job ids, newest first (the app's own index)

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
  });

  const userOf = (req) => {
    const token = cookiesOf(req).get(SESSION_COOKIE);
    return token === undefined ? undefined : sessions.get(token);
  };

  async function ownJob(user, id) {
    const record = await app.job(id); // LIBRARY
    return record !== null && record.owner === user ? record : null;
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
            `<p>This example has no passwords: a name is enough to be somebody. A real app uses its own sign-in here.</p>
             <form method="post" action="/signin"><input type="hidden" name="next" value="${escapeHtml(next)}">
             <label>Your name <input name="name" id="name" required maxlength="64" autofocus></label> <button id="signin">Sign in</button></form>`,
          ),
        );
      }
      return sendHtml(
        res,
        200,
        page(
          "byollm example site",
          user,
          `<p>Run prompts on your own machine through this site.</p>
           <ol>
             <li>On the machine with the model: <pre>npx byollm connect ${escapeHtml(origin)}</pre></li>
             <li>Open <a href="/pair">Approve a device</a> and enter the code it prints.</li>
             <li>Start it: <pre>npx byollm run</pre></li>
             <li>Send a prompt from <a href="/prompts">Prompts</a>.</li>
           </ol>
           <p class="muted">This site's key fingerprint (the daemon prints it as "pinned"): <span class="fp" id="site-key">${escapeHtml(keyId(siteKeys.identityPublic))}</span></p>`,
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
      const form = `<form method="get" action="/pair"><label>Code shown by the daemon
        <input name="code" id="code" value="${escapeHtml(code)}" required autocomplete="off" autofocus></label>
        <button id="lookup">Continue</button></form>`;
      if (code === "") return sendHtml(res, 200, page("Approve a device", user, form));

      // LIBRARY: what the code refers to — null for unknown, expired or already decided.
      const pending = await app.pendingPairing(code);
      if (pending === null) {
        return sendHtml(
          res,
          404,
          page("Approve a device", user, `<p class="error" id="error">No pending request has that code. It may have expired or been used already.</p>${form}`),
        );
      }
      // The device's fingerprint, so the person can compare it with the one
      // `byollm connect` printed on their machine before trusting it.
      const record = await store.getPairingByUserCode(normalizeUserCode(code));
      const fingerprint = record === null ? "unknown" : keyId(record.device.identity);
      const models = pending.capabilities.map((c) => `<li>${escapeHtml(c.kind)} — <code>${escapeHtml(c.model)}</code></li>`).join("");
      return sendHtml(
        res,
        200,
        page(
          "Approve a device",
          user,
          `<table id="pending">
            <tr><th>Device</th><td id="label">${escapeHtml(pending.label)}</td></tr>
            <tr><th>Platform</th><td>${escapeHtml(pending.platform)}</td></tr>
            <tr><th>Daemon</th><td>byollm ${escapeHtml(pending.daemonVersion)}</td></tr>
            <tr><th>Fingerprint</th><td class="fp" id="fingerprint">${escapeHtml(fingerprint)}</td></tr>
            <tr><th>Offers</th><td><ul>${models || "<li>nothing yet</li>"}</ul></td></tr>
            <tr><th>Code expires</th><td>${escapeHtml(new Date(pending.expiresAt).toISOString())}</td></tr>
          </table>
          <p>Approve only if you started this from your own machine and the fingerprint matches what it printed.</p>
          <form method="post" action="/pair/approve" class="inline-form"><input type="hidden" name="code" value="${escapeHtml(code)}"><button id="approve">Approve as ${escapeHtml(user)}</button></form>
          <form method="post" action="/pair/deny"><input type="hidden" name="code" value="${escapeHtml(code)}"><button id="deny">This was not me</button></form>`,
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
      sendHtml(
        res,
        200,
        page(
          "Device approved",
          user,
          `<p id="approved">Approved <b>${escapeHtml(runner.label)}</b> as <code id="runner-id">${escapeHtml(runner.id)}</code>.
           The daemon finishes pairing on its next poll; start it with <code>npx byollm run</code>.</p>
           <p><a href="/prompts">Send it a prompt</a></p>`,
        ),
      );
    },

    "POST /pair/deny": async (req, res, user) => {
      const form = await readForm(req);
      await app.denyPairing(form.get("code") ?? ""); // LIBRARY
      sendHtml(res, 200, page("Request declined", user, `<p id="denied">Declined. The daemon will be told on its next poll.</p>`));
    },

    "GET /prompts": async (req, res, user) => {
      // LIBRARY: is one of this person's devices online and able to run it?
      const availability = await app.runnerAvailability({ kind: "llm.generate", owner: user });
      const ids = jobsByOwner.get(user) ?? [];
      const rows = [];
      for (const id of ids.slice(0, 50)) {
        const record = await app.job(id);
        if (record === null) continue;
        rows.push(`<tr><td><a href="/prompts/${escapeHtml(id)}">${escapeHtml(id.slice(0, 8))}</a></td><td>${escapeHtml(record.state)}</td><td>${escapeHtml(new Date(record.createdAt).toISOString())}</td></tr>`);
      }
      sendHtml(
        res,
        200,
        page(
          "Prompts",
          user,
          `<p id="availability">${
            availability.available
              ? `A device of yours can run this (${availability.candidates} route${availability.candidates === 1 ? "" : "s"}).`
              : `No device can run this right now (${escapeHtml(availability.reason ?? "unknown")}). It will wait in the queue until one can.`
          }</p>
           <form method="post" action="/prompts">
             <label>Prompt<textarea name="prompt" id="prompt" required></textarea></label>
             <label>System (optional)<textarea name="system" id="system"></textarea></label>
             <button id="send">Send to my device</button>
           </form>
           <h2>Recent</h2>
           ${rows.length ? `<table><tr><th>job</th><th>state</th><th>created</th></tr>${rows.join("")}</table>` : `<p class="muted">Nothing yet.</p>`}`,
        ),
      );
    },

    "POST /prompts": async (req, res, user) => {
      const form = await readForm(req);
      const payload = { prompt: form.get("prompt") ?? "" };
      const system = form.get("system") ?? "";
      if (system !== "") payload.system = system;
      let handle;
      try {
        // LIBRARY: validated, sealed at rest, queued for this person's own devices.
        handle = await app.enqueue({ kind: "llm.generate", owner: user, audience: "private", payload });
      } catch (error) {
        throw new HttpError(400, error instanceof Error ? error.message : String(error));
      }
      const ids = jobsByOwner.get(user) ?? [];
      ids.unshift(handle.id);
      jobsByOwner.set(user, ids);
      redirect(res, `/prompts/${handle.id}`);
    },

    "GET /devices": async (req, res, user) => {
      const runners = await app.runners(user); // LIBRARY (revoked ones included)
      const rows = runners
        .map(
          (r) => `<tr data-runner="${escapeHtml(r.id)}"><td>${escapeHtml(r.label)}</td><td><code>${escapeHtml(r.id)}</code></td>
            <td>${escapeHtml(r.capabilities.map((c) => c.model).join(", ") || "—")}</td>
            <td>${r.revokedAt === null ? `last seen ${escapeHtml(new Date(r.lastHeartbeatAt).toISOString())}` : "revoked"}</td>
            <td>${r.revokedAt === null ? `<form method="post" action="/devices/revoke"><input type="hidden" name="id" value="${escapeHtml(r.id)}"><button>Revoke</button></form>` : ""}</td></tr>`,
        )
        .join("");
      sendHtml(
        res,
        200,
        page(
          "Devices",
          user,
          rows
            ? `<table id="devices"><tr><th>device</th><th>runner</th><th>models</th><th>status</th><th></th></tr>${rows}</table>`
            : `<p class="muted" id="devices">No devices yet. Run <code>npx byollm connect ${escapeHtml(origin)}</code> on one.</p>`,
        ),
      );
    },

    "POST /devices/revoke": async (req, res, user) => {
      const form = await readForm(req);
      const id = form.get("id") ?? "";
      const mine = (await app.runners(user)).some((r) => r.id === id);
      if (!mine) throw new HttpError(404, "You have no device with that id.");
      await app.revokeRunner(id); // LIBRARY: its next signed request gets 403 revoked
      redirect(res, "/devices");
    },
  };

  // The page for one prompt: polls the JSON endpoint below until the job ends.
  async function promptPage(res, user, id) {
    if ((await ownJob(user, id)) === null) throw new HttpError(404, "You have no prompt with that id.");
    sendHtml(
      res,
      200,
      page(
        "Prompt",
        user,
        `<p>Job <code id="job-id">${escapeHtml(id)}</code>: <b id="state">…</b></p>
         <pre id="result" hidden></pre><p id="meta" class="muted"></p>
         <script>
          const id = ${JSON.stringify(id).replace(/</g, "\\u003c")};
          async function poll() {
            const r = await fetch("/api/jobs/" + encodeURIComponent(id), { headers: { accept: "application/json" } });
            const job = await r.json();
            document.getElementById("state").textContent = job.state ?? job.error;
            const done = ["ok", "error", "canceled", "expired"].includes(job.state);
            if (job.outcome) {
              const out = document.getElementById("result");
              out.hidden = false;
              // textContent, never innerHTML: the text comes from a model.
              out.textContent = job.outcome.outcome === "ok" ? job.outcome.text
                : job.outcome.outcome === "error" ? job.outcome.code + ": " + job.outcome.message : job.outcome.outcome;
            }
            if (job.provenance) {
              document.getElementById("meta").textContent =
                "ran on " + job.provenance.runnerId + " with " + job.provenance.model + (job.provenance.untrusted ? " (untrusted)" : "");
            }
            if (!done) setTimeout(poll, 1000);
          }
          poll();
         </script>`,
      ),
    );
  }

  server.on("request", async (req, res) => {
    let user;
    try {
      const url = new URL(req.url ?? "/", origin);
      if (url.pathname === "/byollm" || url.pathname.startsWith("/byollm/")) {
        return await sendFetchResponse(res, await protocol(toFetchRequest(req, origin)));
      }
      user = userOf(req);
      const jobApi = /^\/api\/jobs\/([^/]+)$/.exec(url.pathname);
      if (jobApi && req.method === "GET") {
        if (!user) return sendJson(res, 401, { error: "sign in first" });
        const id = decodeURIComponent(jobApi[1]);
        if ((await ownJob(user, id)) === null) return sendJson(res, 404, { error: "no such job" });
        return sendJson(res, 200, await app.result(id)); // LIBRARY: {jobId, state, outcome?, provenance?}
      }
      const promptMatch = /^\/prompts\/([^/]+)$/.exec(url.pathname);
      const key = promptMatch && req.method === "GET" ? "GET /prompts/:id" : `${req.method} ${url.pathname}`;
      const open = key === "GET /" || key === "POST /signin" || key === "POST /signout";
      if (!open && !user) {
        if (req.method === "GET") return redirect(res, `/?next=${encodeURIComponent(url.pathname + url.search)}`);
        throw new HttpError(401, "Sign in first.");
      }
      if (key === "GET /prompts/:id") return await promptPage(res, user, decodeURIComponent(promptMatch[1]));
      const route = routes[key];
      if (!route) throw new HttpError(404, "No such page.");
      await route(req, res, user, url);
    } catch (error) {
      if (res.headersSent) return res.destroy();
      if (error instanceof HttpError) return errorPage(res, error.status, user, error.message);
      console.error(error);
      errorPage(res, 500, user, "The example site hit an unexpected error; see its console.");
    }
  });

  return { server, origin, app, store, keySource, siteKeyId: keyId(siteKeys.identityPublic) };
}

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
    ].join("\n"),
  );
  const stop = () => {
    site.server.close(() => process.exit(0));
    site.server.closeAllConnections();
  };
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);
}

// Starting and driving examples/site/server.mjs from the tests: a child
// process on a free loopback port, and a tiny cookie-keeping browser stand-in.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";

export const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
export const siteScript = join(root, "examples", "site", "server.mjs");

/**
 * Start the site the way `npm start` does, on port 0, with its env file and
 * its store file (BYOLLM_DB) in a temp dir (so the repo's own
 * examples/site/.env.local and store file are never touched, and sites
 * started at once do not contend for one file). Pass `env.BYOLLM_DB` to
 * restart a site on the same store. Resolves once it printed where it listens.
 */
export async function startSiteProcess({ node = process.execPath, envFile, env = {} } = {}) {
  const dir = mkdtempSync(join(tmpdir(), "byollm-site-"));
  if (envFile === undefined) envFile = join(dir, ".env.local");
  const child = spawn(node, [siteScript], {
    cwd: root,
    env: {
      ...process.env,
      PORT: "0",
      HOST: "127.0.0.1",
      BYOLLM_SITE_ENV_FILE: envFile,
      BYOLLM_SITE_KEYS: "",
      BYOLLM_DB: join(dir, "byollm.db"),
      ...env,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.setEncoding("utf8").on("data", (d) => (stdout += d));
  child.stderr.setEncoding("utf8").on("data", (d) => (stderr += d));
  const origin = await new Promise((resolveOrigin, reject) => {
    const timer = setTimeout(() => reject(new Error(`the site did not start in time.\nstdout: ${stdout}\nstderr: ${stderr}`)), 20_000);
    const check = () => {
      const m = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(stdout);
      if (m && stdout.includes("npx byollm connect")) {
        clearTimeout(timer);
        resolveOrigin(m[1]);
      }
    };
    child.stdout.on("data", check);
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`the site exited with ${code} before listening.\nstdout: ${stdout}\nstderr: ${stderr}`));
    });
  });
  return {
    origin,
    envFile,
    child,
    output: () => ({ stdout, stderr }),
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((r) => child.once("exit", r));
        child.kill("SIGTERM");
        await exited;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A signed-in person: keeps the session cookie, never follows redirects. */
export class SiteUser {
  constructor(origin) {
    this.origin = origin;
    this.cookie = "";
  }

  async request(path, { method = "GET", form, headers = {} } = {}) {
    const init = { method, redirect: "manual", headers: { ...headers } };
    if (this.cookie) init.headers.cookie = this.cookie;
    if (form !== undefined) {
      init.headers["content-type"] = "application/x-www-form-urlencoded";
      init.body = new URLSearchParams(form).toString();
    }
    const response = await fetch(this.origin + path, init);
    const setCookie = response.headers.get("set-cookie");
    if (setCookie) this.cookie = setCookie.split(";")[0];
    return { status: response.status, location: response.headers.get("location"), text: await response.text(), headers: response.headers };
  }

  async signIn(name) {
    const r = await this.request("/signin", { method: "POST", form: { name, next: "/" } });
    if (r.status !== 303 || !this.cookie) throw new Error(`sign-in failed: ${r.status} ${r.text}`);
    return r;
  }

  /** Enqueue a prompt through the site's form; returns the job id from the redirect. */
  async sendPrompt(prompt) {
    const r = await this.request("/prompts", { method: "POST", form: { prompt } });
    const m = /^\/prompts\/([0-9a-f-]{36})$/.exec(r.location ?? "");
    if (r.status !== 303 || !m) throw new Error(`enqueue failed: ${r.status} ${r.text}`);
    return m[1];
  }

  async job(id) {
    const r = await this.request(`/api/jobs/${id}`, { headers: { accept: "application/json" } });
    return { status: r.status, body: JSON.parse(r.text) };
  }
}

// The example site keeps its paired devices and its queue across a restart
// (its store is a file, examples/site/byollm.db by default): a person pairs a
// device and sends a prompt while the device is away, the site restarts, and
// the person finds the device and the waiting prompt again; the device, still
// paired, takes the prompt and the answer shows up live. Headless Chromium
// (/usr/bin/chromium, or BYOLLM_CHROMIUM), driven by playwright-core.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { TestDaemon } from "./site-daemon.mjs";
import { startSiteProcess } from "./site-harness.mjs";

const executablePath = process.env.BYOLLM_CHROMIUM ?? "/usr/bin/chromium";
const dir = mkdtempSync(join(tmpdir(), "byollm-restart-"));
const profile = mkdtempSync(join(tmpdir(), "byollm-chromium-"));
let context;
let site;

after(async () => {
  await context?.close();
  await site?.stop();
  rmSync(dir, { recursive: true, force: true });
  rmSync(profile, { recursive: true, force: true });
});

/** The site on this test's own store file and site keys, so a restart finds both. */
const start = () => startSiteProcess({ envFile: join(dir, ".env.local"), env: { BYOLLM_DB: join(dir, "byollm.db") } });

async function signIn(page, origin) {
  await page.goto(origin + "/");
  await page.fill("#name", "alice");
  await page.click("#signin");
  await page.waitForSelector("#site-key");
}

test("a restarted site keeps its paired device and its queued prompt", { timeout: 120_000 }, async () => {
  assert.ok(existsSync(executablePath), `chromium is not installed at ${executablePath} (apt-get install chromium, or BYOLLM_CHROMIUM)`);
  context = await chromium.launchPersistentContext(profile, {
    executablePath,
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    timeout: 30_000,
  });
  const page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(15_000);

  site = await start();
  await signIn(page, site.origin);
  const daemon = new TestDaemon(site.origin, { label: "alice-desktop" });
  const started = await daemon.pairStart();
  await page.goto(started.verificationUrl);
  await page.fill("#code", started.userCode);
  await page.click("#lookup");
  await page.click("#approve");
  await page.waitForSelector("#approved");
  await daemon.waitForApproval(started.deviceCode);
  assert.equal((await daemon.heartbeat()).status, 200);

  await page.goto(site.origin + "/prompts");
  await page.fill("#prompt", "Still there after a restart?");
  await page.click("#send");
  await page.waitForURL(/\/prompts\/[0-9a-f-]{36}$/);
  const jobId = await page.textContent("#job-id");

  // Restart on the same file: sessions were in memory, so sign in again.
  const firstOrigin = site.origin;
  await site.stop();
  site = await start();
  daemon.origin = site.origin;
  assert.notEqual(site.origin, firstOrigin, "a new process on a new port");
  await signIn(page, site.origin);

  await page.goto(site.origin + "/devices");
  const row = page.locator(`tr[data-runner="${daemon.runnerId}"]`);
  assert.equal(await row.count(), 1, "the paired device is still listed");
  assert.match(await row.textContent(), /alice-desktop/);

  await page.goto(site.origin + "/prompts");
  await page.waitForSelector(`tr[data-job="${jobId}"] .badge[data-state="queued"]`);

  // The device is still paired: its signed requests authenticate, and it takes the queued prompt.
  assert.equal((await daemon.heartbeat()).status, 200);
  const { stub, payload } = await daemon.runOne((p) => `yes: ${p.prompt}`);
  assert.equal(stub.id, jobId);
  assert.deepEqual(payload, { prompt: "Still there after a restart?" });
  await page.waitForSelector(`tr[data-job="${jobId}"] .badge[data-state="ok"]`);
  await page.goto(site.origin + `/prompts/${jobId}`);
  assert.equal(await page.textContent("#result"), "yes: Still there after a restart?");
});

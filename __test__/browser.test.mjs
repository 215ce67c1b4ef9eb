// The example site in a real browser: a person signs in, approves the pairing
// code a daemon-side client shows, sends a prompt, the client runs it, and the
// page — polling the site's JSON endpoint with its own script — shows the
// answer. Chromium from Debian (/usr/bin/chromium, or BYOLLM_CHROMIUM),
// driven by playwright-core.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { TestDaemon } from "./site-daemon.mjs";
import { startSiteProcess } from "./site-harness.mjs";

const executablePath = process.env.BYOLLM_CHROMIUM ?? "/usr/bin/chromium";

let site;
let context;
let profile;

before(async () => {
  // Fail, not skip: CI installs chromium, and a missing browser must be seen.
  assert.ok(
    existsSync(executablePath),
    `chromium is not installed at ${executablePath}: install it (apt-get install chromium) or point BYOLLM_CHROMIUM at one`,
  );
  site = await startSiteProcess();
  profile = mkdtempSync(join(tmpdir(), "byollm-chromium-"));
  // A persistent context is how playwright takes a fresh --user-data-dir.
  context = await chromium.launchPersistentContext(profile, {
    executablePath,
    headless: true,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
    timeout: 30_000,
  });
});

after(async () => {
  await context?.close();
  await site?.stop();
  if (profile) rmSync(profile, { recursive: true, force: true });
});

test("a person pairs a device, sends a prompt and sees its answer in the browser", async () => {
  const page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(15_000);

  await page.goto(site.origin + "/");
  await page.fill("#name", "alice");
  await page.click("#signin");
  await page.waitForSelector("#site-key");
  assert.equal(await page.textContent("#who"), "alice");

  // The daemon asks for a code and would print verificationUrl + userCode.
  const daemon = new TestDaemon(site.origin, { label: "alice-desktop" });
  const started = await daemon.pairStart();
  await page.goto(started.verificationUrl);
  await page.fill("#code", started.userCode);
  await page.click("#lookup");
  await page.waitForSelector("#pending");
  assert.equal(await page.textContent("#label"), "alice-desktop");
  assert.equal(await page.textContent("#fingerprint"), daemon.fingerprint, "the page shows the fingerprint the daemon printed");
  await page.click("#approve");
  await page.waitForSelector("#approved");

  const polled = await daemon.waitForApproval(started.deviceCode);
  assert.equal(polled.owner, "alice");
  assert.equal(await page.textContent("#runner-id"), polled.runnerId);
  await daemon.heartbeat();

  await page.goto(site.origin + "/prompts");
  assert.match(await page.textContent("#availability"), /A device of yours can run this/);
  await page.fill("#prompt", "What is 6 × 7?");
  await page.click("#send");
  await page.waitForURL(/\/prompts\/[0-9a-f-]{36}$/);
  const jobId = await page.textContent("#job-id");
  await page.waitForFunction(() => document.getElementById("state")?.textContent === "queued");

  const { stub, payload } = await daemon.runOne((p) => `echo: ${p.prompt} — 42`);
  assert.equal(stub.id, jobId);
  assert.deepEqual(payload, { prompt: "What is 6 × 7?" });

  // The page's own polling picks the result up; nothing reloads it.
  await page.waitForFunction(() => document.getElementById("state")?.textContent === "ok");
  assert.equal(await page.textContent("#result"), "echo: What is 6 × 7? — 42");
  assert.match(await page.textContent("#meta"), new RegExp(`ran on ${daemon.runnerId} with echo-model`));

  // And the devices page lists it, with a working revoke button.
  await page.goto(site.origin + "/devices");
  const row = page.locator(`tr[data-runner="${daemon.runnerId}"]`);
  await row.getByRole("button", { name: "Revoke" }).click();
  // The form posts and the site redirects back to /devices; wait for the new page's row.
  await page.waitForFunction(
    (id) => document.querySelector(`tr[data-runner="${id}"]`)?.textContent?.includes("revoked") ?? false,
    daemon.runnerId,
  );
  assert.equal(await row.getByRole("button", { name: "Revoke" }).count(), 0, "a revoked device has no revoke button");
  assert.equal((await daemon.heartbeat()).status, 403);
});

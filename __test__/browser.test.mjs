// The example site in a real browser, as a person uses it: sign in, approve
// the pairing code a daemon-side client shows, send prompts and watch their
// answers arrive without reloading, read the status view, revoke the device
// after confirming. Chromium from Debian (/usr/bin/chromium, or
// BYOLLM_CHROMIUM), driven by playwright-core.
//
// It takes the README's screenshots on the way. They are written to
// docs/screenshots/ when BYOLLM_UPDATE_SCREENSHOTS=1, else to a temp folder
// (every run takes them, so the code that takes them is always exercised).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { TestDaemon } from "./site-daemon.mjs";
import { root, startSiteProcess } from "./site-harness.mjs";

const executablePath = process.env.BYOLLM_CHROMIUM ?? "/usr/bin/chromium";
const update = process.env.BYOLLM_UPDATE_SCREENSHOTS === "1";

let site;
let context;
let profile;
let shots;
const failedRequests = [];

before(async () => {
  // Fail, not skip: `npm test` installs chromium, and a missing browser must be seen.
  assert.ok(
    existsSync(executablePath),
    `chromium is not installed at ${executablePath}: install it (apt-get install chromium) or point BYOLLM_CHROMIUM at one`,
  );
  site = await startSiteProcess();
  profile = mkdtempSync(join(tmpdir(), "byollm-chromium-"));
  shots = update ? join(root, "docs", "screenshots") : join(profile, "screenshots");
  mkdirSync(shots, { recursive: true });
  if (!update) console.log(`screenshots go to a temp folder; BYOLLM_UPDATE_SCREENSHOTS=1 writes docs/screenshots/`);
  // A persistent context is how playwright takes a fresh --user-data-dir.
  context = await chromium.launchPersistentContext(profile, {
    executablePath,
    headless: true,
    viewport: { width: 1000, height: 660 },
    deviceScaleFactor: 1,
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
  // Every answer the site gives the browser (pages, scripts' fetches, the favicon) must be a success.
  context.on("response", (response) => {
    if (response.status() >= 400) failedRequests.push(`${response.status()} ${response.url()}`);
  });
});

after(async () => {
  await context?.close();
  await site?.stop();
  if (profile) rmSync(profile, { recursive: true, force: true });
});

async function screenshot(page, name) {
  const path = join(shots, `${name}.png`);
  await page.screenshot({ path, fullPage: true });
  const size = statSync(path).size;
  assert.ok(size < 150 * 1024, `${name}.png is ${size} bytes: keep the checked-in screenshots small`);
}

test("a person pairs a device, sends prompts and sees answers live, reads the status, revokes after confirming", { timeout: 120_000 }, async () => {
  const page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(15_000);

  await page.goto(site.origin + "/");
  await page.fill("#name", "alice");
  await page.click("#signin");
  await page.waitForSelector("#site-key");
  assert.equal(await page.textContent("#who"), "alice");

  // Pair: the daemon asks for a code and prints verificationUrl + userCode.
  const daemon = new TestDaemon(site.origin, { label: "alice-desktop" });
  const started = await daemon.pairStart();
  await page.goto(started.verificationUrl);
  await page.fill("#code", started.userCode);
  await page.click("#lookup");
  await page.waitForSelector("#pending");
  assert.equal(await page.textContent("#label"), "alice-desktop");
  assert.equal(await page.textContent("#fingerprint"), daemon.fingerprint, "the page shows the fingerprint the daemon printed");
  assert.match(await page.textContent("#pending"), /Code expires\s*in (9|10) minutes/, "the expiry reads as a human time");
  // One primary action and one destructive one, side by side and told apart by their look.
  const approve = page.locator("#approve");
  const deny = page.locator("#deny");
  assert.equal(await approve.textContent(), "Approve alice-desktop");
  assert.match(await deny.textContent(), /not me/);
  assert.notEqual(await approve.evaluate((b) => getComputedStyle(b).backgroundColor), await deny.evaluate((b) => getComputedStyle(b).backgroundColor));
  const [a, d] = [await approve.boundingBox(), await deny.boundingBox()];
  assert.ok(Math.abs(a.y - d.y) < 2 && d.x > a.x + a.width, "approve and deny sit on one row");
  await screenshot(page, "pair");

  await approve.click();
  await page.waitForSelector("#approved");
  const polled = await daemon.waitForApproval(started.deviceCode);
  assert.equal(polled.owner, "alice");
  assert.equal(await page.textContent("#runner-id"), polled.runnerId, "the device id is there, under technical details");
  assert.equal(await page.locator("#runner-id").isVisible(), false, "but not shown to the person by default");
  await daemon.heartbeat();

  // Prompt with a live result: the page shows the prompt, then the answer when the device sends it.
  await page.goto(site.origin + "/prompts");
  assert.match(await page.textContent("#availability"), /A device of yours can run this/);
  const textarea = await page.locator("#prompt").boundingBox();
  const card = await page.locator("#prompt").evaluate((t) => t.closest(".card").getBoundingClientRect().right);
  assert.ok(textarea.x + textarea.width <= card, "the textarea fits its column");
  await page.fill("#prompt", "What is 6 × 7?");
  await page.click("#send");
  await page.waitForURL(/\/prompts\/[0-9a-f-]{36}$/);
  const jobId = await page.textContent("#job-id");
  assert.equal(await page.textContent("#prompt-text"), "What is 6 × 7?", "the prompt is on its page");
  await page.waitForSelector('#state[data-state="queued"]');
  assert.equal(await page.textContent("#state"), "Waiting for a device");

  const { stub, payload } = await daemon.runOne((p) => `echo: ${p.prompt} — 42`);
  assert.equal(stub.id, jobId);
  assert.deepEqual(payload, { prompt: "What is 6 × 7?" });
  // The page's own polling picks the result up; nothing reloads it.
  await page.waitForSelector('#state[data-state="ok"]');
  assert.equal(await page.textContent("#state"), "Answered");
  assert.equal(await page.textContent("#result"), "echo: What is 6 × 7? — 42");
  assert.equal(await page.textContent("#answerer"), "alice-desktop");
  assert.match(await page.textContent("#meta"), /^Answered by alice-desktop with echo-model · \d+\.\d s after you sent it$/, "the device by its name, not its id");
  await screenshot(page, "prompt");

  // The list of prompts updates by itself too.
  await page.goto(site.origin + "/prompts");
  await page.fill("#prompt", "Write a haiku about a laptop that answers its owner's questions.");
  await page.click("#send");
  await page.waitForURL(/\/prompts\/[0-9a-f-]{36}$/);
  const second = await page.textContent("#job-id");
  await page.goto(site.origin + "/prompts");
  await page.waitForSelector(`tr[data-job="${second}"] .badge[data-state="queued"]`);
  await daemon.runOne(() => "Lid open, fan hums low —\nthe question leaves, the answer\nnever left the desk.");
  await page.waitForSelector(`tr[data-job="${second}"] .badge[data-state="ok"]`);
  assert.equal(await page.textContent(`tr[data-job="${second}"] td:nth-child(3)`), "alice-desktop");

  // Status: numbers and a chart, live. One job running now, two answered.
  await page.goto(site.origin + "/prompts");
  await page.fill("#prompt", "Summarise today's notes.");
  await page.click("#send");
  await page.waitForURL(/\/prompts\/[0-9a-f-]{36}$/);
  await page.goto(site.origin + "/status");
  await page.waitForSelector('[data-count="queued"] b');
  assert.equal(await page.textContent('[data-count="online"] b'), "1");
  assert.equal(await page.textContent('[data-count="queued"] b'), "1");
  assert.equal(await page.textContent('[data-count="answered"] b'), "2");
  const running = await daemon.claimOne();
  await page.waitForFunction(() => document.querySelector('[data-count="running"] b')?.textContent === "1");
  assert.equal(await page.textContent('[data-count="queued"] b'), "0");
  assert.ok((await page.locator("#chart-svg rect").count()) >= 12, "the chart draws a bar per five minutes");
  await screenshot(page, "status");
  await daemon.fetchPayload(running);
  await daemon.sendResult(running, "Three meetings, one decision: ship on Friday.");
  await page.waitForFunction(() => document.querySelector('[data-count="answered"] b')?.textContent === "3");
  assert.equal(await page.textContent('[data-count="running"] b'), "0");

  // Revoke, with a confirmation step; "Keep it" leaves the device alone.
  await page.goto(site.origin + "/devices");
  const row = page.locator(`tr[data-runner="${daemon.runnerId}"]`);
  assert.equal(await row.getAttribute("data-state"), "online");
  assert.doesNotMatch(await page.textContent("#devices"), new RegExp(daemon.runnerId), "the devices page names devices, not runner ids");
  await row.getByRole("link", { name: "Revoke…" }).click();
  await page.waitForSelector("#confirm");
  assert.equal(await page.textContent("#confirm-revoke"), "Revoke alice-desktop");
  await screenshot(page, "revoke");
  await page.click("#keep");
  await page.waitForSelector("#devices");
  assert.equal(await row.getAttribute("data-state"), "online", "keeping it changes nothing");
  assert.equal((await daemon.heartbeat()).status, 200);

  await row.getByRole("link", { name: "Revoke…" }).click();
  await page.click("#confirm-revoke");
  await page.waitForSelector("#revoked-notice");
  assert.match(await page.textContent("#revoked-notice"), /alice-desktop is revoked/);
  assert.equal(await row.getAttribute("data-state"), "revoked");
  assert.equal(await row.getByRole("link", { name: "Revoke…" }).count(), 0, "a revoked device has no revoke button");
  assert.equal((await daemon.heartbeat()).status, 403);

  // No page, script fetch or favicon got an error from the site.
  assert.deepEqual(failedRequests, []);
  // And the console told the story, one line each.
  const out = site.output().stdout;
  assert.match(out, /^\d\d:\d\d:\d\d pairing approved: alice-desktop \(linux, byollm [\d.]+\) now runs prompts for alice$/m);
  assert.match(out, new RegExp(`^\\d\\d:\\d\\d:\\d\\d job ${jobId.slice(0, 8)} for alice: answered on alice-desktop \\(echo-model\\) after \\d+\\.\\d s$`, "m"));
  assert.match(out, /^\d\d:\d\d:\d\d device revoked: alice revoked alice-desktop$/m);
  assert.match(out, /^\d\d:\d\d:\d\d refused POST \/byollm\/heartbeat from alice-desktop \(alice\): 403 revoked: .+$/m);
});

// Runs @byollm/conformance's certify() with an allowance for the kit's own timing.
//
// Some checks give the kit's in-process daemon a fixed wall-clock moment (C003
// sleeps 50 ms and then expects its backend to have been called; others wait a
// few seconds). On a loaded 2-core machine (npm test runs several files at
// once) that moment can pass before the daemon's own work is scheduled,
// whatever the server does. A run whose ONLY failures carry such a timing
// message re-runs exactly those checks, up to three times, and says so; any
// other failure, or a timing failure in every run, stands.
import { certify } from "@byollm/conformance";

const TIMING_MESSAGES = [/never reached the backend/, /^timed out after \d+ms waiting for/];
const TIMING_RETRIES = 3;

export async function certifyAllowingTimingRetries(target, options = {}) {
  const first = await certify(target, options);
  let results = first.results;
  for (let attempt = 1; attempt <= TIMING_RETRIES; attempt += 1) {
    const failed = results.filter((r) => !r.passed);
    const timingOnly = failed.length > 0 && failed.every((r) => TIMING_MESSAGES.some((re) => re.test(r.error ?? "")));
    if (!timingOnly) break;
    const ids = failed.map((r) => r.check.id);
    console.log(
      `# conformance: ${ids.join(", ")} failed on the kit's own timing (${failed.map((r) => r.error).join("; ")}); ` +
        `running ${ids.length === 1 ? "it" : "them"} again (${attempt} of ${TIMING_RETRIES})`,
    );
    const again = await certify(target, { ...options, only: ids });
    const byId = new Map(again.results.map((r) => [r.check.id, r]));
    results = results.map((r) => byId.get(r.check.id) ?? r);
  }
  return { ...first, results, passed: results.every((r) => r.passed) };
}

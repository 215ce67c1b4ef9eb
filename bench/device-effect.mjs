// How much the simulated device's own work moves the server-side figures.
//
// The in-process cycle runs the device on the server's thread. Its garbage is
// collected inside the server's timed windows now and then, and its work
// between requests leaves the server's caches cold. On a real deployment the
// daemon is on another machine and none of that happens. This runs the same
// in-process cycle, reference and ours interleaved, with two devices:
// - @byollm/protocol: the real daemon's library, and `npm run bench`'s device;
// - plain libsodium (bench/lean-device.mjs): the same work, little garbage.
// For each: jobs/s server side, the ratio, the garbage-collection time that
// fell inside the server's windows, and the device's own time.
//
// Run: node_modules/node/bin/node bench/device-effect.mjs [--fill=100000] [--rounds=6]
// (Node >= 22.14: the reference needs it.)
import { PerformanceObserver } from "node:perf_hooks";
import * as protocol from "@byollm/protocol";
import { cycles, loadImpls } from "./full-cycle.mjs";
import * as lean from "./lean-device.mjs";

const arg = (name, fallback) => {
  const hit = process.argv.find((a) => a.startsWith(`--${name}=`));
  return hit ? Number(hit.slice(name.length + 3)) : fallback;
};
const fill = arg("fill", 1000);
const rounds = arg("rounds", 6);

const devices = [
  ["@byollm/protocol", protocol],
  ["plain libsodium", lean],
];

const gcs = [];
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) gcs.push(e.startTime, e.startTime + e.duration);
}).observe({ entryTypes: ["gc"] });

/** Milliseconds of garbage collection inside the windows [start, end, start, end, ...]. */
function gcInside(windows) {
  let ms = 0;
  let w = 0;
  for (let g = 0; g < gcs.length; g += 2) {
    while (w < windows.length && windows[w + 1] <= gcs[g]) w += 2;
    for (let at = w; at < windows.length && windows[at] < gcs[g + 1]; at += 2) {
      ms += Math.max(0, Math.min(gcs[g + 1], windows[at + 1]) - Math.max(gcs[g], windows[at]));
    }
  }
  return ms;
}

const { ref, ours } = await loadImpls();
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

async function one(impl, jobs, deviceCrypto) {
  const windows = [];
  gcs.length = 0;
  const r = await cycles(impl, { jobs, promptChars: 1000, fill, population: "backlog", deviceCrypto, windows });
  // Let the observer deliver the last entries.
  await new Promise((resolve) => setTimeout(resolve, 10));
  return { rate: r.serverJobsPerSec, gcUsPerJob: (gcInside(windows) / jobs) * 1000, deviceMs: r.deviceMsPerJob };
}

const refJobs = fill >= 100_000 ? 30 : 100;
const results = new Map(devices.map(([name]) => [name, { ref: [], ours: [] }]));
for (let round = -1; round < rounds; round++) {
  // Alternate the order, so no device always runs first in a round.
  const order = round % 2 ? [...devices].reverse() : devices;
  for (const [name, crypto] of order) {
    const o = await one(ours, 400, crypto);
    const r = await one(ref, refJobs, crypto);
    if (round < 0) continue; // warm-up
    results.get(name).ours.push(o);
    results.get(name).ref.push(r);
  }
}

console.log(`In-process full cycle, 1 KB prompt, ${fill.toLocaleString("en-US")} jobs queued for other owners; medians of ${rounds} interleaved rounds`);
console.log(
  `${"device".padEnd(20)}${"reference".padStart(11)}${"ours".padStart(9)}${"ratio".padStart(9)}   GC in server windows (µs/job) ref / ours   device ms/job`,
);
for (const [name] of devices) {
  const { ref: r, ours: o } = results.get(name);
  const rr = median(r.map((x) => x.rate));
  const or = median(o.map((x) => x.rate));
  const gr = median(r.map((x) => x.gcUsPerJob));
  const go = median(o.map((x) => x.gcUsPerJob));
  const dm = median(o.map((x) => x.deviceMs));
  console.log(
    `${name.padEnd(20)}${rr.toFixed(1).padStart(11)}${or.toFixed(0).padStart(9)}${`${(or / rr).toFixed(2)}x`.padStart(9)}   ${gr.toFixed(1).padStart(16)} / ${go.toFixed(1).padEnd(16)}${dm.toFixed(3).padStart(10)}`,
  );
}

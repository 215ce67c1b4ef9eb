#!/usr/bin/env node
// Where our server's time goes, per native call, in the full job cycle
// (bench/full-cycle.mjs, in-process, 1 KB prompt, ours only): every method of
// the addon's SiteKeyring, NativeMemoryStore and Engine is wrapped with a
// timer, and the engine's calls on our own store (`serveNative`) are split by
// endpoint. Prints p50 and mean µs a call and the native share of the
// server-side time a job.
//
//   node_modules/node/bin/node bench/native-calls.mjs [JOBS] [--fill=N] [--history]
//
// NAPI_RS_NATIVE_LIBRARY_PATH=<a .node> measures another build of the addon.
import { Engine, NativeMemoryStore, SiteKeyring } from "../index.js";
import { cycles, loadImpls } from "./full-cycle.mjs";

const args = process.argv.slice(2);
const jobs = Number(args.find((a) => /^\d+$/.test(a)) ?? 3000);
const fill = Number(args.find((a) => a.startsWith("--fill="))?.slice(7) ?? 1000);
const population = args.includes("--history") ? "history" : "backlog";

const calls = new Map();
function wrap(proto, prefix, keyOf) {
  for (const name of Object.getOwnPropertyNames(proto)) {
    const original = Object.getOwnPropertyDescriptor(proto, name)?.value;
    if (name === "constructor" || typeof original !== "function") continue;
    proto[name] = function timed(...a) {
      const t = process.hrtime.bigint();
      const out = original.apply(this, a);
      const us = Number(process.hrtime.bigint() - t) / 1000;
      const key = keyOf?.(name, a) ?? `${prefix}${name}`;
      let list = calls.get(key);
      if (list === undefined) calls.set(key, (list = []));
      list.push(us);
      return out;
    };
  }
}
wrap(SiteKeyring.prototype, "");
wrap(NativeMemoryStore.prototype, "store.");
wrap(Engine.prototype, "engine.", (name, a) => (name === "serveNative" ? `engine.serveNative ${a[1]}` : undefined));

const { ours } = await loadImpls();
await cycles(ours, { jobs: Math.min(500, jobs), promptChars: 1000, fill, population });
calls.clear();
const run = await cycles(ours, { jobs, promptChars: 1000, fill, population });

const p50 = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;
let perJob = 0;
console.log(`${jobs} cycles, ${fill.toLocaleString("en")} stored jobs (${population}), Node ${process.version}`);
for (const [name, list] of calls) {
  // The fill's own store.create calls are not part of a cycle.
  if (list.length < jobs) continue;
  perJob += (mean(list) * list.length) / jobs;
  console.log(`  ${name.padEnd(24)} ${String(list.length).padStart(6)} calls  p50 ${p50(list).toFixed(1).padStart(6)} µs  mean ${mean(list).toFixed(1).padStart(6)} µs`);
}
const serverUs = 1e6 / run.serverJobsPerSec;
console.log(`  native calls ${perJob.toFixed(0)} µs of ${serverUs.toFixed(0)} µs a job server side (${((100 * perJob) / serverUs).toFixed(0)}%)`);

// A site on the durable store, serving HTTP on 127.0.0.1 in its own process,
// for __test__/durable-crash.test.mjs (which kills it with SIGKILL).
//   BYOLLM_DB        the store file
//   BYOLLM_SITE_KEYS the site keys as JSON (the same across restarts)
// The daemon protocol is under /byollm; /admin/* are the site's own calls:
//   POST /admin/enqueue {owner, prompt}   -> {id}   once the enqueue resolved
//   POST /admin/approve {userCode, owner} -> the runner record
//   POST /admin/results {ids}             -> {[id]: {state, text} | null}
// Prints `LISTENING <url>` when ready.
import { MemoryStore } from "../../dist/index.js";
import { makeSite, listen } from "../hardening-harness.mjs";

const store = new MemoryStore({ path: process.env.BYOLLM_DB, defaultTtlMs: 600_000 });
const site = await makeSite("ours", { store, siteKeys: JSON.parse(process.env.BYOLLM_SITE_KEYS), leaseMs: 2_000 });

const admin = {
  async enqueue({ owner, prompt }) {
    const handle = await site.app.enqueue({ kind: "llm.generate", payload: { prompt }, owner });
    return { id: handle.id };
  },
  approve: ({ userCode, owner }) => site.app.approvePairing({ userCode, owner }),
  async results({ ids }) {
    const out = {};
    for (const id of ids) {
      const result = await site.app.result(id);
      out[id] = result === null ? null : { state: result.state, text: result.outcome?.text ?? null };
    }
    return out;
  },
};

const server = await listen(async (request) => {
  const url = new URL(request.url);
  if (url.pathname.startsWith("/admin/")) {
    const call = admin[url.pathname.slice("/admin/".length)];
    if (call === undefined) return new Response("not found", { status: 404 });
    try {
      return Response.json(await call(await request.json()));
    } catch (error) {
      return Response.json({ error: String(error?.message ?? error) }, { status: 500 });
    }
  }
  return site.handler(request);
});
process.stdout.write(`LISTENING ${server.url}\n`);

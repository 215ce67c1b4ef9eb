// One app process of __test__/idle-fleet.test.mjs: a ByollmApp and
// createFetchHandler over a postgresStore of its own on the shared database,
// served on loopback. Started with fork(); argv: the database URL, the site
// keys (JSON), `on`/`off` for the store's `notifications`, the lease in ms.
//
//   POST /byollm/<endpoint>   the protocol, as a site serves it
//   POST /test/app            {method, args, aheadMs?}: app[method](...args), on
//                             an app whose clock runs `aheadMs` ahead when given
//   GET  /test/channel        whether the store has a notification channel
//
// Sends {origin} over IPC once listening.
import { createServer } from "node:http";
import { ByollmApp, createFetchHandler } from "../../dist/index.js";
import { postgresStore } from "../../dist/postgres.js";
import { sqlStorePaths } from "../../dist/sql-store.js";

const [dbUrl, keysJson, notifications, leaseMs] = process.argv.slice(2);
const siteKeys = JSON.parse(keysJson);
const store = postgresStore({ connectionString: dbUrl, notifications: notifications === "on" });
const app = new ByollmApp({ store, siteKeys });
const handler = createFetchHandler({ store, siteKeys, verificationUrl: "http://127.0.0.1/pair", leaseMs: Number(leaseMs) });

const server = createServer(async (req, res) => {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  const body = Buffer.concat(chunks);
  try {
    if (req.url === "/test/app") {
      const { method, args, aheadMs } = JSON.parse(body.toString());
      const on = aheadMs ? new ByollmApp({ store, siteKeys, now: () => Date.now() + aheadMs }) : app;
      const out = await on[method](...args);
      res.end(JSON.stringify({ ok: out === undefined ? null : method === "enqueue" ? { id: out.id } : out }));
      return;
    }
    if (req.url === "/test/channel") {
      res.end(JSON.stringify({ channel: sqlStorePaths(store)?.idle !== undefined }));
      return;
    }
    const headers = new Headers();
    for (const [k, v] of Object.entries(req.headers)) if (typeof v === "string") headers.set(k, v);
    const response = await handler(new Request(`http://127.0.0.1${req.url}`, { method: req.method, headers, body }));
    res.writeHead(response.status, Object.fromEntries(response.headers));
    res.end(Buffer.from(await response.arrayBuffer()));
  } catch (error) {
    res.writeHead(500);
    res.end(JSON.stringify({ error: String(error?.message ?? error) }));
  }
});
server.listen(0, "127.0.0.1", () => process.send({ origin: `http://127.0.0.1:${server.address().port}` }));
process.on("disconnect", () => {
  server.close();
  void store.close().finally(() => process.exit(0));
});

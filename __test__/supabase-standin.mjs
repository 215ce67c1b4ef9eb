// A STAND-IN for PostgREST, for tests only. PostgREST itself cannot be
// installed here, so this implements just the HTTP calls supabase-js makes for
// supabaseStore and for a browser session reading its rows, with PostgREST's
// own conventions for them, on top of a real PostgreSQL:
//
//   POST /rest/v1/rpc/<fn>   named arguments in a JSON body → the function's
//                            result as JSON (204 for void); errors as
//                            {code, message, details, hint} with status 400
//                            (403 for permission denied)
//   GET  /rest/v1/<table>    ?select=* only, no filters: the rows the caller's
//                            role may see (RLS applies)
//
// Like PostgREST, every request runs in a transaction as the JWT's `role`
// (SET LOCAL ROLE) with the claims in `request.jwt.claims`, which is what
// auth.uid() reads. The JWT is verified (HS256, the test's secret). Anything
// else is 404: it is not a general PostgREST.
import { createServer } from "node:http";
import { createHmac, timingSafeEqual } from "node:crypto";
import { testPool } from "./postgres-db.mjs";

const b64url = (buf) => Buffer.from(buf).toString("base64url");

/** An HS256 JWT, as Supabase issues for the anon/service keys and user sessions. */
export function signJwt(claims, secret) {
  const head = b64url(JSON.stringify({ alg: "HS256", typ: "JWT" }));
  const body = b64url(JSON.stringify(claims));
  const sig = createHmac("sha256", secret).update(`${head}.${body}`).digest("base64url");
  return `${head}.${body}.${sig}`;
}

function verifyJwt(token, secret) {
  const parts = token.split(".");
  if (parts.length !== 3) return null;
  const expected = createHmac("sha256", secret).update(`${parts[0]}.${parts[1]}`).digest();
  const given = Buffer.from(parts[2], "base64url");
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) return null;
  try {
    return JSON.parse(Buffer.from(parts[1], "base64url").toString("utf8"));
  } catch {
    return null;
  }
}

const ROLES = new Set(["anon", "authenticated", "service_role"]);
const TABLES = new Set(["byollm_jobs", "byollm_runners", "byollm_pairings", "byollm_job_cancels"]);

/** Start the stand-in on 127.0.0.1 (random port). Returns {url, close, requests}. */
export async function startPostgrestStandIn({ connectionString, jwtSecret }) {
  const pool = testPool(connectionString, 4);
  const signatures = new Map();
  const requests = [];

  async function signature(client, fn) {
    let sig = signatures.get(fn);
    if (sig === undefined) {
      const { rows } = await client.query(
        `select coalesce(p.proargnames, '{}') as names,
                array(select format_type(t, null) from unnest(p.proargtypes) t) as types,
                p.proretset as set, p.prorettype = 'void'::regtype as void
           from pg_proc p where p.proname = $1 and p.pronamespace = 'public'::regnamespace`,
        [fn],
      );
      sig = rows.length === 1 ? rows[0] : null;
      signatures.set(fn, sig);
    }
    return sig;
  }

  function send(res, status, body) {
    res.writeHead(status, { "content-type": "application/json; charset=utf-8" });
    res.end(body === undefined ? "" : JSON.stringify(body));
  }

  async function handle(req, res) {
    const url = new URL(req.url, "http://standin");
    requests.push(`${req.method} ${url.pathname}`);
    const auth = req.headers.authorization ?? "";
    const claims = auth.startsWith("Bearer ") ? verifyJwt(auth.slice(7), jwtSecret) : null;
    if (!claims || !ROLES.has(claims.role)) return send(res, 401, { code: "PGRST301", message: "JWT invalid", details: null, hint: null });

    let text = "";
    for await (const chunk of req) text += chunk;

    const rpc = /^\/rest\/v1\/rpc\/([a-z_][a-z0-9_]*)$/.exec(url.pathname);
    const table = /^\/rest\/v1\/([a-z_][a-z0-9_]*)$/.exec(url.pathname);
    if (!(rpc && req.method === "POST") && !(table && req.method === "GET" && TABLES.has(table[1]))) {
      return send(res, 404, { code: "PGRST000", message: "not served by the stand-in", details: null, hint: null });
    }

    const client = await pool.connect();
    try {
      await client.query("begin");
      await client.query(`set local role ${claims.role}`);
      await client.query("select set_config('request.jwt.claims', $1, true)", [JSON.stringify(claims)]);
      let status = 200;
      let body;
      if (rpc) {
        const fn = rpc[1];
        const sig = await signature(client, fn);
        if (!sig) {
          await client.query("rollback");
          return send(res, 404, { code: "PGRST202", message: `Could not find the function public.${fn}`, details: null, hint: null });
        }
        const args = text === "" ? {} : JSON.parse(text);
        // Arguments by name, converted from JSON to the declared type, the
        // way PostgREST does; omitted ones take their defaults.
        const parts = [];
        sig.names.forEach((name, i) => {
          if (!(name in args)) return;
          const type = sig.types[i];
          const expr =
            type === "jsonb" ? `($1::jsonb -> '${name}')` : type === "text" ? `($1::jsonb ->> '${name}')` : `($1::jsonb ->> '${name}')::${type}`;
          parts.push(`${name} => ${expr}`);
        });
        const callSql = `${fn}(${parts.join(", ")})`;
        const sql = sig.void
          ? `select ${callSql}`
          : sig.set
            ? `select coalesce(jsonb_agg(to_jsonb(t)), '[]'::jsonb) as r from ${callSql} t`
            : `select to_jsonb(${callSql}) as r`;
        const { rows } = await client.query(sql, [JSON.stringify(args)]);
        if (sig.void) status = 204;
        else body = rows[0]?.r ?? null;
      } else {
        const { rows } = await client.query(`select coalesce(jsonb_agg(to_jsonb(t)), '[]'::jsonb) as r from ${table[1]} t`);
        body = rows[0].r;
      }
      await client.query("commit");
      if (status === 204) return send(res, 204);
      return send(res, status, body);
    } catch (error) {
      await client.query("rollback").catch(() => undefined);
      const status = error.code === "42501" ? 403 : 400;
      return send(res, status, { code: error.code ?? "", message: error.message, details: error.detail ?? null, hint: error.hint ?? null });
    } finally {
      client.release();
    }
  }

  const server = createServer((req, res) => {
    handle(req, res).catch((error) => send(res, 500, { code: "", message: String(error), details: null, hint: null }));
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    async close() {
      server.closeAllConnections?.();
      await new Promise((resolve) => server.close(resolve));
      await pool.end();
    },
  };
}

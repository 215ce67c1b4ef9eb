// A STAND-IN for PostgREST, for tests only. PostgREST itself cannot be
// installed here, so this implements just the HTTP calls supabase-js makes for
// supabaseStore and for a browser session reading its rows, with PostgREST's
// own conventions for them, on top of a real PostgreSQL:
//
//   POST /rest/v1/rpc/<fn>   named arguments in a JSON body → the function's
//                            result as JSON (204 for void); errors as
//                            {code, message, details, hint} with status 400
//                            (403 for permission denied)
//   GET|POST|PATCH /rest/v1/<table>
//                            the table API subset the reference's
//                            supabaseStore (@byollm/server 0.1.1) and a
//                            browser session use: `select` with plain
//                            columns, `*` and one `!inner` embedding along a
//                            foreign key; filters eq, in, is and or(and(...));
//                            insert, upsert (on_conflict, ignore or merge
//                            duplicates), update; `Prefer: return=
//                            representation`; `Accept: application/vnd.pgrst.
//                            object+json` (406 PGRST116 unless one row)
//
// Like PostgREST, every request runs in a transaction as the JWT's `role`
// (SET LOCAL ROLE) with the claims in `request.jwt.claims`, which is what
// auth.uid() reads. The JWT is verified (HS256, the test's secret). Anything
// else is 404: it is not a general PostgREST.
import { createServer } from "node:http";
import { createHmac, timingSafeEqual } from "node:crypto";
import pg from "pg";
import { testPool } from "./postgres-db.mjs";

const { escapeLiteral } = pg;

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
// Embeddings the adapters use: child table -> parent table -> [child column, parent column].
const EMBEDS = { byollm_job_cancels: { byollm_jobs: ["job_id", "id"] } };
const NAME = /^[a-z_][a-z0-9_]*$/;

/** A refusal the stand-in answers with PostgREST's status and shape. */
class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

const name = (n) => {
  if (!NAME.test(n)) throw new ApiError(400, "PGRST100", `unsupported name: ${n}`);
  return n;
};

/** Split on commas outside parentheses and double quotes. */
function splitTop(text) {
  const out = [];
  let depth = 0;
  let quoted = false;
  let cur = "";
  for (const ch of text) {
    if (ch === '"') quoted = !quoted;
    else if (!quoted && ch === "(") depth++;
    else if (!quoted && ch === ")") depth--;
    if (ch === "," && depth === 0 && !quoted) {
      out.push(cur);
      cur = "";
    } else cur += ch;
  }
  if (cur !== "") out.push(cur);
  return out;
}

/**
 * A value as a SQL literal: requests are sent as one simple-protocol message
 * (see `handle`), which takes no parameters.
 */
const literal = (v) =>
  v === null || v === undefined ? "null" : Array.isArray(v) ? `array[${v.map(literal).join(", ")}]` : escapeLiteral(String(v));

const unquote = (v) => (v.length >= 2 && v.startsWith('"') && v.endsWith('"') ? v.slice(1, -1) : v);

/**
 * SQL for a table request: builds the statement with its parameters from
 * PostgREST's query syntax. `types` maps each table's columns to their types,
 * so a filter value is cast to the column's type (and indexes apply).
 */
function tableSql({ method, table, params, body, prefer, types }) {
  const param = (v, type) => `${literal(v)}::${type}`;
  const colType = (tbl, col) => {
    const t = types.get(tbl)?.get(col);
    if (t === undefined) throw new ApiError(400, "42703", `column ${tbl}.${col} does not exist`);
    return t;
  };

  // select=...: "*", columns, and parent!inner(columns)
  const select = (params.get("select") ?? "*").replace(/\s+/g, "");
  const fields = [];
  const joins = [];
  for (const item of splitTop(select)) {
    const embed = /^([a-z_][a-z0-9_]*)!inner\((.*)\)$/.exec(item);
    if (embed) {
      const parent = embed[1];
      const link = EMBEDS[table]?.[parent];
      if (!link) throw new ApiError(400, "PGRST200", `no relationship ${table} -> ${parent}`);
      joins.push(`join ${parent} ${parent} on ${parent}.${link[1]} = t.${link[0]}`);
      const inner = splitTop(embed[2]).map((c) => `'${name(c)}', ${parent}.${name(c)}`);
      fields.push(() => `'${parent}', jsonb_build_object(${inner.join(", ")})`);
    } else if (item === "*") {
      fields.push(null);
    } else {
      colType(table, item);
      fields.push((alias) => `'${name(item)}', ${alias}.${item}`);
    }
  }
  const projection = (alias) => {
    const parts = fields.filter((f) => f !== null).map((f) => f(alias));
    const star = fields.includes(null) ? `to_jsonb(${alias})` : `'{}'::jsonb`;
    return parts.length === 0 ? star : `${star} || jsonb_build_object(${parts.join(", ")})`;
  };

  // Filters: col=op.value, parent.col=op.value, or=(and(c.op.v,...),...)
  const condition = (tbl, alias, col, op, raw) => {
    const type = colType(tbl, col);
    const ref = `${alias}.${name(col)}`;
    if (op === "eq") return `${ref} = ${param(unquote(raw), type)}`;
    if (op === "is") {
      if (raw === "null") return `${ref} is null`;
      throw new ApiError(400, "PGRST100", `unsupported is.${raw}`);
    }
    if (op === "in") {
      const m = /^\((.*)\)$/.exec(raw);
      if (!m) throw new ApiError(400, "PGRST100", `bad in list: ${raw}`);
      return `${ref} = any (${param(splitTop(m[1]).map(unquote), `${type}[]`)})`;
    }
    throw new ApiError(400, "PGRST100", `unsupported operator: ${op}`);
  };
  const logic = (text) => {
    const group = /^(and|or)\((.*)\)$/.exec(text);
    if (group) return `(${splitTop(group[2]).map(logic).join(` ${group[1]} `)})`;
    const m = /^([a-z_][a-z0-9_]*)\.(eq|in|is)\.(.*)$/.exec(text);
    if (!m) throw new ApiError(400, "PGRST100", `unsupported filter: ${text}`);
    return condition(table, "t", m[1], m[2], m[3]);
  };
  const where = [];
  for (const [key, raw] of params) {
    if (key === "select" || key === "on_conflict" || key === "columns") continue;
    if (key === "or") {
      where.push(logic(`or${raw}`));
      continue;
    }
    const m = /^(eq|in|is)\.(.*)$/.exec(raw);
    if (!m) throw new ApiError(400, "PGRST100", `unsupported filter: ${key}=${raw}`);
    const dotted = /^([a-z_][a-z0-9_]*)\.([a-z_][a-z0-9_]*)$/.exec(key);
    if (dotted) {
      if (!EMBEDS[table]?.[dotted[1]]) throw new ApiError(400, "PGRST100", `unsupported filter: ${key}`);
      where.push(condition(dotted[1], dotted[1], dotted[2], m[1], m[2]));
    } else where.push(condition(table, "t", key, m[1], m[2]));
  }
  const whereSql = where.length === 0 ? "" : ` where ${where.join(" and ")}`;

  if (method === "GET") {
    return {
      sql: `select coalesce(jsonb_agg(${projection("t")}), '[]'::jsonb) as r from ${table} t ${joins.join(" ")}${whereSql}`,
    };
  }
  if (joins.length > 0) throw new ApiError(400, "PGRST100", "embedding is served on reads only");
  const returning = prefer.includes("return=representation");
  const rows = Array.isArray(body) ? body : [body];
  if (rows.length === 0 || rows.some((r) => r === null || typeof r !== "object" || Array.isArray(r))) {
    throw new ApiError(400, "PGRST102", "the body must be an object or an array of objects");
  }
  const cols = Object.keys(rows[0]).map(name);
  for (const c of cols) colType(table, c);
  const doc = param(JSON.stringify(rows), "jsonb");
  let write;
  if (method === "POST") {
    const list = cols.join(", ");
    const conflict = params.get("on_conflict");
    const target = conflict === null ? `on constraint ${table}_pkey` : `(${splitTop(conflict).map(name).join(", ")})`;
    const upsert = prefer.includes("resolution=ignore-duplicates")
      ? ` on conflict ${target} do nothing`
      : prefer.includes("resolution=merge-duplicates")
        ? ` on conflict ${target} do update set ${cols.map((c) => `${c} = excluded.${c}`).join(", ")}`
        : "";
    write = `insert into ${table} as t (${list}) select ${list} from jsonb_populate_recordset(null::${table}, ${doc})${upsert} returning t.*`;
  } else {
    if (rows.length !== 1) throw new ApiError(400, "PGRST102", "an update takes one object");
    const sets = cols.map((c) => `${c} = r.${c}`).join(", ");
    write = `update ${table} t set ${sets} from jsonb_populate_record(null::${table}, ${doc} -> 0) r${whereSql} returning t.*`;
  }
  return {
    sql: `with w as (${write}) select ${returning ? `coalesce(jsonb_agg(${projection("w")}), '[]'::jsonb)` : "null::jsonb"} as r, count(*) as n from w`,
    returning,
  };
}

/** Start the stand-in on 127.0.0.1 (random port). Returns {url, close, requests}. */
export async function startPostgrestStandIn({ connectionString, jwtSecret }) {
  const pool = testPool(connectionString, 4);
  const signatures = new Map();
  const verified = new Map();
  const requests = [];
  let columnTypes;

  async function types(client) {
    if (columnTypes === undefined) {
      const { rows } = await client.query(
        `select c.relname as tbl, a.attname as col, format_type(a.atttypid, a.atttypmod) as type
           from pg_attribute a join pg_class c on c.oid = a.attrelid
          where c.relnamespace = 'public'::regnamespace and c.relname = any ($1) and a.attnum > 0 and not a.attisdropped`,
        [[...TABLES]],
      );
      columnTypes = new Map();
      for (const r of rows) {
        if (!columnTypes.has(r.tbl)) columnTypes.set(r.tbl, new Map());
        columnTypes.get(r.tbl).set(r.col, r.type);
      }
    }
    return columnTypes;
  }

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

  function sendText(res, status, text = "") {
    res.writeHead(status, { "content-type": "application/json; charset=utf-8" });
    res.end(text);
  }

  const send = (res, status, body) => sendText(res, status, body === undefined ? "" : JSON.stringify(body));

  async function handle(req, res) {
    const url = new URL(req.url, "http://standin");
    requests.push(`${req.method} ${url.pathname}`);
    const auth = req.headers.authorization ?? "";
    // Verified once per token, as PostgREST's JWT cache does.
    let claims = verified.get(auth);
    if (claims === undefined) {
      claims = auth.startsWith("Bearer ") ? verifyJwt(auth.slice(7), jwtSecret) : null;
      if (claims !== null) verified.set(auth, claims);
    }
    if (!claims || !ROLES.has(claims.role)) return send(res, 401, { code: "PGRST301", message: "JWT invalid", details: null, hint: null });

    let text = "";
    for await (const chunk of req) text += chunk;

    const rpc = /^\/rest\/v1\/rpc\/([a-z_][a-z0-9_]*)$/.exec(url.pathname);
    const table = /^\/rest\/v1\/([a-z_][a-z0-9_]*)$/.exec(url.pathname);
    const tableMethod = req.method === "GET" || req.method === "POST" || req.method === "PATCH";
    if (!(rpc && req.method === "POST") && !(table && tableMethod && TABLES.has(table[1]))) {
      return send(res, 404, { code: "PGRST000", message: "not served by the stand-in", details: null, hint: null });
    }

    const client = await pool.connect();
    try {
      // One round trip per request, as PostgREST pipelines its own: the
      // statements go in one simple-protocol message, which PostgreSQL runs
      // as one transaction (rolled back whole on an error). The role is one
      // of ROLES, every value a quoted literal.
      const run = async (statement) => {
        const results = await client.query(
          `set local role ${claims.role}; select set_config('request.jwt.claims', ${escapeLiteral(JSON.stringify(claims))}, true); ${statement}`,
        );
        return results[results.length - 1].rows;
      };
      let status = 200;
      let body;
      if (rpc) {
        const fn = rpc[1];
        const sig = await signature(client, fn);
        if (!sig) {
          return send(res, 404, { code: "PGRST202", message: `Could not find the function public.${fn}`, details: null, hint: null });
        }
        const args = text === "" ? {} : JSON.parse(text);
        // Arguments by name, converted from JSON to the declared type, the
        // way PostgREST does; omitted ones take their defaults.
        const doc = `${escapeLiteral(text === "" ? "{}" : text)}::jsonb`;
        const parts = [];
        sig.names.forEach((name, i) => {
          if (!(name in args)) return;
          const type = sig.types[i];
          const expr =
            type === "jsonb" ? `(${doc} -> '${name}')` : type === "text" ? `(${doc} ->> '${name}')` : `(${doc} ->> '${name}')::${type}`;
          parts.push(`${name} => ${expr}`);
        });
        const callSql = `${fn}(${parts.join(", ")})`;
        const sql = sig.void
          ? `select ${callSql}`
          : sig.set
            ? `select coalesce(jsonb_agg(to_jsonb(t)), '[]'::jsonb)::text as r from ${callSql} t`
            : `select to_jsonb(${callSql})::text as r`;
        const rows = await run(sql);
        if (sig.void) status = 204;
        // The JSON text as PostgreSQL wrote it, passed on without a parse.
        else body = rows[0]?.r ?? "null";
      } else {
        const prefer = req.headers.prefer ?? "";
        const built = tableSql({
          method: req.method,
          table: table[1],
          params: url.searchParams,
          body: text === "" ? null : JSON.parse(text),
          prefer,
          types: await types(client),
        });
        const rows = await run(built.sql);
        body = rows[0].r;
        if (req.method !== "GET") {
          status = built.returning ? (req.method === "POST" ? 201 : 200) : req.method === "POST" ? 201 : 204;
          if (!built.returning) body = undefined;
        }
        if ((req.headers.accept ?? "").startsWith("application/vnd.pgrst.object+json") && Array.isArray(body)) {
          if (body.length !== 1) {
            throw new ApiError(406, "PGRST116", "JSON object requested, multiple (or no) rows returned");
          }
          body = body[0];
        }
        if (body !== undefined) body = JSON.stringify(body);
      }
      if (status === 204 || body === undefined) return sendText(res, status);
      return sendText(res, status, body);
    } catch (error) {
      const status = error instanceof ApiError ? error.status : error.code === "42501" ? 403 : 400;
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

// The PostgREST stand-in in a process of its own, for bench/stores.mjs: its
// CPU time is then PostgREST's share, apart from the app's. Sends its URL to
// the parent over IPC and serves until killed.
import { startPostgrestStandIn } from "../__test__/supabase-standin.mjs";

const [connectionString, jwtSecret] = process.argv.slice(2);
const standIn = await startPostgrestStandIn({ connectionString, jwtSecret });
process.send?.({ url: standIn.url });
process.on("disconnect", () => {
  void standIn.close().finally(() => process.exit(0));
});

// Result delivery over Supabase Realtime: the app hears that a job changed the
// moment Postgres commits it, instead of on the next poll. Runner liveness is
// still polled: "nobody has heartbeated lately" is the absence of a row change,
// and there is nothing to subscribe to for that.
import type { SupabaseClient } from "@supabase/supabase-js";
import { waitWithPush } from "../delivery.js";
import type { PollingDeliveryDeps, ResultDelivery } from "../types.js";

/** `ByollmAppOptions.delivery` for an app on Supabase. */
export function supabaseRealtimeDelivery(client: SupabaseClient): (deps: PollingDeliveryDeps) => ResultDelivery {
  const listen = (jobId: string, onChange: () => void) => watchJobRow(client, jobId, onChange);
  return (deps) => ({ waitFor: (jobId, options) => waitWithPush(deps, listen, jobId, options) });
}

/**
 * Call `onChange` (its failure is its own) on every update of the job's row,
 * from any process, until the returned function removes the channel (once,
 * however often it is called; it never rejects: nothing may be left to
 * reject unhandled).
 */
export function watchJobRow(client: SupabaseClient, jobId: string, onChange: () => void): () => Promise<void> {
  const channel = client
    .channel(`byollm_job_${jobId}`)
    .on("postgres_changes", { event: "UPDATE", schema: "public", table: "byollm_jobs", filter: `id=eq.${jobId}` }, () => {
      try {
        onChange();
      } catch {
        // A watcher's failure is its own.
      }
    })
    .subscribe();
  let removed: Promise<void> | undefined;
  return () => (removed ??= client.removeChannel(channel).then(() => undefined, () => undefined));
}

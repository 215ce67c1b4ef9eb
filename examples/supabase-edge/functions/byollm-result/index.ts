// Entry point of the Edge Function: `supabase functions serve byollm-result`.
import { configFromEnv, handle } from "./handler.ts";

const config = configFromEnv((name) => Deno.env.get(name));
Deno.serve((req) => handle(req, config));

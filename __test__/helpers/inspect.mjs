// The core's inspection of a request body and of a sealed outcome, as the
// tests compare them with the reference: validated values as objects (the
// exports hand them over as JSON text).
import * as native from "../../index.js";

/** `{stage: "ok", body}` or `{stage, status, error}`. */
export function inspect(endpoint, text) {
  const r = native.inspectRequest(endpoint, text);
  return r.stage === "ok" ? { stage: "ok", body: JSON.parse(r.body) } : { stage: r.stage, status: r.status, error: { ...r.error } };
}

/** `{ok: true, outcome, ran}` or `{ok: false, message}`. */
export function sealedOutcome(text) {
  const r = native.parseSealedOutcome(text);
  return r.ok ? { ok: true, ...JSON.parse(r.value) } : { ok: false, message: r.message };
}

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

// The enqueue validator and the provenance rule, probed through the calls
// that ship (`SiteKeyring.sealChecked`, `SiteKeyring.acceptResult`), so the
// addon exports nothing for tests alone.
const T0 = 1767225600000;
const SITE = native.generateKeys(T0);
const RING = new native.SiteKeyring(SITE);
const DEVICE = native.generateKeys(T0);
const DEVICE_KEY_ID = native.keyId(DEVICE.identityPublic);

/** The enqueue validator's verdict: `{ok: true, canonical, sizeClass}` (the sealed text) or `{ok: false, message}`. */
export async function payloadVerdict(kind, json) {
  const r = await RING.sealChecked(kind, json, undefined, undefined, "job", T0);
  if (!r.ok) return { ok: false, message: r.message };
  const expected = { jobId: "job", senderKeyId: RING.keyId, recipientKeyId: RING.keyId, direction: "payload" };
  const opened = native.open({ envelope: r.envelope, recipientKeys: SITE, senderIdentityPublic: SITE.identityPublic, expected });
  return { ok: true, canonical: opened.plaintext, sizeClass: r.sizeClass };
}

/** The provenance the site writes for a result of `input` (`provenanceFor`'s input), key order kept. */
export function provenance({ audience, runnerId, runnerOwner, backendClass, model, stop, stopReported }) {
  const ran = { model, backendClass, durationMs: 1 };
  if (stop !== undefined) ran.stop = stop;
  if (stopReported !== undefined) ran.stopReported = stopReported;
  const context = { jobId: "job", senderKeyId: DEVICE_KEY_ID, recipientKeyId: RING.keyId, deadlineAt: T0, direction: "result" };
  const plaintext = JSON.stringify({ outcome: { outcome: "canceled" }, ran });
  const envelope = native.seal({ plaintext, senderKeys: DEVICE, recipientEncryptionPublic: SITE.encryptionPublic, context });
  const r = RING.acceptResult(envelope, "job", DEVICE.identityPublic, "canceled", { audience, runnerId, runnerOwner });
  if (!r.ok) throw new Error(`result refused: ${r.why}`);
  return JSON.parse(r.accepted).provenance;
}

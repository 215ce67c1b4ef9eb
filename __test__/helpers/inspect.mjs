// The core's rules as the tests compare them with the reference: a request
// body's inspection (validated values and refusals as objects; the export
// hands them over as JSON text), and the enqueue validator, a sealed outcome's reading and
// the provenance rule through the calls that ship.
import * as native from "../../index.js";
import * as dev from "./device-crypto.mjs";

/** `{stage: "ok", body}` or `{stage, status, error}`. */
export function inspect(endpoint, text) {
  const r = native.inspectRequest(endpoint, text);
  return r.stage === "ok" ? { stage: "ok", body: JSON.parse(r.body) } : { stage: r.stage, status: r.status, error: JSON.parse(r.error) };
}

const T0 = 1767225600000;
const SITE = native.generateKeys(T0);
const RING = new native.SiteKeyring(SITE);
const DEVICE = native.generateKeys(T0);
const DEVICE_KEY_ID = dev.keyId(DEVICE.identityPublic);

/** The enqueue validator's verdict: `{ok: true, canonical, sizeClass}` (the sealed text) or `{ok: false, message}`. */
export async function payloadVerdict(kind, json) {
  const r = await RING.sealChecked(kind, json, undefined, undefined, "job", T0);
  if (!r.ok) return { ok: false, message: r.message };
  const expected = { jobId: "job", senderKeyId: RING.keyId, recipientKeyId: RING.keyId, direction: "payload" };
  const opened = dev.open({ envelope: r.envelope, recipientKeys: SITE, senderIdentityPublic: SITE.identityPublic, expected });
  return { ok: true, canonical: opened.plaintext, sizeClass: r.sizeClass };
}

/** A device's result of `plaintext` as the site accepts it (`acceptResult`): `{outcome, provenance}`, or `{why}`. */
async function accepted(plaintext, source = { audience: "private", runnerId: "r", runnerOwner: "o" }) {
  let disposition = "ok";
  try {
    const sealed = JSON.parse(plaintext)?.outcome?.outcome;
    if (typeof sealed === "string") disposition = sealed;
  } catch {
    // Not JSON: refused before the disposition is read.
  }
  const context = { jobId: "job", senderKeyId: DEVICE_KEY_ID, recipientKeyId: RING.keyId, deadlineAt: T0, direction: "result" };
  const envelope = dev.seal({ plaintext, senderKeys: DEVICE, recipientEncryptionPublic: SITE.encryptionPublic, context });
  const r = await RING.acceptResult(envelope, "job", DEVICE.identityPublic, disposition, source);
  return r.ok ? JSON.parse(r.accepted) : { why: r.why };
}

/**
 * A sealed outcome's reading: `{ok: true, outcome, ran}`, `ran` as far as the
 * site keeps it (model, backendClass, stop, stopReported), or `{ok: false, message}`.
 */
export async function sealedOutcome(text) {
  const r = await accepted(text);
  if (r.why !== undefined) return { ok: false, message: r.why };
  const { backendClass, model, stop, stopReported } = r.provenance;
  return { ok: true, outcome: r.outcome, ran: keptRan({ model, backendClass, stop, stopReported }) };
}

/** The fields of a sealed `ran` the site keeps, absent ones left out. */
export function keptRan({ model, backendClass, stop, stopReported }) {
  const ran = { model, backendClass };
  if (stop !== undefined) ran.stop = stop;
  if (stopReported !== undefined) ran.stopReported = stopReported;
  return ran;
}

/** The provenance the site writes for a result of `input` (`provenanceFor`'s input), key order kept. */
export async function provenance({ audience, runnerId, runnerOwner, ...ran }) {
  const r = await accepted(JSON.stringify({ outcome: { outcome: "canceled" }, ran: { ...keptRan(ran), durationMs: 1 } }), { audience, runnerId, runnerOwner });
  if (r.why !== undefined) throw new Error(`result refused: ${r.why}`);
  return r.provenance;
}

// Steps the SQL-store tests and the delivery bench take directly on a store,
// as another app instance would: pair a runner, and end a claimed job `ok`.
import { randomUUID } from "node:crypto";

export const HTTP_CAP = { kind: "llm.generate", service: "s", backendId: "ollama", backendClass: "http", model: "m", offerScope: "private" };

/** A pending pairing record under a fresh code, `fields` over it. */
export function pairingRecord(fields = {}) {
  const code = `PAIR-${randomUUID().slice(0, 8).toUpperCase()}`;
  return {
    deviceCodeHash: `hash-${code}`, userCode: code, state: "pending", owner: null, runnerId: null, collected: false,
    label: "l", platform: "linux", daemonVersion: "0.1.1", capabilities: [HTTP_CAP],
    device: { identity: "i", encryption: "e", encryptionSig: "s" }, expiresAt: Date.now() + 600_000, createdAt: Date.now(),
    ...fields,
  };
}

/** A runner of `owner`, paired through a pending pairing and its approval. */
export async function pairRunner(store, owner, capabilities = [HTTP_CAP]) {
  const pairing = pairingRecord({ capabilities });
  await store.createPairing(pairing);
  return store.approvePairing({ userCode: pairing.userCode, owner, runnerId: randomUUID(), now: Date.now() });
}

/** Completes `claimed` (a claim's answer) with an `ok` outcome as `runner` of `owner`, with private provenance. */
export function completeClaimed(store, claimed, runner, owner, { text = "done", now = Date.now() } = {}) {
  return store.complete({
    jobId: claimed.id,
    runnerId: runner.id,
    holder: { by: "lease", leaseId: claimed.lease.id },
    outcome: { outcome: "ok", text },
    provenance: { audience: "private", runnerId: runner.id, runnerOwner: owner, backendClass: "http", model: "m", untrusted: false },
    now,
  });
}

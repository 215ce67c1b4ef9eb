// The engine's store operations (src/engine/ops.rs) performed on a store of
// the app's own: each operation as the store's methods, under a timeout.
// (Our MemoryStore performs them in place, the SQL stores as one SQL
// function each: ts/sql-store.ts.)
import type { PendingRequest } from "./native.js";
import type { ByollmStore } from "./types.js";

/** A store operation: its name and JSON arguments in, its result's JSON text out. */
export type Operations = (op: string, args: string) => Promise<string>;

// Each operation's arguments are its store method's own, by name (src/engine/ops.rs).
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Args = any;

/**
 * Each engine operation and the store methods it stands for, in the order a
 * store of the app's own is called. On our MemoryStore the engine performs
 * the operation in place instead, without calling them: this table is also
 * the list of methods a patch of which makes it go through the methods
 * (ts/memory.ts). An operation's implementation below sees only its own
 * methods, so a call the table does not name does not compile.
 */
export const OPERATION_METHODS = {
  runner: ["getRunner"],
  pairingByCode: ["getPairingByUserCode"],
  createPairing: ["createPairing"],
  pairingByHash: ["getPairingByDeviceCodeHash"],
  consumePairing: ["consumePairingToken"],
  claim: ["claim"],
  job: ["get"],
  resultFor: ["get"],
  heartbeat: ["touchRunner", "renewLeases", "listCancelRequests"],
  complete: ["complete"],
  cancelRequests: ["listCancelRequests"],
  release: ["release"],
  cancel: ["cancel"],
} as const satisfies Record<string, readonly (keyof ByollmStore)[]>;

type Operation = keyof typeof OPERATION_METHODS;
type Performers = {
  readonly [Op in Operation]: (s: Pick<ByollmStore, (typeof OPERATION_METHODS)[Op][number]>, a: Args) => Promise<unknown>;
};

/** A user's own store: each operation as the store's methods. */
const METHODS: Performers = {
  runner: (s, a) => s.getRunner(a.runnerId),
  pairingByCode: (s, a) => s.getPairingByUserCode(a.userCode),
  createPairing: (s, a) => s.createPairing(a.pairing),
  pairingByHash: (s, a) => s.getPairingByDeviceCodeHash(a.hash),
  consumePairing: (s, a) => s.consumePairingToken(a.hash),
  claim: async (s, a) => ({ jobs: await s.claim(a) }),
  job: async (s, a) => ({ job: await s.get(a.jobId) }),
  resultFor: async (s, a) => ({ accepted: false, job: await s.get(a.jobId) }),
  heartbeat: async (s, { runnerId, capabilities, daemonVersion, leases, leaseMs, now }) => {
    await s.touchRunner({ runnerId, capabilities, daemonVersion, now });
    const { lost } = await s.renewLeases({ runnerId, leases, leaseMs, now });
    return { lost, cancel: await s.listCancelRequests(runnerId) };
  },
  complete: (s, a) => s.complete(a),
  cancelRequests: (s, a) => s.listCancelRequests(a.runnerId),
  release: (s, a) => s.release(a),
  cancel: async (s, { jobIds, now }) => {
    for (const id of jobIds as string[]) await s.cancel(id, now);
  },
};

/** The operations of a store of the app's own, as its methods. */
export function methodOperations(store: ByollmStore): Operations {
  return async (op, args) => {
    const method = Object.hasOwn(METHODS, op) ? METHODS[op as Operation] : undefined;
    if (method === undefined) throw new Error(`unknown store operation ${op}`);
    return JSON.stringify(await method(store, JSON.parse(args) as Args)) ?? "null";
  };
}


/**
 * Perform the operation `p` asks for and hand back its result, or its
 * failure: a throw, or no answer within `timeoutMs`.
 */
export async function perform(p: PendingRequest, op: string, operations: Operations, timeoutMs: number): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
  });
  try {
    p.resume(await Promise.race([operations(op, p.args ?? "{}"), timeout]));
  } catch (error) {
    p.fail(`${op}: ${error instanceof Error ? error.message : String(error)}`);
  } finally {
    clearTimeout(timer);
  }
}

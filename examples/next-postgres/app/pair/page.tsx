import { getApp } from "@/lib/byollm";
import { currentUser } from "@/lib/session";

export const dynamic = "force-dynamic";

// The verificationUrl: the person types the code their daemon printed, sees
// what they are about to approve, and approves it as themselves.
export default async function Pair({ searchParams }: { searchParams: Promise<{ code?: string }> }) {
  const user = await currentUser();
  if (user === null) return <p>Sign in on the <a href="/">home page</a> first.</p>;
  const code = (await searchParams).code?.trim() ?? "";
  const pending = code === "" ? null : await getApp().pendingPairing(code);
  return (
    <main>
      <h1>Approve a device</h1>
      <form method="get">
        <label>
          Code <input name="code" defaultValue={code} required />
        </label>{" "}
        <button>Continue</button>
      </form>
      {code !== "" && pending === null && <p>No pending request has that code.</p>}
      {pending !== null && (
        <>
          <p>
            <b id="label">{pending.label}</b> ({pending.platform}, byollm {pending.daemonVersion}) offers{" "}
            {pending.capabilities.map((c) => `${c.kind} with ${c.model}`).join(", ") || "nothing yet"}.
          </p>
          <form method="post" action="/api/pairings/approve">
            <input type="hidden" name="code" value={code} />
            <button>Approve as {user}</button>
          </form>
        </>
      )}
    </main>
  );
}

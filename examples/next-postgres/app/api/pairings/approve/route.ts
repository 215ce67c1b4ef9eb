import { NextResponse } from "next/server";
import { getApp } from "@/lib/byollm";
import { currentUser } from "@/lib/session";

// The approval button on /pair posts here (form field `code`).
export async function POST(request: Request) {
  const owner = await currentUser();
  if (owner === null) return NextResponse.json({ error: "sign in first" }, { status: 401 });
  const code = String((await request.formData()).get("code") ?? "");
  try {
    // The owner comes from this app's session, never from the daemon.
    const runner = await getApp().approvePairing({ userCode: code, owner });
    return NextResponse.json({ approved: true, runnerId: runner.id, label: runner.label });
  } catch (error) {
    return NextResponse.json({ error: error instanceof Error ? error.message : String(error) }, { status: 400 });
  }
}

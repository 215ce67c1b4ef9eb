import { NextResponse } from "next/server";
import { getApp } from "@/lib/byollm";
import { currentUser } from "@/lib/session";

// Queue a prompt for the signed-in person's own devices (form field `prompt`).
export async function POST(request: Request) {
  const owner = await currentUser();
  if (owner === null) return NextResponse.json({ error: "sign in first" }, { status: 401 });
  const prompt = String((await request.formData()).get("prompt") ?? "");
  try {
    const job = await getApp().enqueue({ kind: "llm.generate", owner, audience: "private", payload: { prompt } });
    return NextResponse.json({ id: job.id, state: job.record.state }, { status: 201 });
  } catch (error) {
    return NextResponse.json({ error: error instanceof Error ? error.message : String(error) }, { status: 400 });
  }
}

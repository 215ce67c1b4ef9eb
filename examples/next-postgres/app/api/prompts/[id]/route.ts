import { NextResponse } from "next/server";
import { getApp } from "@/lib/byollm";
import { currentUser } from "@/lib/session";

// The result of one of your prompts: {jobId, state, outcome?, provenance?}.
export async function GET(_request: Request, { params }: { params: Promise<{ id: string }> }) {
  const owner = await currentUser();
  if (owner === null) return NextResponse.json({ error: "sign in first" }, { status: 401 });
  const { id } = await params;
  const app = getApp();
  const job = await app.job(id);
  if (job === null || job.owner !== owner) return NextResponse.json({ error: "no such job" }, { status: 404 });
  return NextResponse.json(await app.result(id));
}

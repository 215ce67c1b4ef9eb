import { NextResponse } from "next/server";
import { SESSION_COOKIE, sessionValue } from "@/lib/session";

// Sign in with a name (form field `name`), then go to `next` (same-site paths only).
export async function POST(request: Request) {
  const form = await request.formData();
  const name = String(form.get("name") ?? "").trim();
  if (!/^[\p{L}\p{N} ._@-]{1,64}$/u.test(name)) {
    return NextResponse.json({ error: "a name is 1 to 64 letters, digits, spaces or . _ @ -" }, { status: 400 });
  }
  const next = String(form.get("next") ?? "/");
  const target = next.startsWith("/") && !next.startsWith("//") ? next : "/";
  const response = NextResponse.redirect(new URL(target, request.url), 303);
  response.cookies.set(SESSION_COOKIE, sessionValue(name), { httpOnly: true, sameSite: "lax", path: "/" });
  return response;
}

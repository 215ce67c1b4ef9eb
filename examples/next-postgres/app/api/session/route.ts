import { NextResponse } from "next/server";
import { SESSION_COOKIE, sessionValue } from "@/lib/session";

// Sign in with a name (form field `name`), then go to `next` (same-site paths only).
export async function POST(request: Request) {
  const form = await request.formData();
  const name = String(form.get("name") ?? "").trim();
  if (!/^[\p{L}\p{N} ._@-]{1,64}$/u.test(name)) {
    return NextResponse.json({ error: "a name is 1 to 64 letters, digits, spaces or . _ @ -" }, { status: 400 });
  }
  const response = NextResponse.redirect(sameOriginTarget(form.get("next"), request.url), 303);
  response.cookies.set(SESSION_COOKIE, sessionValue(name), { httpOnly: true, sameSite: "lax", path: "/" });
  return response;
}

/**
 * Where to go after signing in: `next` only when it is a path on this site.
 * It must start with one `/` not followed by `/` or `\` (browsers read
 * `//evil.com` and `/\evil.com` as another host), hold no control characters
 * or spaces (a URL parser drops tabs and newlines, which would turn
 * `/\t/evil.com` into `//evil.com`), and still resolve to this origin.
 * Anything else goes to `/`.
 */
function sameOriginTarget(next: FormDataEntryValue | null, requestUrl: string): URL {
  const home = new URL("/", requestUrl);
  if (typeof next !== "string" || !/^\/(?![/\\])[^\s\\\u0000-\u001f\u007f]*$/.test(next)) return home;
  const target = new URL(next, requestUrl);
  return target.origin === home.origin ? target : home;
}

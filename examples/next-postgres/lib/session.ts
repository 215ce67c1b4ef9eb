// A deliberately tiny sign-in for the example: the session cookie is the
// person's name plus an HMAC over it, so it cannot be forged without
// SESSION_SECRET. Your app uses its own sessions; the only thing byollm needs
// from them is a stable user id to use as `owner`.
import { createHmac, timingSafeEqual } from "node:crypto";
import { cookies } from "next/headers";

export const SESSION_COOKIE = "example_session";

function mac(name: string): string {
  const secret = process.env.SESSION_SECRET;
  if (!secret) throw new Error("set SESSION_SECRET to sign the example's session cookies");
  return createHmac("sha256", secret).update(name).digest("base64url");
}

export function sessionValue(name: string): string {
  return `${Buffer.from(name).toString("base64url")}.${mac(name)}`;
}

/** The signed-in user's id, or null. */
export async function currentUser(): Promise<string | null> {
  const raw = (await cookies()).get(SESSION_COOKIE)?.value;
  const [encoded, tag] = raw?.split(".") ?? [];
  if (!encoded || !tag) return null;
  const name = Buffer.from(encoded, "base64url").toString("utf8");
  const expected = Buffer.from(mac(name));
  const given = Buffer.from(tag);
  return given.length === expected.length && timingSafeEqual(given, expected) ? name : null;
}

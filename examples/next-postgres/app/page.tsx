import { currentUser } from "@/lib/session";

export const dynamic = "force-dynamic";

export default async function Home() {
  const user = await currentUser();
  return (
    <main>
      <h1>byollm Next.js + PostgreSQL example</h1>
      {user === null ? (
        <form method="post" action="/api/session">
          <input type="hidden" name="next" value="/pair" />
          <label>
            Your name <input name="name" required maxLength={64} />
          </label>{" "}
          <button>Sign in</button>
        </form>
      ) : (
        <p>
          Signed in as <b>{user}</b>. Pair a device with <code>npx byollm connect &lt;this site&apos;s origin&gt;</code>, then
          approve its code on <a href="/pair">/pair</a>.
        </p>
      )}
    </main>
  );
}

import type { ReactNode } from "react";

export const metadata = { title: "byollm Next.js + PostgreSQL example" };

export default function RootLayout({ children }: { children: ReactNode }) {
  return (
    <html lang="en">
      <body style={{ fontFamily: "system-ui, sans-serif", maxWidth: "44rem", margin: "2rem auto" }}>{children}</body>
    </html>
  );
}

// @ts-self-types="./index.d.ts"
// byollm-server-native/edge: the crypto core as WebAssembly, for runtimes
// that cannot load a native addon (Deno without --allow-ffi, Supabase Edge
// Functions, browsers; Cloudflare Workers use ./workers.js).
//
// The .wasm is embedded as base64 (wasm-inline.js, generated at build) rather
// than fetched from next to this file: a module URL inside an npm package is
// not readable in every edge runtime (Supabase's needs no read permission this
// way, and a browser bundle needs no extra asset). Decoding it costs a few
// milliseconds; see bench/edge.mjs for the measured cold start.
import { init } from "./core.js";
import wasmBase64 from "./wasm-inline.js";

function decodeBase64(text) {
  // Native decoders first (newer engines; Node and Bun's global Buffer), the
  // portable loop last. `globalThis.Buffer` is read, never imported.
  if (typeof Uint8Array.fromBase64 === "function") return Uint8Array.fromBase64(text);
  if (typeof globalThis.Buffer?.from === "function") return globalThis.Buffer.from(text, "base64");
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

await init(decodeBase64(wasmBase64));

export { init, isReady } from "./core.js";
export * from "./api.js";

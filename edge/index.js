// @ts-self-types="./index.d.ts"
// byollm-server-native-edge: the crypto core as WebAssembly, for runtimes
// that cannot load a native addon (Deno without --allow-ffi, Supabase Edge
// Functions, browsers; Cloudflare Workers use ./workers.js).
//
// The .wasm is embedded (wasm-inline.js, generated at build) rather than
// fetched from next to this file: a module URL inside an npm package is not
// readable in every edge runtime (Supabase's needs no read permission this
// way, and a browser bundle needs no extra asset). It is embedded gzipped, then
// base64-encoded, which keeps the npm package about as small as shipping the
// module once; unpacking costs a few milliseconds (bench/edge.mjs).
import { init } from "./core.js";
import wasmGzipBase64 from "./wasm-inline.js";

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

async function gunzip(bytes) {
  // Node and Bun: zlib in one synchronous call, which skips building web
  // streams (Node creates those lazily, at a cost of milliseconds). Reached
  // through process.getBuiltinModule so this file imports nothing from Node.
  // Not in Deno: it has the same call, but its first node: module loads the
  // Node compatibility layer, measured at ~70 ms of cold start.
  let zlib;
  if (typeof globalThis.Deno === "undefined") {
    try {
      zlib = globalThis.process?.getBuiltinModule?.("node:zlib");
    } catch {
      // A host with a partial `process` shim: the portable path below.
    }
  }
  if (typeof zlib?.gunzipSync === "function") return zlib.gunzipSync(bytes);
  // Everywhere else (Deno, Supabase, browsers): the standard stream.
  const reader = new ReadableStream({
    start(controller) {
      controller.enqueue(bytes);
      controller.close();
    },
  })
    .pipeThrough(new DecompressionStream("gzip"))
    .getReader();
  const chunks = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    total += value.length;
  }
  const out = new Uint8Array(total);
  let at = 0;
  for (const chunk of chunks) {
    out.set(chunk, at);
    at += chunk.length;
  }
  return out;
}

await init(await gunzip(decodeBase64(wasmGzipBase64)));

export { init, isReady } from "./core.js";
export * from "./api.js";

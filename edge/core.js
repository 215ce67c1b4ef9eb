// The edge build of the byollm crypto core: the same Rust functions the
// native addon runs, compiled to WebAssembly, behind the function names and
// shapes of @byollm/protocol.
//
// This file is the glue only. It uses nothing but WebAssembly, TextEncoder,
// TextDecoder and crypto.getRandomValues, so it runs unchanged in Deno,
// Supabase Edge Functions, Cloudflare Workers, browsers, Bun and Node. The
// entry points (index.js, workers.js) decide where the .wasm comes from and
// call init() before anything else.
//
// The ABI is described in src/binding_wasm.rs: one `bx_call(op, argsJson)`
// dispatcher whose answer is a JSON text in the module's memory.

const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8", { fatal: false });

/** @type {WebAssembly.Module | undefined} */
let wasmModule;
/** @type {any} */
let exportsOf;

// crypto.getRandomValues refuses more than 65536 bytes per call.
const RANDOM_CHUNK = 65536;

function importObject() {
  return {
    env: {
      bx_random(ptr, len) {
        const out = new Uint8Array(exportsOf.memory.buffer, ptr, len);
        for (let at = 0; at < len; at += RANDOM_CHUNK) {
          globalThis.crypto.getRandomValues(out.subarray(at, Math.min(len, at + RANDOM_CHUNK)));
        }
      },
    },
  };
}

function adopt(instance) {
  exportsOf = instance.exports;
}

/**
 * Loads the WebAssembly core. Accepts a compiled `WebAssembly.Module` (what a
 * Workers/bundler `import x from "./byollm_edge.wasm"` gives), the .wasm bytes,
 * or a `Response` of them. Calling it again once loaded does nothing.
 * @param {WebAssembly.Module | BufferSource | Response | Promise<Response>} source
 */
export async function init(source) {
  if (exportsOf) return;
  // `in`, not a property read: Node builds its Web Crypto object lazily (tens
  // of milliseconds), and a module that only verifies signatures or opens
  // envelopes never needs randomness.
  if (!("crypto" in globalThis)) {
    throw new Error("byollm edge: this runtime has no crypto.getRandomValues, which key generation and sealing need");
  }
  source = await source;
  let module;
  if (source instanceof WebAssembly.Module) {
    module = source;
  } else if (source instanceof ArrayBuffer || ArrayBuffer.isView(source)) {
    module = await WebAssembly.compile(source);
  } else {
    // A Response (checked last: touching `Response` makes Node load its fetch
    // stack). Streaming compilation overlaps download and compile, but needs
    // the application/wasm content type; anything else is compiled from bytes.
    if (typeof WebAssembly.compileStreaming === "function") {
      try {
        module = await WebAssembly.compileStreaming(source.clone());
      } catch {
        module = undefined;
      }
    }
    module ??= await WebAssembly.compile(await source.arrayBuffer());
  }
  const instance = await WebAssembly.instantiate(module, importObject());
  wasmModule = module;
  adopt(instance);
}

/** True once init() has finished. */
export const isReady = () => exportsOf !== undefined;

// A Rust panic on wasm32 is a trap (the build uses panic=abort): the instance's
// allocator may be mid-update, so it is thrown away and a fresh one made from
// the compiled module. The caller sees an ordinary Error, never the trap.
function recoverFromTrap(err) {
  exportsOf = undefined;
  try {
    adopt(new WebAssembly.Instance(wasmModule, importObject()));
  } catch {
    // Some browsers refuse synchronous instantiation of big modules on the
    // main thread; then recover asynchronously before the next call.
    WebAssembly.instantiate(wasmModule, importObject()).then(adopt, () => {});
  }
  return new Error(`byollm edge: internal error in the WebAssembly core (${err && err.message ? err.message : err})`);
}

// Arguments travel as JSON.stringify output, which writes a lone UTF-16
// surrogate as a \ud800-style escape; the core's JSON.parse-compatible reader
// restores it, so such strings keep their exact code units both ways.

function writeBytes(bytes) {
  const len = bytes.length;
  const ptr = exportsOf.bx_alloc(len);
  new Uint8Array(exportsOf.memory.buffer, ptr, len).set(bytes);
  return [ptr, len];
}

/**
 * Runs one core operation. Throws an Error carrying the core's message when
 * the core refuses the input.
 * @param {string} op
 * @param {unknown[]} args
 */
export function call(op, args) {
  if (!exportsOf) {
    throw new Error("byollm edge: the WebAssembly core is not loaded yet (await init() first)");
  }
  const opBytes = encoder.encode(op);
  const argBytes = encoder.encode(JSON.stringify(args));
  let status;
  let text;
  try {
    const [opPtr, opLen] = writeBytes(opBytes);
    const [argPtr, argLen] = writeBytes(argBytes);
    try {
      status = exportsOf.bx_call(opPtr, opLen, argPtr, argLen);
      const at = exportsOf.bx_result_ptr();
      const len = exportsOf.bx_result_len();
      text = decoder.decode(new Uint8Array(exportsOf.memory.buffer, at, len));
    } finally {
      // The core wipes the argument buffers as it frees them, and its answer
      // once read: either may hold site keys or a plaintext.
      exportsOf.bx_result_clear();
      exportsOf.bx_free(opPtr, opLen);
      exportsOf.bx_free(argPtr, argLen);
      argBytes.fill(0);
    }
  } catch (err) {
    if (err instanceof WebAssembly.RuntimeError) throw recoverFromTrap(err);
    throw err;
  }
  const value = JSON.parse(text);
  if (status !== 0) throw new Error(value);
  return value;
}

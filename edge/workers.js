// @ts-self-types="./index.d.ts"
// byollm-server-native-edge/workers: the edge module for Cloudflare Workers
// (and bundlers that turn a `.wasm` import into a WebAssembly.Module).
// Workers forbid compiling WebAssembly from bytes at run time, so the module
// must arrive precompiled through this import rather than from index.js's
// embedded copy.
import wasmModule from "./byollm_edge.wasm";
import { init } from "./core.js";

await init(wasmModule);

export { init, isReady } from "./core.js";
export * from "./api.js";

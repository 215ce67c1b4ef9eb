// @ts-self-types="./index.d.ts"
// byollm-server-native-edge/manual: the edge module without an embedded
// .wasm. Call init() first with the module from wherever your platform serves
// it, e.g. in a browser bundle built with Vite:
//
//   import wasmUrl from "byollm-server-native-edge/byollm_edge.wasm?url";
//   import { init, open } from "byollm-server-native-edge/manual";
//   await init(fetch(wasmUrl));   // streamed and compiled while downloading
//
// This skips the ~140 KB of gzipped base64 that index.js carries, which is what a
// browser page wants; index.js stays the zero-configuration choice for Deno
// and Supabase, where reading a file next to the module needs a permission.
export { init, isReady } from "./core.js";
export * from "./api.js";

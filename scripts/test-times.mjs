// A node:test reporter that writes one JSON line per test file: its path,
// how long it ran (the file's own process, from Node 22's per-file
// `test:summary`) and whether it passed. scripts/test.mjs adds it beside the
// usual reporter and prints the slowest files. (Node 20 sends no per-file
// summary; there it writes nothing.)
export default async function* testTimes(source) {
  for await (const event of source) {
    if (event.type !== "test:summary" || event.data.file === undefined) continue;
    yield `${JSON.stringify({ file: event.data.file, ms: Math.round(event.data.duration_ms), ok: event.data.success })}\n`;
  }
}

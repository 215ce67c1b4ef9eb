// The runtime matrix (scripts/runtime-matrix.mjs): the native package's smoke
// test — keygen, the edge module, one full in-memory job cycle through
// dist/ — under Node 20, 22, 24, Bun and Deno. The runtimes are npm packages,
// installed once into a temp dir on first use.
import { test } from "node:test";
import assert from "node:assert/strict";
import { formatRow, installRuntimes, runMatrix } from "../scripts/runtime-matrix.mjs";

test("native package smoke test under Node 20/22/24, Bun and Deno", () => {
  const bins = installRuntimes();
  const rows = runMatrix({ bins });
  for (const row of rows) console.log(`# ${formatRow(row)}`);
  assert.equal(rows.length, 5);
  const runtimes = rows.map((r) => String(r.runtime).split(" ")[0]);
  assert.deepEqual(runtimes, ["node", "node", "node", "bun", "deno"]);
  const majors = rows.slice(0, 3).map((r) => Number(String(r.runtime).split(" ")[1].split(".")[0]));
  assert.deepEqual(majors, [20, 22, 24]);
  for (const row of rows) {
    assert.equal(row.ok, true, `${row.runtime}: ${row.error}`);
    // A step that could not run says why; one that ran is a duration.
    for (const [step, note] of Object.entries(row.steps)) {
      assert.ok(/^(v\d|\d+(\.\d+)?ms$|skipped: )/.test(note), `${row.runtime} ${step}: ${note}`);
    }
    assert.match(row.steps["load addon"], /^v\d/);
  }
});

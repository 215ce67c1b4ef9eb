// The Prometheus text exposition read by Prometheus's own Python parser
// (`prometheus_client.parser.text_string_to_metric_families`; the test
// command installs python3-prometheus-client when it is missing), so the
// tests check what a scraper reads, not only our strings.
import { spawnSync } from "node:child_process";

const PARSE = `
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = []
for family in text_string_to_metric_families(sys.stdin.read()):
    out.append({"name": family.name, "type": family.type, "documentation": family.documentation,
                "samples": [{"name": s.name, "labels": s.labels, "value": s.value} for s in family.samples]})
print(json.dumps(out))
`;

/** A Python that has the parser: Debian's (where apt installs it) first, then the one on PATH. */
const PYTHON = ["/usr/bin/python3", "python3"].find((python) => spawnSync(python, ["-c", "import prometheus_client"]).status === 0);

/** The families a scraper reads from `text`; throws with the parser's message when it refuses the text. */
export function parseExposition(text) {
  if (PYTHON === undefined) throw new Error("no python3 with prometheus_client (the test command installs python3-prometheus-client)");
  const run = spawnSync(PYTHON, ["-c", PARSE], { input: text, encoding: "utf8" });
  if (run.status !== 0) throw new Error(`prometheus_client refused the exposition: ${run.stderr}`);
  return JSON.parse(run.stdout);
}

/** The value of the one sample named `name` whose labels include `labels`. */
export function sampleValue(families, name, labels = {}) {
  for (const family of families) {
    for (const s of family.samples) {
      if (s.name !== name) continue;
      if (Object.entries(labels).every(([k, v]) => s.labels[k] === v)) return s.value;
    }
  }
  return undefined;
}

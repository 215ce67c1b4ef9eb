// The docs a user reads hold: every link in README.md, CONTRIBUTING.md and
// docs/ leads to a file of this repository that exists, and to a heading
// that exists in it (GitHub's anchors); nothing points outside the
// repository; and the README's recipe files are the example's files, byte
// for byte.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync, readdirSync, statSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";
import { root } from "./site-harness.mjs";
import { BEGIN, END } from "../scripts/sizes.mjs";

function markdownFiles() {
  const files = ["README.md", "CONTRIBUTING.md"].filter((f) => existsSync(join(root, f)));
  const walk = (dir) => {
    for (const name of readdirSync(join(root, dir))) {
      const path = join(dir, name);
      if (statSync(join(root, path)).isDirectory()) walk(path);
      else if (name.endsWith(".md")) files.push(path);
    }
  };
  walk("docs");
  return files;
}

/** The text outside fenced code blocks and inline code, where links are links. */
function prose(text) {
  return text.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, "").replace(/`[^`\n]*`/g, "");
}

/** GitHub's anchor for a heading: the rendered text, lower-cased, punctuation dropped, spaces as hyphens. */
export function slug(heading) {
  const text = heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, "$1")
    .replace(/<[^>]+>/g, "")
    .replace(/[`*]/g, "")
    .trim()
    .toLowerCase();
  return text.replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, "").replace(/ /g, "-");
}

function anchorsOf(file) {
  const text = readFileSync(file, "utf8").replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, "");
  const anchors = new Set();
  const seen = new Map();
  for (const [, heading] of text.matchAll(/^#{1,6}[ \t]+(.+?)[ \t#]*$/gm)) {
    const base = slug(heading);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    anchors.add(n === 0 ? base : `${base}-${n}`);
  }
  for (const [, id] of text.matchAll(/<a\s+(?:name|id)="([^"]+)"/g)) anchors.add(id);
  return anchors;
}

function linksOf(text) {
  const body = prose(text);
  const links = [];
  for (const [, target] of body.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) links.push(target);
  for (const [, target] of body.matchAll(/<(?:a|img)\s[^>]*?(?:href|src)="([^"]+)"/g)) links.push(target);
  for (const [, target] of body.matchAll(/^\s*\[[^\]]+\]:\s*(\S+)/gm)) links.push(target);
  return links;
}

test("every link in README.md, CONTRIBUTING.md and docs/ leads to a file and anchor in this repository", () => {
  const problems = [];
  let checked = 0;
  for (const file of markdownFiles()) {
    const text = readFileSync(join(root, file), "utf8");
    for (const link of linksOf(text)) {
      if (/^(https?:|mailto:)/i.test(link)) continue;
      checked += 1;
      if (/^[a-z][a-z0-9+.-]*:/i.test(link) || link.startsWith("/") || link.startsWith("\\")) {
        problems.push(`${file}: ${link} is not a path in this repository`);
        continue;
      }
      const [pathPart, anchor] = link.split("#");
      const target = pathPart === "" ? join(root, file) : resolve(root, dirname(file), decodeURIComponent(pathPart));
      const inside = relative(root, target);
      if (inside.startsWith("..") || inside.split(sep).includes("node_modules")) {
        problems.push(`${file}: ${link} points outside the repository`);
        continue;
      }
      if (!existsSync(target)) {
        problems.push(`${file}: ${link}: no such file`);
        continue;
      }
      if (anchor !== undefined && anchor !== "") {
        if (!target.endsWith(".md")) problems.push(`${file}: ${link}: an anchor into a file that is not Markdown`);
        else if (!anchorsOf(target).has(anchor)) problems.push(`${file}: ${link}: no heading with that anchor`);
      }
    }
  }
  assert.deepEqual(problems, []);
  assert.ok(checked > 20, `only ${checked} links checked: the link reader is broken`);
});

test("the docs and the code refer to nothing outside this repository", () => {
  const problems = [];
  const scan = (file) => {
    const text = readFileSync(join(root, file), "utf8");
    for (const [match] of text.matchAll(/(?:\/work\/|\bshared\/(?:spec|design|vectors|tools|loc)\b)[^\s)`'"]*/g)) problems.push(`${file}: ${match}`);
  };
  for (const file of markdownFiles()) scan(file);
  const walk = (dir, ext) => {
    for (const name of readdirSync(join(root, dir))) {
      const path = join(dir, name);
      if (statSync(join(root, path)).isDirectory()) walk(path, ext);
      else if (ext.some((e) => name.endsWith(e))) scan(path);
    }
  };
  walk("ts", [".ts"]);
  walk("src", [".rs"]);
  assert.deepEqual(problems, []);
});

test("the link checker reads GitHub's anchors", () => {
  assert.equal(slug("Durable: `new MemoryStore({ path: \"byollm.db\" })`"), "durable-new-memorystore-path-byollmdb-");
  assert.equal(slug("When no binary fits: the WebAssembly fallback"), "when-no-binary-fits-the-webassembly-fallback");
  assert.equal(slug("3. Choose a store"), "3-choose-a-store");
  assert.equal(slug("Next.js: `lib/byollm.ts`"), "nextjs-libbyollmts");
});

test("the README's recipe files are examples/next-postgres's, verbatim", () => {
  const readme = readFileSync(join(root, "README.md"), "utf8");
  // A fenced block shows the file its preceding paragraph links to first, when that is one of the example's.
  const shown = [];
  for (const [, paragraph, block] of readme.matchAll(/(?:^|\n\n)((?:(?!```)[^\n]+\n)+)\n?```[^\n]*\n([\s\S]*?)^```$/gm)) {
    const path = /\]\((examples\/next-postgres\/[^)#\s]+)\)/.exec(paragraph)?.[1];
    if (path === undefined || !existsSync(join(root, path)) || statSync(join(root, path)).isDirectory()) continue;
    shown.push(path);
    assert.equal(block, readFileSync(join(root, path), "utf8"), `README's ${path}`);
  }
  for (const path of ["next.config.mjs", "app/byollm/[...route]/route.ts", "lib/byollm.ts", "scripts/migrate.mjs"]) {
    assert.ok(shown.includes(`examples/next-postgres/${path}`), `the README shows examples/next-postgres/${path}: ${shown}`);
  }
});

test("the sizes are in one generated table, in docs/distribution.md", () => {
  const holders = markdownFiles().filter((file) => readFileSync(join(root, file), "utf8").includes("sizes:begin"));
  assert.deepEqual(holders, [join("docs", "distribution.md")]);
  const doc = readFileSync(join(root, "docs", "distribution.md"), "utf8");
  assert.equal(doc.split(BEGIN).length, 2, "one table");
  const generated = doc.slice(doc.indexOf(BEGIN) + BEGIN.length, doc.indexOf(END));
  for (const row of ["main package `byollm-server-native`", "edge package `byollm-server-native-edge`", "this machine's binary package"]) {
    const line = generated.split("\n").find((l) => l.includes(row));
    assert.match(line ?? "", /\| [\d,]+ bytes packed/, row);
  }
});

test("code in the docs imports the package as apps do under the alias install, `@byollm/server`", () => {
  const problems = [];
  for (const file of markdownFiles()) {
    const text = readFileSync(join(root, file), "utf8");
    for (const [match] of text.matchAll(/from ["']byollm-server-native(?!-edge)[^"']*["']/g)) problems.push(`${file}: ${match}`);
  }
  assert.deepEqual(problems, []);
});

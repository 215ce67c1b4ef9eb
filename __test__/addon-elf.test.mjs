// The Linux addon must not claim static TLS. node dlopen()s it after start-up,
// when only a small surplus of the static TLS block is left (musl has none),
// and a library marked DF_STATIC_TLS can then fail to load with "cannot
// allocate memory in static TLS block" — on whichever host has less to spare.
// A dependency with initial-exec thread-locals (an allocator such as mimalloc
// without its `local_dynamic_tls` feature) would set it; this reads the built
// ELF's dynamic section and fails if that flag ever appears.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { hostPlatform, root } from "../scripts/pack-release.mjs";

const binary = join(root, `byollm-server-native.${hostPlatform()}.node`);
const skip =
  process.platform !== "linux"
    ? "the static TLS flag is an ELF (Linux) property"
    : !existsSync(binary)
      ? `the addon is not built (${binary})`
      : undefined;
if (skip) console.log(`# addon-elf.test.mjs skipped: ${skip}`);

const PT_DYNAMIC = 2;
const DT_NULL = 0n;
const DT_FLAGS = 30n;
const DF_STATIC_TLS = 0x10n;

/** The dynamic section's (tag, value) pairs of a little-endian ELF64 file. */
function dynamicEntries(elf) {
  assert.equal(elf.readUInt32BE(0), 0x7f454c46, "not an ELF file");
  assert.equal(elf[4], 2, "not ELF64");
  assert.equal(elf[5], 1, "not little-endian");
  const phoff = Number(elf.readBigUInt64LE(0x20));
  const phentsize = elf.readUInt16LE(0x36);
  const phnum = elf.readUInt16LE(0x38);
  for (let i = 0; i < phnum; i++) {
    const ph = phoff + i * phentsize;
    if (elf.readUInt32LE(ph) !== PT_DYNAMIC) continue;
    const offset = Number(elf.readBigUInt64LE(ph + 0x08));
    const size = Number(elf.readBigUInt64LE(ph + 0x20));
    const entries = [];
    for (let at = offset; at + 16 <= offset + size; at += 16) {
      const tag = elf.readBigInt64LE(at);
      if (tag === DT_NULL) break;
      entries.push([tag, elf.readBigUInt64LE(at + 8)]);
    }
    return entries;
  }
  assert.fail("no PT_DYNAMIC segment");
}

test("the Linux addon is not marked DF_STATIC_TLS (it loads late, by dlopen)", { skip }, () => {
  const entries = dynamicEntries(readFileSync(binary));
  assert.ok(entries.length > 10, `a shared object has a dynamic section (read ${entries.length} entries)`);
  const flags = entries.filter(([tag]) => tag === DT_FLAGS).reduce((all, [, value]) => all | value, 0n);
  assert.equal(flags & DF_STATIC_TLS, 0n, `DT_FLAGS = 0x${flags.toString(16)} includes DF_STATIC_TLS`);
});

// Test inputs as text JSON.stringify never writes: values are plain JS plus
// two markers, so a body can carry a number spelled `5.0` or `1e400`, a key
// given twice, or a lone surrogate escape. And a small seeded PRNG, so a
// failing case reproduces from its seed.
export const RAW = Symbol("raw");
export const DUP = Symbol("dup");
/** A value written as exactly `text`. */
export const raw = (text) => ({ [RAW]: text });
/** A key given twice, with these two values in this order. */
export const dupKey = (first, second) => ({ [DUP]: [first, second] });

/** The JSON text of a value that may hold `raw` and `dupKey` markers. */
export function toText(v) {
  if (v !== null && typeof v === "object" && RAW in v) return v[RAW];
  if (Array.isArray(v)) return `[${v.map(toText).join(",")}]`;
  if (v !== null && typeof v === "object") {
    const parts = [];
    for (const [k, val] of Object.entries(v)) {
      if (val !== null && typeof val === "object" && DUP in val) {
        parts.push(`${JSON.stringify(k)}:${toText(val[DUP][0])}`, `${JSON.stringify(k)}:${toText(val[DUP][1])}`);
      } else if (val !== undefined) parts.push(`${JSON.stringify(k)}:${toText(val)}`);
    }
    return `{${parts.join(",")}}`;
  }
  return JSON.stringify(v);
}

/** mulberry32: a small seeded PRNG in [0, 1). */
export function prng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

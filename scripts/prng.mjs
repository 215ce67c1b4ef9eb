// xorshift32: a seeded generator for reproducible "random" inputs (tests,
// the load run). Not for anything secret.

/** Numbers in [0, 1), each a multiple of 2^-32; the same sequence for the same seed. */
export function xorshift32(seed) {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x / 2 ** 32;
  };
}

// Runs INSIDE Deno (driven by __test__/edge.test.mjs), with no --allow-ffi:
// checks the edge WebAssembly module (edge/) against the golden vectors and against
// cases the reference made, and writes cases of its own for the reference to
// check back.
//
//   deno run --allow-read=<vectors>,<tmp> --allow-write=<tmp> edge-deno-check.mjs VECTORS CASES OUT
//
// Writes OUT = { results: [{ name, ok, detail? }], edgeSealed, edgeSigned, edgeKeys }.
import * as edge from "../edge/index.js";

const [vectorsDir, casesPath, outPath] = Deno.args;
const readJson = async (path) => JSON.parse(await Deno.readTextFile(path));
const results = [];

const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
function expect(name, got, want) {
  const ok = same(got, want);
  results.push(ok ? { name, ok } : { name, ok, detail: `got ${JSON.stringify(got)?.slice(0, 300)}, want ${JSON.stringify(want)?.slice(0, 300)}` });
}
function attempt(name, fn) {
  try {
    return fn();
  } catch (err) {
    results.push({ name, ok: false, detail: `threw ${err && err.message}` });
    return undefined;
  }
}
const fromUtf16Hex = (hex) => {
  let s = "";
  for (let i = 0; i < hex.length; i += 4) s += String.fromCharCode(parseInt(hex.slice(i + 2, i + 4) + hex.slice(i, i + 2), 16));
  return s;
};
const toHex = (bytes) => Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
const sha256Hex = async (text) => toHex(new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text))));

// The point of the exercise: the module must not need FFI (or anything but reads of its inputs).
expect("runs without the ffi permission", Deno.permissions.querySync({ name: "ffi" }).state, "prompt");

// ---------------------------------------------------------------- keys.json
const keysV = await readJson(`${vectorsDir}/keys.json`);
const fixture = await readJson(`${vectorsDir}/keys.fixture.json`);
for (const [party, p] of Object.entries(keysV.parties)) {
  attempt(`keys/${party}`, () => {
    expect(`keys/${party} publicIdentityOf`, edge.publicIdentityOf(p.storedKeys), p.publicIdentity);
    expect(`keys/${party} keyId`, edge.keyId(p.storedKeys.identityPublic), p.keyId);
    expect(`keys/${party} fingerprint`, edge.fingerprint(p.storedKeys.identityPublic), p.fingerprint);
    if (p.formatSiteKeys !== undefined) expect(`keys/${party} formatSiteKeys`, edge.formatSiteKeys(p.storedKeys), p.formatSiteKeys);
    if (p.siteKeysEnvValue !== undefined) {
      expect(`keys/${party} siteKeysFromEnvValue`, edge.siteKeysFromEnvValue("BYOLLM_SITE_KEYS", p.siteKeysEnvValue), p.storedKeys);
    }
  });
}
for (const c of keysV.verifyPublicIdentity) expect(`verifyPublicIdentity/${c.name}`, edge.verifyPublicIdentity(c.input), c.expected);
for (const c of keysV.fingerprints) {
  attempt(`fingerprints/${c.name}`, () => {
    expect(`fingerprints/${c.name}`, [edge.fingerprint(c.input), edge.keyId(c.input)], [c.fingerprint, c.keyId]);
  });
}

// ---------------------------------------------------------------- envelopes.json
const envV = await readJson(`${vectorsDir}/envelopes.json`);
const identityOf = (name) => fixture[name]?.identityPublic ?? name;
const edgeSealed = [];
for (const c of envV.cases) {
  if (c.kind === "edge") {
    // A plaintext with a lone surrogate: seal it here, open it here, and let the reference open it too.
    const plaintext = fromUtf16Hex(c.plaintextUtf16Hex);
    const ctx = JSON.parse(c.signedBodyUtf8);
    const context = { jobId: ctx.jobId, senderKeyId: ctx.senderKeyId, recipientKeyId: ctx.recipientKeyId, deadlineAt: ctx.deadlineAt, direction: ctx.direction };
    const envelope = await edge.seal({ plaintext, senderKeys: fixture.site, recipientEncryptionPublic: fixture.device.encryptionPublic, context });
    const { deadlineAt: _d, ...expected } = context;
    const opened = await edge.open({ envelope, recipientKeys: fixture.device, senderIdentityPublic: fixture.site.identityPublic, expected });
    expect(`envelopes/${c.name} (edge round trip keeps the code units)`, opened, { ok: true, plaintext });
    edgeSealed.push({ name: c.name, envelope, recipient: "device", sender: "site", expected, plaintextUtf16Hex: c.plaintextUtf16Hex });
    continue;
  }
  const name = `envelopes/${c.kind}/${c.name}`;
  const opened = await edge
    .open({
      envelope: c.envelope,
      recipientKeys: fixture[c.open.recipient],
      senderIdentityPublic: identityOf(c.open.senderIdentity),
      expected: c.open.expected,
    })
    .catch((err) => ({ threw: String(err && err.message) }));
  let want = c.expectedResult;
  if (want.throws) {
    // The reference crashes with a TypeError on a JSON null inside the box;
    // the core answers "malformed" instead (a refusal, never a throw).
    want = { ok: false, reason: "malformed" };
  }
  if (want.ok && want.plaintextSha256) {
    const got = opened.ok ? { ok: true, plaintextSha256: await sha256Hex(opened.plaintext) } : opened;
    expect(name, got, { ok: true, plaintextSha256: want.plaintextSha256 });
  } else {
    expect(name, opened, want);
  }
  if (c.kind === "base") {
    // Seal the same input with the edge module: the reference opens it (in Node).
    const si = c.sealInput;
    const plaintext = si.plaintext ?? si.plaintextRecipe.repeat.repeat(si.plaintextRecipe.count);
    const envelope = await edge.seal({
      plaintext,
      senderKeys: fixture[si.sender],
      recipientEncryptionPublic: fixture[si.recipient].encryptionPublic,
      context: si.context,
    });
    const { deadlineAt: _d, ...expected } = si.context;
    edgeSealed.push({ name: c.name, envelope, recipient: si.recipient, sender: si.sender, expected, plaintextSha256: await sha256Hex(plaintext) });
  }
}

// ---------------------------------------------------------------- signatures.json
const sigV = await readJson(`${vectorsDir}/signatures.json`);
for (const c of sigV.signed) {
  attempt(`signatures/${c.name}`, () => {
    expect(`signatures/${c.name} canonical bytes`, toHex(edge.canonicalRequest(c.input)), c.canonicalHex);
    const { name: _n, ...input } = c.input;
    expect(`signatures/${c.name} signature`, edge.signRequest(fixture[c.signedBy], input), c.signature);
  });
}
for (const c of [].concat(sigV.siteSigned ?? [])) {
  attempt(`siteSigned/${c.name}`, () => {
    expect(`siteSigned/${c.name} signature`, edge.signSiteRequest(fixture[c.signedBy], c.input), c.signature);
    if ("verifySiteRequestNow" in c) {
      const got = edge.verifySiteRequest({
        identityPublic: fixture[c.signedBy].identityPublic,
        endpoint: c.input.endpoint,
        body: c.input.body,
        signature: c.signature,
        now: c.input.issuedAt,
      });
      expect(`siteSigned/${c.name} verifySiteRequest`, got, c.verifySiteRequestNow);
    }
  });
}
// Deliberate difference (docs/security.md): only the canonical spelling of a
// request signature verifies; the reference's lenient decoder accepts these.
const STRICT_SIGNATURE = new Set([
  "signature with '==' appended (lenient base64url: still valid)",
  "signature in standard base64 alphabet (lenient: still valid)",
]);
for (const c of sigV.verify) {
  const want = STRICT_SIGNATURE.has(c.name) ? "bad-signature" : c.expected;
  attempt(`verifyRequest/${c.name}`, () => expect(`verifyRequest/${c.name}`, edge.verifyRequest(c.args), want));
}

// ---------------------------------------------------------------- ids and secrets
const hashV = await readJson(`${vectorsDir}/hash-secret.json`);
for (const c of hashV.hashSecret) {
  const input = c.input ?? fromUtf16Hex(c.inputUtf16Hex);
  expect(`hashSecret/${JSON.stringify(input).slice(0, 30)}`, edge.hashSecret(input), c.expected);
}
for (const c of hashV.secretsMatch ?? []) {
  if (typeof c.a !== "string" || typeof c.b !== "string") continue;
  // Where the reference throws (decoded lengths differ), the core answers false.
  // Deliberate: malformed hex (not non-empty, even-length, strict hex) is never equal.
  const strictHex = /^(?:[0-9a-fA-F]{2})+$/;
  const wellFormed = strictHex.test(c.a) && strictHex.test(c.b);
  expect(`secretsMatch/${c.name}`, edge.secretsMatch(c.a, c.b), wellFormed && c.result.ok ? c.result.value : false);
}
const codesV = await readJson(`${vectorsDir}/user-codes.json`);
for (const c of codesV.normalizeUserCode) expect(`normalizeUserCode/${JSON.stringify(c.input)}`, edge.normalizeUserCode(c.input), c.expected);
const format = new RegExp(codesV.format);
expect("generateUserCode format", Array.from({ length: 50 }, () => format.test(edge.generateUserCode())).every(Boolean), true);
// Randomness comes from the host (crypto.getRandomValues) through both getrandom versions.
expect("ids differ", new Set(Array.from({ length: 20 }, () => edge.generateJobId())).size, 20);
expect("device codes differ", new Set(Array.from({ length: 20 }, () => edge.generateDeviceCode())).size, 20);
expect("keys differ", edge.generateKeys(1).identityPrivate !== edge.generateKeys(1).identityPrivate, true);
expect("generateJobId is a v4 uuid", /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/.test(edge.generateJobId()), true);

// ---------------------------------------------------------------- randomized interop
const cases = await readJson(casesPath);
for (const c of cases.refSealed) {
  const opened = await edge.open(c.open);
  expect(`interop/reference sealed → edge opens #${c.i}`, opened, { ok: true, plaintext: c.plaintext });
  if (c.tamperedCiphertext) {
    const bad = await edge.open({ ...c.open, envelope: { ...c.open.envelope, ciphertext: c.tamperedCiphertext } });
    expect(`interop/tampered reference envelope refused #${c.i}`, bad, { ok: false, reason: "unopenable" });
  }
}
for (const c of cases.refSigned) {
  expect(`interop/reference signature → edge verifies #${c.i}`, edge.verifyRequest(c.verify), null);
  expect(`interop/canonical bytes agree #${c.i}`, new TextDecoder().decode(edge.canonicalRequest({ ...c.request })), c.canonical);
  expect(`interop/deterministic signature agrees #${c.i}`, edge.signRequest(c.keys, c.request), c.verify.signature);
}
const edgeKeys = Array.from({ length: 2 }, () => edge.generateKeys(cases.now));
const edgeSigned = [];
for (const c of cases.toSeal) {
  // Alternate: edge seals from the reference's keys to an edge-made key, and from an edge-made key to the reference's.
  const fromEdge = c.i % 2 === 1;
  const senderKeys = fromEdge ? edgeKeys[0] : c.senderKeys;
  const recipientKeys = fromEdge ? c.recipientKeys : edgeKeys[1];
  const context = { ...c.context, senderKeyId: edge.keyId(senderKeys.identityPublic), recipientKeyId: edge.keyId(recipientKeys.identityPublic) };
  const envelope = await edge.seal({ plaintext: c.plaintext, senderKeys, recipientEncryptionPublic: recipientKeys.encryptionPublic, context });
  const { deadlineAt: _d, ...expected } = context;
  edgeSealed.push({ name: `random #${c.i}`, envelope, recipientKeys, senderIdentityPublic: senderKeys.identityPublic, expected, plaintext: c.plaintext });
}
for (const c of cases.toSign) {
  edgeSigned.push({ i: c.i, identityPublic: edgeKeys[c.i % 2].identityPublic, request: c.request, signature: edge.signRequest(edgeKeys[c.i % 2], c.request) });
}

await Deno.writeTextFile(outPath, JSON.stringify({ results, edgeSealed, edgeSigned, edgeKeys }));
console.log(`edge-deno-check: ${results.filter((r) => r.ok).length} passed, ${results.filter((r) => !r.ok).length} failed`);

#!/usr/bin/env node
// Recomputes, with the reference packages themselves, every expected value in
// tests/vectors that is deterministic (key-derived values, fingerprints,
// envelope bodies / signatures / inner JSON, known-answer boxes, open()
// outcomes, request signatures and verdicts, base64, hashSecret/secretsMatch,
// normalizeUserCode, siteKeysFromEnv), for the inputs recorded in the files,
// and diffs the result against the files. Exit code 1 on any difference.
//
//   node_modules/node/bin/node scripts/regen-vectors.mjs          check
//   node_modules/node/bin/node scripts/regen-vectors.mjs --write  also write tests/vectors/regenerated/*.json
//
// Needs Node >= 22.14 (the reference packages do). Values that depend on OS
// randomness (fresh ciphertexts, ids in the HTTP transcript) are not
// reproducible and are not checked here; the envelopes recorded in the files
// are opened again instead.
import { createHash, createPrivateKey, createPublicKey } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import * as protocol from "@byollm/protocol";
import * as portable from "@byollm/protocol/portable";
import * as server from "@byollm/server";
import sodium from "libsodium-wrappers";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const dir = join(root, "tests", "vectors");
const write = process.argv.includes("--write");
const read = (name) => JSON.parse(readFileSync(join(dir, name), "utf8"));
const hex = (bytes) => Buffer.from(bytes).toString("hex");
const sha256 = (data) => createHash("sha256").update(data).digest("hex");

await protocol.cryptoReady();
await sodium.ready;

const fixture = read("keys.fixture.json");

/** Run `fn`, recording a throw the way the vector files do. */
function outcome(fn) {
  try {
    return { ok: true, value: fn() };
  } catch (e) {
    return { ok: false, error: { name: e.name, message: e.message } };
  }
}

async function openOutcome(c) {
  try {
    return await protocol.open({
      envelope: c.envelope,
      recipientKeys: fixture[c.open.recipient],
      senderIdentityPublic: fixture[c.open.senderIdentity].identityPublic,
      expected: c.open.expected,
    });
  } catch (e) {
    return { throws: e.name, message: e.message };
  }
}

// ------------------------------------------------------------ keys.json

function rawOf(keys) {
  const idDer = Buffer.from(keys.identityPrivate, "base64");
  const encDer = Buffer.from(keys.encryptionPrivate, "base64");
  const idPub = createPublicKey(createPrivateKey({ key: idDer, format: "der", type: "pkcs8" }));
  const scalar = encDer.subarray(16);
  const message = `${protocol.ENCRYPTION_KEY_CONTEXT}:${keys.encryptionPublic}`;
  return {
    identityPublicHex: hex(Buffer.from(keys.identityPublic, "base64url")),
    identityPrivatePkcs8DerHex: hex(idDer),
    identityPrivatePkcs8DerLength: idDer.length,
    identitySeedHex: hex(idDer.subarray(16)),
    identityPublicDerivedFromSeedHex: hex(Buffer.from(idPub.export({ format: "jwk" }).x, "base64url")),
    encryptionPublicHex: hex(Buffer.from(keys.encryptionPublic, "base64url")),
    encryptionPrivatePkcs8DerHex: hex(encDer),
    encryptionPrivatePkcs8DerLength: encDer.length,
    encryptionScalarHex: hex(scalar),
    encryptionPublicFromScalarViaLibsodiumHex: hex(sodium.crypto_scalarmult_base(new Uint8Array(scalar))),
    encryptionSigHex: hex(Buffer.from(keys.encryptionSig, "base64url")),
    encryptionSigMessageUtf8: message,
  };
}

function regenKeys(old) {
  const parties = {};
  for (const [name, p] of Object.entries(old.parties)) {
    const keys = fixture[name];
    const party = {
      storedKeys: keys,
      publicIdentity: protocol.publicIdentityOf(keys),
      keyId: protocol.keyId(keys.identityPublic),
      fingerprint: protocol.fingerprint(keys.identityPublic),
      raw: rawOf(keys),
    };
    if ("formatSiteKeys" in p) party.formatSiteKeys = server.formatSiteKeys(keys);
    party.siteKeysEnvValue = Buffer.from(JSON.stringify(keys)).toString("base64");
    parties[name] = party;
  }
  return {
    ...old,
    constants: {
      ...old.constants,
      ENCRYPTION_KEY_CONTEXT: protocol.ENCRYPTION_KEY_CONTEXT,
    },
    parties,
    verifyPublicIdentity: old.verifyPublicIdentity.map((c) => ({ ...c, expected: protocol.verifyPublicIdentity(c.input) })),
    fingerprints: old.fingerprints.map((c) => {
      const decoded = Buffer.from(c.input, "base64url");
      const digest = createHash("sha256").update(decoded).digest();
      return {
        ...c,
        decodedHex: hex(decoded),
        sha256Hex: hex(digest),
        first15BytesHex: hex(digest.subarray(0, 15)),
        fingerprint: protocol.fingerprint(c.input),
        keyId: protocol.keyId(c.input),
      };
    }),
  };
}

// ------------------------------------------------------------ envelopes.json

function plaintextOf(input) {
  return input.plaintext ?? input.plaintextRecipe.repeat.repeat(input.plaintextRecipe.count);
}

async function regenEnvelopes(old) {
  const cases = [];
  for (const c of old.cases) {
    if (c.kind === "base") {
      const input = c.sealInput;
      const plaintext = plaintextOf(input);
      const body = portable.envelopeSignedBody(input.context, plaintext);
      const signature = protocol.signWith(fixture[input.sender], body);
      const inner = portable.encodeEnvelopeInner(body, signature);
      const bodyText = Buffer.from(body).toString("utf8");
      const regenerated = {
        ...c,
        sealInput: { ...input, plaintextSha256: sha256(plaintext), plaintextUtf16Length: plaintext.length },
        signedBodySha256: sha256(body),
        signedBodyLength: body.length,
        signatureB64url: signature,
        innerSha256: sha256(inner),
        innerLength: Buffer.byteLength(inner),
        ciphertextByteLength: Buffer.byteLength(inner) + 48,
        expectedResult: await openOutcome(c),
      };
      if ("signedBody" in c) regenerated.signedBody = bodyText;
      if ("inner" in c) regenerated.inner = inner;
      if (regenerated.expectedResult.ok && !("plaintext" in c.expectedResult)) {
        regenerated.expectedResult = { ok: true, plaintextSha256: sha256(regenerated.expectedResult.plaintext) };
      }
      cases.push(regenerated);
    } else if (c.kind === "tampered") {
      cases.push({ ...c, expectedResult: await openOutcome(c) });
    } else if (c.kind === "edge") {
      const units = Buffer.from(c.plaintextUtf16Hex, "hex").toString("utf16le");
      const context = JSON.parse(c.signedBodyUtf8);
      cases.push({ ...c, signedBodyUtf8: Buffer.from(portable.envelopeSignedBody(context, units)).toString("utf8") });
    } else {
      cases.push(c);
    }
  }
  const boxKnownAnswers = [];
  for (const k of old.boxKnownAnswers) {
    const inner = new TextEncoder().encode(k.innerUtf8);
    const epk = Buffer.from(k.ephemeralPublicHex, "hex");
    let regenerated = { ...k, expectedResult: await openOutcome(k) };
    if (k.ephemeralSecretHex) {
      const esk = Buffer.from(k.ephemeralSecretHex, "hex");
      const rpk = Buffer.from(k.recipientPublicHex, "hex");
      const rsk = Buffer.from(k.recipientScalarHex, "hex");
      const nonce = sodium.crypto_generichash(24, Buffer.concat([sodium.crypto_scalarmult_base(esk), rpk]));
      const shared = sodium.crypto_scalarmult(rsk, sodium.crypto_scalarmult_base(esk));
      const box = sodium.crypto_box_easy(inner, nonce, rpk, esk);
      regenerated = {
        ...regenerated,
        ephemeralPublicHex: hex(sodium.crypto_scalarmult_base(esk)),
        recipientPublicHex: hex(sodium.crypto_scalarmult_base(rsk)),
        x25519SharedHex: hex(shared),
        hsalsa20KeyHex: hex(sodium.crypto_box_beforenm(rpk, esk)),
        nonceHex: hex(nonce),
        boxHex: hex(box),
        sealedHex: hex(Buffer.concat([sodium.crypto_scalarmult_base(esk), box])),
      };
    } else {
      // The low-order case: libsodium must refuse to open it.
      const site = fixture.site;
      const scalar = Buffer.from(site.encryptionPrivate, "base64").subarray(16);
      let refuses = false;
      try {
        sodium.crypto_box_seal_open(Buffer.from(k.sealedHex, "hex"), sodium.crypto_scalarmult_base(scalar), scalar);
      } catch {
        refuses = true;
      }
      regenerated = { ...regenerated, libsodiumSealOpenRefuses: refuses, ephemeralPublicHex: hex(epk) };
    }
    boxKnownAnswers.push(regenerated);
  }
  return {
    ...old,
    constants: { ...old.constants, ENVELOPE_MAX_AGE_MS: protocol.ENVELOPE_MAX_AGE_MS, ENVELOPE_BODY_VERSION: protocol.ENVELOPE_BODY_VERSION },
    cases,
    boxKnownAnswers,
  };
}

// ------------------------------------------------------------ signatures.json

function regenSignatures(old) {
  const signed = old.signed.map((c) => {
    const canonical = protocol.canonicalRequest(c.input);
    return {
      ...c,
      bodySha256Hex: sha256(c.input.body),
      canonicalUtf8: canonical.toString("utf8"),
      canonicalHex: canonical.toString("hex"),
      signature: protocol.signRequest(fixture[c.signedBy], c.input),
    };
  });
  const s = old.siteSigned;
  const siteKeys = fixture[s.signedBy];
  const siteSig = protocol.signSiteRequest(siteKeys, s.input);
  const canonical = protocol.canonicalRequest({ endpoint: `site/${s.input.endpoint}`, runnerId: s.input.siteId, issuedAt: s.input.issuedAt, body: s.input.body });
  const verifyArgs = { identityPublic: siteKeys.identityPublic, endpoint: s.input.endpoint, body: s.input.body, signature: siteSig, now: s.input.issuedAt };
  const siteSigned = {
    ...s,
    canonicalUtf8: canonical.toString("utf8"),
    canonicalHex: canonical.toString("hex"),
    signature: siteSig,
    verifySiteRequestNow: protocol.verifySiteRequest(verifyArgs),
    verifyRequestWithoutPrefix: protocol.verifyRequest(verifyArgs),
  };
  return {
    ...old,
    constants: { ...old.constants, MAX_CLOCK_SKEW_MS: protocol.MAX_CLOCK_SKEW_MS },
    signed,
    siteSigned,
    verify: old.verify.map((c) => ({ ...c, expected: protocol.verifyRequest(c.args) })),
    signatureFrom: old.signatureFrom.map((c) => {
      const sig = server.signatureFrom(new Headers(c.headers));
      // The file writes "no signature" (undefined) as null.
      return { ...c, signatureFrom: sig ?? null, requestSignatureSchemaAccepts: protocol.RequestSignature.safeParse(sig).success };
    }),
  };
}

// ------------------------------------------------------------ the small files

function regenBase64(old) {
  return {
    ...old,
    cases: old.cases.map((c) => {
      const strict = portable.fromBase64Url(c.input);
      return {
        ...c,
        base64Hex: hex(Buffer.from(c.input, "base64")),
        base64urlHex: hex(Buffer.from(c.input, "base64url")),
        strictInnerDecoderHex: strict === undefined ? null : hex(strict),
      };
    }),
    encode: old.encode.map((c) => {
      const bytes = Buffer.from(c.bytesHex, "hex");
      return { ...c, base64url: bytes.toString("base64url"), protocolToBase64Url: portable.toBase64Url(bytes), base64: bytes.toString("base64") };
    }),
  };
}

function regenHashSecret(old) {
  return {
    ...old,
    hashSecret: old.hashSecret.map((c) => {
      const input = Buffer.from(c.inputUtf16Hex, "hex").toString("utf16le");
      return { ...c, utf8Hex: hex(Buffer.from(input, "utf8")), expected: server.hashSecret(input) };
    }),
    secretsMatch: old.secretsMatch.map((c) => {
      const r = outcome(() => server.secretsMatch(c.a, c.b));
      return { ...c, result: r };
    }),
  };
}

function regenUserCodes(old) {
  return { ...old, normalizeUserCode: old.normalizeUserCode.map((c) => ({ ...c, expected: server.normalizeUserCode(c.input) })) };
}

function regenMisc(old) {
  return {
    ...old,
    siteKeysFromEnv: old.siteKeysFromEnv.map((c) => ({
      ...c,
      result: outcome(() => (c.variable === null ? server.siteKeysFromEnv(undefined, c.env) : server.siteKeysFromEnv(c.variable, c.env))),
    })),
  };
}

// ------------------------------------------------------------ diff

function diff(path, a, b, out) {
  if (Object.is(a, b)) return;
  if (a && b && typeof a === "object" && typeof b === "object" && Array.isArray(a) === Array.isArray(b)) {
    const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
    for (const k of keys) diff(`${path}${Array.isArray(a) ? `[${k}]` : `.${k}`}`, a[k], b[k], out);
    return;
  }
  out.push(`${path}: file has ${JSON.stringify(a)?.slice(0, 120)}, reference now gives ${JSON.stringify(b)?.slice(0, 120)}`);
}

const jobs = [
  ["keys.json", regenKeys],
  ["envelopes.json", regenEnvelopes],
  ["signatures.json", regenSignatures],
  ["base64.json", regenBase64],
  ["hash-secret.json", regenHashSecret],
  ["user-codes.json", regenUserCodes],
  ["misc.json", regenMisc],
];

let failures = 0;
for (const [name, regen] of jobs) {
  const old = read(name);
  const fresh = await regen(old);
  const problems = [];
  diff(name, old, fresh, problems);
  if (write) {
    mkdirSync(join(dir, "regenerated"), { recursive: true });
    writeFileSync(join(dir, "regenerated", name), `${JSON.stringify(fresh, null, 2)}\n`);
  }
  if (problems.length) {
    failures += problems.length;
    console.log(`✗ ${name}: ${problems.length} difference(s)`);
    for (const p of problems.slice(0, 20)) console.log(`    ${p}`);
  } else {
    console.log(`✓ ${name}: every recomputed value matches`);
  }
}
process.exit(failures ? 1 : 0);

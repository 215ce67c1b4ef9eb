// Identifiers, codes and secret hashing. All minted and compared in the core.
import { native } from "./native.js";

/** 32 random bytes, base64url: the secret a daemon polls pairing with. */
export const generateDeviceCode = (): string => native.generateDeviceCode();

/** `runner_<uuid v4>`. */
export const generateRunnerId = (): string => native.generateRunnerId();

/** A bare UUID v4 (the Supabase adapter's id columns are uuids). */
export const generateJobId = (): string => native.generateJobId();

/** `XXXX-XXXX` over a 27-symbol alphabet without look-alike characters. */
export const generateUserCode = (): string => native.generateUserCode();

/** Lowercase hex SHA-256 of the UTF-8 text; device codes are stored only as this. */
export const hashSecret = (secret: string): string => native.hashSecret(secret);

/**
 * Constant-time comparison of two hex digests; never throws. Deliberate
 * difference: the reference throws a RangeError when equal-length strings
 * hex-decode to different byte lengths ("zz" is 0 bytes, "ab" is 1), so a
 * malformed secret could turn a comparison into a crash; here that is false.
 */
export const secretsMatch = (aHex: string, bHex: string): boolean => native.secretsMatch(aHex, bHex);

/**
 * Accept a pairing code however it was typed: uppercased, everything but
 * A-Z/0-9 dropped, and the dash put back when eight characters remain.
 */
export const normalizeUserCode = (input: string): string => native.normalizeUserCode(input);

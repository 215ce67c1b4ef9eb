// Argument checks for the public methods of `ByollmApp`. A wrong argument is
// refused with a `TypeError` that names the method and the field, before it
// reaches a store or the native binding (whose own conversion message names
// Rust types, not the caller's mistake). Optional fields accept `undefined`
// and `null` as "absent", as the reference's defaults (`??`) do.
import { native } from "./native.js";
import type { Audience } from "./types.js";

function describe(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  if (typeof value === "string") return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value);
  return typeof value === "object" ? "an object" : `${typeof value} ${String(value)}`;
}

function refuse(where: string, field: string, wanted: string, value: unknown): never {
  throw new TypeError(`${where}: \`${field}\` must be ${wanted} (got ${describe(value)})`);
}

/**
 * A lone surrogate (`"\ud800"`): the native side reads every string as
 * UTF-8, where each becomes U+FFFD, so two different ids holding one would
 * name the same job. Ids and owners are refused with one instead.
 */
const LONE_SURROGATE = /[\ud800-\udfff]/u;

function wellFormed(where: string, field: string, value: string): string {
  if (LONE_SURROGATE.test(value)) refuse(where, field, "a string without lone surrogates", value);
  return value;
}

/** A string with at least one character. */
export function nonEmptyText(where: string, field: string, value: unknown): string {
  if (typeof value !== "string" || value.length === 0) refuse(where, field, "a non-empty string", value);
  return wellFormed(where, field, value);
}

/** A string (possibly empty): ids and codes a store simply will not find. */
export function text(where: string, field: string, value: unknown): string {
  if (typeof value !== "string") refuse(where, field, "a string", value);
  return wellFormed(where, field, value);
}

/**
 * A string, lone surrogates allowed: for lookups by a value this package
 * generated (user codes), which can never hold one, so such a string simply
 * finds nothing, as in the reference.
 */
export function lookupText(where: string, field: string, value: unknown): string {
  if (typeof value !== "string") refuse(where, field, "a string", value);
  return value;
}

export function optionalNonEmptyText(where: string, field: string, value: unknown): string | undefined {
  return value == null ? undefined : nonEmptyText(where, field, value);
}

export function optionalStrings(where: string, field: string, value: unknown): readonly string[] | undefined {
  if (value == null) return undefined;
  if (!Array.isArray(value) || !value.every((item) => typeof item === "string")) {
    refuse(where, field, "an array of strings", value);
  }
  for (const item of value as readonly string[]) wellFormed(where, field, item);
  return value as readonly string[];
}

export function optionalNumber(where: string, field: string, value: unknown): number | undefined {
  if (value == null) return undefined;
  if (typeof value !== "number" || Number.isNaN(value)) refuse(where, field, "a number", value);
  return value;
}

/**
 * `"private"` or `"team"` (the core's vocabulary), or absent. Anything else is
 * refused: the reference stores any other spelling and then lets strangers'
 * runners take the job, so a typo would hand out a user's prompt.
 */
export function optionalAudience(where: string, value: unknown): Audience | undefined {
  if (value == null) return undefined;
  if (typeof value !== "string" || !native.isAudience(value)) {
    refuse(where, "audience", '"private" or "team"', value);
  }
  return value as Audience;
}

/** A plain object (the argument bag of a method). */
export function bag(where: string, value: unknown): Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new TypeError(`${where} takes an object (got ${describe(value)})`);
  }
  return value as Record<string, unknown>;
}

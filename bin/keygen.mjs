#!/usr/bin/env node
// Prints a fresh site identity as env text. Run once; store the result as a secret.
import { formatSiteKeys, generateSiteKeys } from "../dist/site-keys.js";

const USAGE = `usage: npx --no keygen

Generates this site's byollm identity and prints it as an env line.
Run it once. Store the result as a secret. Regenerating it makes every
daemon that has paired with this site pair again.
(--no: npx runs the installed package's keygen, whether it is installed
as byollm-server-native or as @byollm/server, and never downloads one.)
`;

const args = process.argv.slice(2);
if (args.includes("--help") || args.includes("-h")) {
  process.stdout.write(USAGE);
} else {
  // Printed, never written to a file: where the secret lives is the operator's choice.
  process.stdout.write(formatSiteKeys(generateSiteKeys()));
}

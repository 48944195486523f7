// What checks.mjs and cluster_checks.mjs share: reading the rendered manifests from the command
// line, counting checks, and matching label selectors.
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";

// The rendered objects of argv's RENDERED.yaml, and OUT_DIR; exits 2 with a usage line without.
export function loadArguments(script) {
  const [file, outDir] = process.argv.slice(2);
  if (!file || !outDir) {
    console.error(`usage: node ${script} RENDERED.yaml OUT_DIR`);
    process.exit(2);
  }
  const objects = parseAllDocuments(readFileSync(file, "utf8"), { version: "1.1" })
    .map((d) => d.toJS())
    .filter((o) => o && typeof o === "object");
  return { objects, outDir };
}

let failures = 0;
let passed = 0;
// Counts a check; prints the message of a failed one.
export function check(condition, message) {
  if (condition) {
    passed++;
  } else {
    failures++;
    console.log(`FAIL ${message}`);
  }
}
// Prints the tally and exits 1 if any check failed.
export function finish() {
  console.log(`${passed} check(s) passed, ${failures} failed`);
  process.exit(failures > 0 ? 1 : 0);
}
// Whether a non-empty label selector selects these labels.
export const matches = (selector, labels) =>
  !!selector && Object.keys(selector).length > 0 &&
  Object.entries(selector).every(([k, v]) => labels?.[k] === v);

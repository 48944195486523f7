// Offline validation of rendered Kubernetes manifests (tests/deploy/k8s_test.sh).
//
// usage: node validate.mjs FILE.yaml     (multi-document YAML, e.g. `kubectl kustomize` output)
//
// For every document:
//  1. apiVersion/kind must name a model of the `kubernetes-models` package (the Kubernetes
//     OpenAPI schemas compiled to validators); an unknown kind is an error, not a skip.
//  2. The model's own validate(): types, enums, formats, required fields.
//  3. Unknown fields. The Kubernetes schemas allow extra properties, so a misspelled field
//     (`readinesProbe`) would pass step 2 and be dropped by the API server. The compiled
//     validators read every property their schema declares (and every entry of a map they
//     declare), so the document is validated a second time wrapped in proxies that record which
//     keys were read: a key present in the document but never read is not in the schema.
// Prints one line per object and exits 1 if anything failed.
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";
import * as models from "kubernetes-models";

// "apps/v1 StatefulSet" -> model class, from every group/version the package exports.
function modelRegistry() {
  const registry = new Map();
  const visit = (ns, depth) => {
    for (const value of Object.values(ns)) {
      if (typeof value === "function" && typeof value.apiVersion === "string" &&
          typeof value.kind === "string" && typeof value.prototype.validate === "function") {
        registry.set(`${value.apiVersion} ${value.kind}`, value);
      } else if (value && typeof value === "object" && depth < 3) {
        visit(value, depth + 1);
      }
    }
  };
  visit(models, 0);
  return registry;
}

// Deep copy of `value` in which every object is a proxy recording the keys read from it.
function tracked(value, path, nodes) {
  if (value === null || typeof value !== "object") return value;
  if (Array.isArray(value)) return value.map((v, i) => tracked(v, `${path}/${i}`, nodes));
  const read = new Set();
  const copy = {};
  for (const [k, v] of Object.entries(value)) copy[k] = tracked(v, `${path}/${k}`, nodes);
  nodes.push({ path, keys: Object.keys(copy), read });
  return new Proxy(copy, {
    get(target, key, receiver) {
      if (typeof key === "string") read.add(key);
      return Reflect.get(target, key, receiver);
    },
  });
}

function unknownFields(cls, doc) {
  const nodes = [];
  const proxy = tracked(doc, "", nodes);
  try {
    cls.prototype.validate.call(proxy);
  } catch {
    // Schema errors are reported by the plain validation.
  }
  const unknown = [];
  for (const node of nodes) {
    for (const key of node.keys) {
      if (!node.read.has(key)) unknown.push(`${node.path}/${key}`);
    }
  }
  // Name only the outermost unknown key, not everything below it.
  return unknown.filter((p) => !unknown.some((q) => p.startsWith(`${q}/`))).sort();
}

function main() {
  const file = process.argv[2];
  if (!file) {
    console.error("usage: node validate.mjs FILE.yaml");
    process.exit(2);
  }
  // YAML 1.1, as the Kubernetes tools parse it (`on`, `yes` are booleans there).
  const docs = parseAllDocuments(readFileSync(file, "utf8"), { version: "1.1", uniqueKeys: true });
  const registry = modelRegistry();
  let failures = 0;
  let checked = 0;
  const fail = (what, message) => {
    failures++;
    console.log(`FAIL ${what}: ${message}`);
  };
  (Array.isArray(docs) ? docs : [docs]).forEach((d, index) => {
    const where = `document ${index + 1}`;
    if (d.errors.length > 0) {
      fail(where, d.errors.map((e) => e.message).join("; "));
      return;
    }
    const doc = d.toJS();
    if (doc === null || doc === undefined) return;  // empty document
    if (typeof doc !== "object" || Array.isArray(doc)) {
      fail(where, "not a mapping");
      return;
    }
    const name = `${doc.kind}/${doc.metadata?.name ?? "?"}`;
    const cls = registry.get(`${doc.apiVersion} ${doc.kind}`);
    if (!cls) {
      fail(`${where} ${name}`, `unknown apiVersion/kind "${doc.apiVersion}" "${doc.kind}"`);
      return;
    }
    checked++;
    let ok = true;
    try {
      new cls(doc).validate();
    } catch (e) {
      ok = false;
      fail(`${doc.apiVersion} ${name}`, e.message);
    }
    const unknown = unknownFields(cls, doc);
    if (unknown.length > 0) {
      ok = false;
      fail(`${doc.apiVersion} ${name}`, `unknown field(s): ${unknown.join(", ")}`);
    }
    if (ok) console.log(`ok   ${doc.apiVersion} ${name}`);
  });
  if (checked === 0) fail(file, "no Kubernetes object found");
  console.log(`${checked} object(s) checked, ${failures} failure(s)`);
  process.exit(failures > 0 ? 1 : 0);
}

main();

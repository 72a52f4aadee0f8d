// Parse an AsyncAPI document with the official parser (@asyncapi/parser) and
// fail on any error-severity diagnostic, printing every diagnostic with its path.
// Usage: node tests/contracts_asyncapi/validate.mjs contracts/schema/asyncapi.yaml
import { Parser, fromFile, DiagnosticSeverity } from "@asyncapi/parser";

const SEVERITY = ["error", "warning", "info", "hint"];

const path = process.argv[2];
if (!path) {
  console.error("usage: node validate.mjs <asyncapi.yaml>");
  process.exit(2);
}

const parser = new Parser();
const { document, diagnostics } = await fromFile(parser, path).parse();

let errors = 0;
for (const d of diagnostics) {
  if (d.severity === DiagnosticSeverity.Error) errors += 1;
  const where = (d.path || []).join("/") || "(root)";
  console.log(`${SEVERITY[d.severity] ?? d.severity} ${d.code}: ${d.message} at ${where}`);
}

if (errors > 0 || !document) {
  console.error(`${path}: ${errors} error(s); the document is not valid AsyncAPI`);
  process.exit(1);
}
const channels = document.channels().length;
const operations = document.operations().length;
const messages = document.components().messages().length;
console.log(
  `${path}: valid AsyncAPI ${document.version()} ` +
    `(${channels} channels, ${operations} operations, ${messages} messages)`,
);

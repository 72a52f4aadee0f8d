// Whether an agent's responseSchema may be handed to react-jsonschema-form, and the copy
// it gets. The schema is the agent's, so it may be broken or hostile: rjsf throws while
// rendering on a `$ref` it cannot resolve ("#", a URL, a cycle of definitions) and
// expands what the schema asks for (1e8 `minItems` defaults, a chain of definitions each
// using the next twice, an `allOf` of `anyOf`s merged into every combination, a huge
// `enum` of options) on the page's only thread. A schema refused here is answered as free
// JSON, in its own card; the agent checks what it receives. Pure: no DOM, no React.

import safeRegex from "safe-regex2";
import type { Json, JsonObject } from "./api";

/** What one form may ask of the page. */
export const LIMITS = {
  /** subschemas of the schema as sent (definitions included) */
  nodes: 5000,
  /** nesting, as written and through `$ref`s (rendering recurses once per level) */
  depth: 32,
  /** fields, options and default values the form would build, `$ref`s and `minItems` expanded */
  expanded: 5000,
  /** items an array's `minItems` makes the form fill in */
  minItems: 1000,
  /** the branches one `allOf` is merged into (its members' `anyOf` / `oneOf` multiplied) */
  branches: 64,
} as const;

export type Checked = { ok: true; schema: JsonObject } | { ok: false; why: string };

class Refused extends Error {}

const refuse = (why: string): never => { throw new Refused(why); };

/** The agent's text, short enough for a note. */
const quoted = (text: string): string => JSON.stringify(text.length > 60 ? text.slice(0, 60) + "…" : text);

// the keywords whose value is a schema, a list of schemas, or a map of name to schema
const ONE = ["additionalProperties", "items", "additionalItems", "contains", "not", "propertyNames",
  "if", "then", "else", "unevaluatedItems", "unevaluatedProperties"];
const LIST = ["allOf", "anyOf", "oneOf", "items", "prefixItems"];
const MAP = ["properties", "patternProperties", "definitions", "$defs", "dependencies",
  "dependentSchemas"];
/** base-URI keywords: a schema must not resolve its `$ref`s, or share ajv's cache of
 *  compiled schemas with another card's, by an `$id` of the agent's choosing */
const DROPPED = ["$id", "$schema", "$anchor", "$dynamicAnchor"];

const isObject = (v: Json | undefined): v is JsonObject =>
  !!v && typeof v === "object" && !Array.isArray(v);

/** `schema` (less its base-URI keywords), or why the inbox must not build a form from it
 *  (with `data`, the form's initial data, counted in). */
export function formSchema(schema: JsonObject, data?: Json): Checked {
  try {
    const counter = { nodes: 0 };
    const cleaned = clean(schema, "", 0, counter) as JsonObject;
    new Expansion(cleaned).check(data);
    return { ok: true, schema: cleaned };
  } catch (error) {
    if (error instanceof Refused) return { ok: false, why: error.message };
    return { ok: false, why: `it cannot be read (${String(error)})` };
  }
}

/** A copy without the base-URI keywords; refuses a schema too large or too deep. */
function clean(node: Json, at: string, depth: number, counter: { nodes: number }): Json {
  if (typeof node === "boolean") return node;
  if (!isObject(node)) return refuse(`${at || "/"} is not a schema`);
  if (++counter.nodes > LIMITS.nodes) refuse(`it has more than ${LIMITS.nodes} subschemas`);
  if (depth > LIMITS.depth) tooDeep();
  const out: JsonObject = {};
  for (const [key, value] of Object.entries(node)) {
    if (DROPPED.includes(key)) continue;
    const here = `${at}/${key}`;
    if (LIST.includes(key) && Array.isArray(value)) {
      out[key] = value.map((v, n) => clean(v, `${here}/${n}`, depth + 1, counter));
    } else if (ONE.includes(key)) {
      out[key] = clean(value, here, depth + 1, counter);
    } else if (MAP.includes(key)) {
      if (!isObject(value)) refuse(`${here} is not an object`);
      const map: JsonObject = {};
      for (const [name, sub] of Object.entries(value as JsonObject)) {
        // `dependencies` may name required properties instead of a schema
        map[name] = key === "dependencies" && Array.isArray(sub) ? sub
          : clean(sub, `${here}/${name}`, depth + 1, counter);
      }
      out[key] = map;
    } else {
      out[key] = value;
    }
  }
  return out;
}

/** The JSON values under `value`, counted up to `cap`. */
function leaves(value: Json | undefined, cap: number): number {
  let count = 0;
  const stack: (Json | undefined)[] = [value];
  while (stack.length && count <= cap) {
    const v = stack.pop();
    if (v === undefined) continue;
    count++;
    if (v && typeof v === "object") stack.push(...(Array.isArray(v) ? v : Object.values(v)));
  }
  return count;
}

interface Cost {
  /** what the form builds from it */
  size: number;
  /** the schemas it is merged into inside an `allOf` */
  branches: number;
  /** the levels it nests, `$ref`s followed */
  height: number;
}

/** The walk of a cleaned schema as rjsf expands it: `$ref`s resolved (each target walked
 *  once), arrays filled to their `minItems` or their default's length. */
class Expansion {
  private readonly done = new Map<string, Cost>();
  private readonly resolving = new Set<string>();

  constructor(private readonly root: JsonObject) {}

  check(data: Json | undefined): void {
    let { size } = this.cost(this.root, "", 0);
    // ajv compiles the definitions no `$ref` uses too: each must resolve as well
    for (const key of ["definitions", "$defs"]) {
      const defs = this.root[key];
      if (!isObject(defs)) continue;
      for (const name of Object.keys(defs)) {
        const ref = `#/${key}/${name.replace(/~/g, "~0").replace(/\//g, "~1")}`;
        size += this.cost({ $ref: encodeURI(ref) }, "", 0).size;
        if (size > LIMITS.expanded) tooLarge();
      }
    }
    if (size + leaves(data, LIMITS.expanded) > LIMITS.expanded) tooLarge();
  }

  /** The schema a local `$ref` points at: a JSON Pointer within this schema, nothing else. */
  private target(ref: Json, at: string): { pointer: string; schema: Json } {
    if (typeof ref !== "string") return refuse(`${at}/$ref is not a string`);
    if (ref !== "#" && !ref.startsWith("#/")) {
      return refuse(`${at}/$ref ${quoted(ref)} is not a reference within the schema`);
    }
    let pointer: string;
    try {
      pointer = decodeURIComponent(ref.slice(1));
    } catch {
      return refuse(`${at}/$ref ${quoted(ref)} is malformed`);
    }
    let found: Json = this.root;
    for (const part of pointer.split("/").slice(1)) {
      const key = part.replace(/~1/g, "/").replace(/~0/g, "~");
      const next: Json | undefined = Array.isArray(found) ? found[Number(key)]
        : isObject(found) && Object.hasOwn(found, key) ? found[key] : undefined;
      if (next === undefined) return refuse(`${at}/$ref ${quoted(ref)} names nothing in the schema`);
      found = next;
    }
    if (typeof found !== "boolean" && !isObject(found)) {
      return refuse(`${at}/$ref ${quoted(ref)} is not a schema`);
    }
    return { pointer, schema: found };
  }

  private cost(node: Json, at: string, depth: number): Cost {
    if (typeof node === "boolean" || !isObject(node)) return { size: 1, branches: 1, height: 1 };
    if (depth > LIMITS.depth) tooDeep();
    let size = 1;
    let branches = 1;
    let height = 0;
    const add = (n: number) => {
      size += n;
      if (size > LIMITS.expanded) tooLarge();
    };
    const sub = (value: Json, where: string, times = 1): Cost => {
      const found = this.cost(value, where, depth + 1);
      height = Math.max(height, found.height);
      add(found.size * times);
      return found;
    };

    if (node.$ref !== undefined) {
      const { pointer, schema } = this.target(node.$ref, at);
      if (this.resolving.has(pointer)) refuse(`${at}/$ref ${quoted(String(node.$ref))} refers to itself`);
      let known = this.done.get(pointer);
      if (known === undefined) {
        this.resolving.add(pointer);
        known = this.cost(schema, `#${pointer}`, depth + 1);
        this.resolving.delete(pointer);
        this.done.set(pointer, known);
      }
      if (depth + known.height > LIMITS.depth) tooDeep();
      height = Math.max(height, known.height);
      add(known.size);
      branches = known.branches;
    }
    for (const key of ["properties", "patternProperties", "dependencies", "dependentSchemas"]) {
      const map = node[key];
      if (!isObject(map)) continue;
      for (const [name, value] of Object.entries(map)) {
        if (key === "patternProperties") checkPattern(name, `${at}/${key}`);
        if (!Array.isArray(value)) sub(value, `${at}/${key}/${name}`);
      }
    }
    for (const key of ["additionalProperties", "contains", "not", "propertyNames", "if", "then",
      "else", "unevaluatedItems", "unevaluatedProperties"]) {
      if (node[key] !== undefined) sub(node[key], `${at}/${key}`);
    }
    // rjsf fills an array up to its minItems (1e8 of them would freeze the tab), and shows
    // one field per item of its default
    const minItems = node.minItems === undefined ? 0 : Number(node.minItems);
    if (!(minItems <= LIMITS.minItems)) {
      refuse(`${at || "/"} asks for at least ${String(node.minItems)} items`);
    }
    const filled = Math.max(1, minItems, Array.isArray(node.default) ? node.default.length : 0);
    for (const key of ["items", "prefixItems"]) {
      const items = node[key];
      if (Array.isArray(items)) items.forEach((item, n) => sub(item, `${at}/${key}/${n}`));
      else if (items !== undefined) sub(items, `${at}/${key}`, filled);
    }
    if (node.additionalItems !== undefined) sub(node.additionalItems, `${at}/additionalItems`, filled);
    for (const key of ["anyOf", "oneOf"]) {
      const options = node[key];
      if (!Array.isArray(options)) continue;
      let sum = 0;
      options.forEach((option, n) => { sum += sub(option, `${at}/${key}/${n}`).branches; });
      branches *= Math.max(1, sum);
    }
    // rjsf merges an allOf's members into every combination of their anyOf / oneOf options
    if (Array.isArray(node.allOf)) {
      node.allOf.forEach((member, n) => {
        branches *= sub(member, `${at}/allOf/${n}`).branches;
        if (branches > LIMITS.branches) {
          refuse(`${at}/allOf merges into more than ${LIMITS.branches} alternatives`);
        }
      });
    }
    if (branches > LIMITS.branches) refuse(`${at || "/"} has more than ${LIMITS.branches} alternatives`);
    for (const key of ["enum", "default", "const", "examples"]) {
      if (node[key] !== undefined) add(leaves(node[key], LIMITS.expanded));
    }
    return { size, branches, height: height + 1 };
  }
}

const tooLarge = (): never => refuse(`its form would have more than ${LIMITS.expanded} parts`);
const tooDeep = (): never => refuse(`it nests deeper than ${LIMITS.depth} levels`);

/** rjsf tests a `patternProperties` name with `new RegExp` as written (ajv's guard does
 *  not reach it): a broken or exponentially backtracking one is refused. */
function checkPattern(pattern: string, at: string): void {
  try {
    new RegExp(pattern);
  } catch {
    refuse(`${at} ${quoted(pattern)} is not a regular expression`);
  }
  if (!safeRegex(pattern)) refuse(`${at} ${quoted(pattern)} may backtrack exponentially`);
}

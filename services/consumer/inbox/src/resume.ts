// The resume a thread needs: one entry per open interrupt, each resolved with an answer
// or cancelled; expired ones may only be cancelled. Pure: the page asks `plan` whether
// the thread can be submitted and what to send.

import type { Json, JsonObject, OpenInterrupt } from "./api";

export type Answer = { status: "resolved"; payload: Json; edited?: boolean } | { status: "cancelled" };

export interface Plan {
  ready: boolean;
  missing: string[];
  entries: { interruptId: string; status: "resolved" | "cancelled"; payload?: Json }[];
}

/** The gatekeeper's rule on the instant the service read from `expiresAt` (`expiresAtMs`,
 *  absent when there is none or it is unparseable: never expires). Never the browser's
 *  `Date.parse`: it reads a time without an offset in the browser's zone, the gatekeeper
 *  in UTC. */
export function isExpired(interrupt: OpenInterrupt, nowMs: number): boolean {
  if (interrupt.expired) return true;
  return interrupt.expiresAtMs !== undefined && interrupt.expiresAtMs <= nowMs;
}

/** The common `{"approved": boolean}` shape: approve / reject buttons suffice. */
export function isApproval(schema: JsonObject | undefined): boolean {
  if (!schema || schema.type !== "object") return false;
  const props = schema.properties;
  if (!props || typeof props !== "object" || Array.isArray(props)) return false;
  const approved = (props as JsonObject).approved as JsonObject | undefined;
  return !!approved && approved.type === "boolean" && Object.keys(props).length === 1;
}

/** How the page answers a schema: approve / reject buttons, the same plus "Edit and
 *  approve" (an approval whose answer may carry the tool call's edited arguments), or a
 *  form. The edit convention: an object schema with an `approved` boolean and an
 *  `arguments` object (the tool's argument schema), requiring nothing else. */
export type Shape =
  | { kind: "approval" }
  | { kind: "editable"; argumentsSchema: JsonObject; needsArguments: boolean }
  | { kind: "form" };

function objectOf(value: Json | undefined): JsonObject | undefined {
  return value && typeof value === "object" && !Array.isArray(value) ? value : undefined;
}

export function shapeOf(schema: JsonObject | undefined): Shape {
  if (isApproval(schema)) return { kind: "approval" };
  const props = objectOf(schema?.properties);
  const approved = objectOf(props?.approved);
  const args = objectOf(props?.arguments);
  const required = Array.isArray(schema?.required) ? schema.required : [];
  if (!schema || schema.type !== "object" || approved?.type !== "boolean" ||
      args?.type !== "object" ||
      !required.every((name) => name === "approved" || name === "arguments")) {
    return { kind: "form" };
  }
  return { kind: "editable", argumentsSchema: args, needsArguments: required.includes("arguments") };
}

/** The answer an approve / reject button gives (with the arguments as proposed when the
 *  schema requires them). */
export function decision(shape: Shape, approved: boolean, proposed: Json | undefined): JsonObject {
  return shape.kind === "editable" && shape.needsArguments
    ? { approved, arguments: proposed ?? {} } : { approved };
}

/** The schema of the `arguments` property on its own, keeping the definitions it refers to. */
export function argumentsForm(schema: JsonObject, argumentsSchema: JsonObject): JsonObject {
  const out: JsonObject = { ...argumentsSchema };
  for (const key of ["$defs", "definitions"]) {
    if (schema[key] !== undefined && out[key] === undefined) out[key] = schema[key];
  }
  return out;
}

export function plan(interrupts: OpenInterrupt[], answers: Map<string, Answer>,
                     nowMs: number): Plan {
  const missing: string[] = [];
  const entries: Plan["entries"] = [];
  for (const interrupt of interrupts) {
    const answer = answers.get(interrupt.id);
    if (!answer || (answer.status === "resolved" && isExpired(interrupt, nowMs))) {
      missing.push(interrupt.id);
    } else if (answer.status === "resolved") {
      entries.push({ interruptId: interrupt.id, status: "resolved", payload: answer.payload });
    } else {
      entries.push({ interruptId: interrupt.id, status: "cancelled" });
    }
  }
  return { ready: interrupts.length > 0 && missing.length === 0, missing, entries };
}

export function newRunId(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(8));
  return "run-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

export function countdown(msLeft: number): string {
  const s = Math.max(0, Math.floor(msLeft / 1000));
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
  const two = (n: number) => String(n).padStart(2, "0");
  return h > 0 ? `${h}:${two(m)}:${two(sec)}` : `${m}:${two(sec)}`;
}

// The resume a thread needs: one entry per open interrupt, each resolved with an answer
// or cancelled; expired ones may only be cancelled. Pure: the page asks `plan` whether
// the thread can be submitted and what to send.

import type { Json, JsonObject, OpenInterrupt } from "./api";

export type Answer = { status: "resolved"; payload: Json } | { status: "cancelled" };

export interface Plan {
  ready: boolean;
  missing: string[];
  entries: { interruptId: string; status: "resolved" | "cancelled"; payload?: Json }[];
}

export function isExpired(interrupt: OpenInterrupt, nowMs: number): boolean {
  if (interrupt.expired) return true;
  if (interrupt.expiresAt === undefined) return false;
  const at = Date.parse(interrupt.expiresAt);
  return !Number.isNaN(at) && at <= nowMs;
}

/** The common `{"approved": boolean}` shape: approve / reject buttons suffice. */
export function isApproval(schema: JsonObject | undefined): boolean {
  if (!schema || schema.type !== "object") return false;
  const props = schema.properties;
  if (!props || typeof props !== "object" || Array.isArray(props)) return false;
  const approved = (props as JsonObject).approved as JsonObject | undefined;
  return !!approved && approved.type === "boolean" && Object.keys(props).length === 1;
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

// The consumer service's API as the inbox uses it: every call carries the API key the
// person entered once (kept in sessionStorage: gone when the tab closes), SSE is read
// with fetch (EventSource cannot send an Authorization header).

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
export type JsonObject = { [key: string]: Json };

export interface OpenInterrupt {
  id: string;
  threadId: string;
  runId: string;
  agent?: string;
  reason?: string;
  message?: string;
  toolCallId?: string;
  /** The gated call, once the service has read it (`arguments` absent when too large). */
  toolCall?: { id: string; name?: string; arguments?: Json };
  responseSchema?: JsonObject;
  expiresAt?: string;
  /** `expiresAt` as the gatekeeper reads it (epoch ms); absent with no or an unparseable one. */
  expiresAtMs?: number;
  expired: boolean;
  openedAt: number;
}

export interface Listing {
  interrupts: OpenInterrupt[];
  total: number;
  now: number;
  /** The cursor of the page after this one (absent on the last). */
  next?: string;
}

export interface TrailRow {
  kind: "decision" | "event";
  at: number;
  runId?: string;
  verdict?: string;
  code?: string;
  message?: string;
  type?: string;
  outcome?: JsonObject;
}

export interface ToolCall {
  id?: string;
  name?: string;
  arguments: Json;
}

export interface History {
  threadId: string;
  input: JsonObject;
  toolCalls: { [id: string]: ToolCall };
  trail: TrailRow[];
  thread?: { status: string; agent?: string; lastRunId?: string };
}

export interface Problem {
  status: number;
  code: string;
  detail: string;
  title?: string;
}

const KEY = "agui-relay-api-key";

export function apiKey(): string {
  return sessionStorage.getItem(KEY) ?? "";
}

export function setApiKey(key: string): void {
  if (key) sessionStorage.setItem(KEY, key);
  else sessionStorage.removeItem(KEY);
}

export class ApiError extends Error {
  constructor(readonly problem: Problem) {
    super(problem.detail);
  }
}

function headers(extra: Record<string, string> = {}): Record<string, string> {
  const key = apiKey();
  return key ? { ...extra, Authorization: `Bearer ${key}` } : extra;
}

async function problemOf(response: Response): Promise<Problem> {
  try {
    const body = await response.json();
    return { status: response.status, code: String(body.code ?? "error"),
             detail: String(body.detail ?? response.statusText), title: body.title };
  } catch {
    return { status: response.status, code: "error", detail: response.statusText };
  }
}

export async function getJson<T>(path: string, signal?: AbortSignal): Promise<T> {
  const response = await fetch(path, { headers: headers(), signal });
  if (!response.ok) throw new ApiError(await problemOf(response));
  return (await response.json()) as T;
}

/** Every open interrupt, page by page by cursor: each page starts after the last item
 *  read, so interrupts opening and closing meanwhile neither skip nor repeat one (by
 *  offset they did); an interrupt is kept once whatever a page holds. */
export async function listInterrupts(signal?: AbortSignal): Promise<Listing> {
  const all: OpenInterrupt[] = [];
  const kept = new Set<string>();
  let cursor: string | undefined;
  let now = Date.now();
  let total = 0;
  for (;;) {
    const after = cursor === undefined ? "" : `&cursor=${encodeURIComponent(cursor)}`;
    const page = await getJson<Listing>(`/interrupts?limit=500${after}`, signal);
    for (const item of page.interrupts) {
      const key = JSON.stringify([item.threadId, item.id]);
      if (kept.has(key)) continue;
      kept.add(key);
      all.push(item);
    }
    now = page.now;
    total = page.total;
    if (page.next === undefined) break;
    cursor = page.next;
  }
  return { interrupts: all, total, now };
}

export function threadPath(threadId: string): string {
  return `/interrupts/threads/${encodeURIComponent(threadId)}`;
}

/** Read an SSE response's `data:` payloads (and `:` comments) until it ends. */
export async function readSse(response: Response, onData: (data: string) => void,
                              onComment: (text: string) => void = () => {}): Promise<void> {
  if (!response.body) return;
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let cut: number;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const data: string[] = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
        else if (line.startsWith(":")) onComment(line.slice(1).trim());
      }
      if (data.length) onData(data.join("\n"));
    }
  }
}

/** Follow /interrupts/stream: `onReady` once subscribed, `onChange` per change; reconnects. */
export function followChanges(onReady: () => void, onChange: () => void,
                              onError: (error: unknown) => void): () => void {
  const abort = new AbortController();
  const loop = async () => {
    while (!abort.signal.aborted) {
      try {
        const response = await fetch("/interrupts/stream", { headers: headers(), signal: abort.signal });
        if (!response.ok) throw new ApiError(await problemOf(response));
        await readSse(response, () => onChange(), (text) => { if (text === "ready") onReady(); });
      } catch (error) {
        if (abort.signal.aborted) return;
        onError(error);
      }
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
  };
  void loop();
  return () => abort.abort();
}

/** POST a resume run; the problem when refused, else each event as it streams. */
export async function submitRun(agent: string, body: JsonObject,
                                onEvent: (event: JsonObject) => void): Promise<Problem | null> {
  const response = await fetch(`/agents/${encodeURIComponent(agent)}`, {
    method: "POST",
    headers: headers({ "Content-Type": "application/json", Accept: "text/event-stream" }),
    body: JSON.stringify(body),
  });
  if (!response.ok) return problemOf(response);
  await readSse(response, (data) => onEvent(JSON.parse(data) as JsonObject));
  return null;
}

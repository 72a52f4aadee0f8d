// The interrupt inbox: every open interrupt of the caller's threads, answered from here.
// Newest first, grouped by thread; one complete resume per thread (resume.ts), sent as a
// new run; the gatekeeper's decision and the resumed run's events shown as they stream.

import { createRoot } from "react-dom/client";
import { StrictMode, memo, useCallback, useEffect, useMemo, useRef, useState } from "react";
import {
  ApiError, apiKey, followChanges, getJson, listInterrupts, setApiKey, submitRun, threadPath,
  type History, type Json, type JsonObject, type OpenInterrupt, type Problem, type ToolCall,
} from "./api";
import { type Answer, countdown, decision, isApproval, isExpired, newRunId, plan, shapeOf } from "./resume";
import { AnswerForm, Contained, EditAndApprove, Unformed } from "./answer";
import { type Checked, formSchema } from "./schema";
import { currentNow, setServerNow, useClock } from "./clock";

function useRoute(): string {
  const [hash, setHash] = useState(location.hash);
  useEffect(() => {
    const onHash = () => setHash(location.hash);
    addEventListener("hashchange", onHash);
    return () => removeEventListener("hashchange", onHash);
  }, []);
  return hash;
}

const histories = new Map<string, Promise<History>>();

function history(threadId: string, fresh = false): Promise<History> {
  let found = histories.get(threadId);
  if (!found || fresh) {
    found = getJson<History>(threadPath(threadId));
    found.catch(() => histories.delete(threadId));
    histories.set(threadId, found);
  }
  return found;
}

function KeyForm({ onKey, problem }: { onKey: (key: string) => void; problem?: Problem }) {
  const [value, setValue] = useState(apiKey());
  return (
    <form className="key" onSubmit={(e) => { e.preventDefault(); onKey(value.trim()); }}>
      <label htmlFor="api-key">API key</label>
      <input id="api-key" type="password" autoComplete="off" value={value}
             onChange={(e) => setValue(e.target.value)} />
      <button type="submit">Use key</button>
      {problem && <p role="alert" className="problem">{problem.detail}</p>}
      <p className="hint">Kept in this tab only (sessionStorage) and sent with every request.</p>
    </form>
  );
}

/** The expiry as the service read it (`expiresAtMs`: the gatekeeper's reading of
 *  `expiresAt`), never the browser's own `Date.parse`, which reads an offset-less time in
 *  the browser's time zone. */
function Expiry({ interrupt }: { interrupt: OpenInterrupt }) {
  const at = interrupt.expiresAtMs ?? NaN;
  const ticking = !Number.isNaN(at) && !interrupt.expired;
  // only a running countdown follows the clock; every other badge is static
  const now = useClock((t) => !ticking ? 0 : isExpired(interrupt, t) ? -1 : Math.floor(t / 1000) * 1000);
  if (interrupt.expired || now < 0) return <span className="badge expired">expired</span>;
  if (interrupt.expiresAt === undefined) return <span className="badge">no expiry</span>;
  if (Number.isNaN(at)) return <span className="badge">never expires</span>;
  return <span className="badge countdown" title={interrupt.expiresAt}>
    expires in <time dateTime={interrupt.expiresAt}>{countdown(at - now)}</time></span>;
}

function describe(answer: Answer | undefined): string {
  if (!answer) return "No answer yet";
  if (answer.status === "cancelled") return "Answer: cancel this interrupt";
  const payload = answer.payload as JsonObject | null;
  if (answer.edited && payload && typeof payload === "object") {
    return "Answer: approve with edited arguments " + JSON.stringify(payload.arguments);
  }
  if (payload && typeof payload === "object" && !Array.isArray(payload) &&
      typeof payload.approved === "boolean" &&
      Object.keys(payload).every((k) => k === "approved" || k === "arguments")) {
    return payload.approved ? "Answer: approve" : "Answer: reject";
  }
  return "Answer: " + JSON.stringify(answer.payload);
}

interface CardProps {
  interrupt: OpenInterrupt; answer?: Answer; open: boolean;
  onAnswer: (id: string, answer: Answer | undefined) => void;
  toolCall?: ToolCall;
}

/** One interrupt; should it fail to render, a card that can still cancel it (the others
 *  stay as they are). */
const InterruptCard = memo(function InterruptCard(props: CardProps) {
  return <Contained fallback={<BrokenCard {...props} />}><Card {...props} /></Contained>;
});

function BrokenCard({ interrupt, answer, onAnswer, open }: CardProps) {
  const attrs = open ? { "data-interrupt-id": interrupt.id } : { "data-answered-interrupt-id": interrupt.id };
  return (
    <article className="interrupt" aria-labelledby={`int-${interrupt.id}`} {...attrs}>
      <h3 id={`int-${interrupt.id}`}>Interrupt <code>{String(interrupt.id)}</code></h3>
      <p className="problem">This interrupt cannot be shown here: it can only be cancelled.</p>
      {open && (
        <div className="buttons">
          <button type="button" aria-pressed={answer?.status === "cancelled"}
                  onClick={() => onAnswer(interrupt.id, { status: "cancelled" })}>Cancel interrupt</button>
        </div>
      )}
    </article>
  );
}

function Card({ interrupt, answer, onAnswer, toolCall, open }: CardProps) {
  const expired = useClock((t) => isExpired(interrupt, t));
  // the agent's schema, as far as the page may build a form from it (schema.ts); the
  // approve / reject buttons of a plain approval build none
  const checked = useMemo((): Checked | undefined => {
    const raw = interrupt.responseSchema;
    if (raw === undefined || isApproval(raw)) return undefined;
    const props = raw.properties;
    const filled = !!props && typeof props === "object" && "arguments" in props;
    return formSchema(raw, filled ? toolCall?.arguments : undefined);
  }, [interrupt.responseSchema, toolCall]);
  const schema = checked === undefined ? interrupt.responseSchema
    : checked.ok ? checked.schema : undefined;
  const shape = shapeOf(schema);
  const headingId = `int-${interrupt.id}`;
  const attrs = open ? { "data-interrupt-id": interrupt.id } : { "data-answered-interrupt-id": interrupt.id };
  const pressed = (want: boolean) => answer?.status === "resolved" && !answer.edited &&
    (answer.payload as JsonObject | null)?.approved === want;
  const button = (approved: boolean) => onAnswer(interrupt.id, {
    status: "resolved", payload: decision(shape, approved, toolCall?.arguments) });
  return (
    <article className={"interrupt" + (expired ? " is-expired" : "")} aria-labelledby={headingId} {...attrs}>
      <h3 id={headingId}>{interrupt.message ?? interrupt.reason ?? interrupt.id}</h3>
      <p className="meta">
        <Expiry interrupt={interrupt} />{" "}
        <span>{interrupt.reason}</span> · <code>{interrupt.id}</code> · run <code>{interrupt.runId}</code>
      </p>
      {interrupt.toolCallId && (
        <div className="toolcall">
          <p>Tool call <code>{toolCall?.name ?? "?"}</code> <code>{interrupt.toolCallId}</code></p>
          <pre aria-label="Tool call arguments">{toolCall === undefined ? "loading…"
            : JSON.stringify(toolCall.arguments, null, 2)}</pre>
        </div>
      )}
      {open && (
        <div className="answer">
          {expired ? (
            <p>This interrupt has expired: it can only be cancelled.</p>
          ) : checked && !checked.ok ? (
            <Unformed why={checked.why}
                      onAnswer={(payload) => onAnswer(interrupt.id, { status: "resolved", payload })} />
          ) : shape.kind !== "form" ? (
            <>
              <div className="buttons" role="group" aria-label="Approve or reject">
                <button type="button" aria-pressed={pressed(true)} onClick={() => button(true)}>Approve</button>
                <button type="button" aria-pressed={pressed(false)} onClick={() => button(false)}>Reject</button>
              </div>
              {shape.kind === "editable" && (
                <EditAndApprove interrupt={interrupt} schema={schema!}
                                argumentsSchema={shape.argumentsSchema}
                                proposed={toolCall === undefined ? undefined : toolCall.arguments ?? {}}
                                onAnswer={(payload) => onAnswer(interrupt.id, { status: "resolved", payload, edited: true })} />
              )}
            </>
          ) : (
            <AnswerForm interrupt={interrupt} schema={schema} toolArguments={toolCall?.arguments}
                        onAnswer={(payload) => onAnswer(interrupt.id, { status: "resolved", payload })} />
          )}
          <div className="buttons">
            <button type="button" aria-pressed={answer?.status === "cancelled"}
                    onClick={() => onAnswer(interrupt.id, { status: "cancelled" })}>Cancel interrupt</button>
            {answer && <button type="button" onClick={() => onAnswer(interrupt.id, undefined)}>Clear answer</button>}
          </div>
          <p className="status" aria-live="polite">{describe(answer)}</p>
        </div>
      )}
    </article>
  );
}

interface Submission {
  runId: string;
  phase: "sending" | "admitted" | "refused" | "failed";
  problem?: Problem;
  events: JsonObject[];
  shown: OpenInterrupt[];
}

function eventLine(event: JsonObject): string {
  const type = String(event.type);
  switch (type) {
    case "TEXT_MESSAGE_CONTENT": return `${type}  ${event.delta}`;
    case "TOOL_CALL_START": return `${type}  ${event.toolCallName}`;
    case "TOOL_CALL_RESULT": return `${type}  ${event.content}`;
    case "RUN_FINISHED": return `${type}  ${(event.outcome as JsonObject | undefined)?.type ?? "success"}`;
    case "RUN_ERROR": return `${type}  ${event.message}`;
    case "CUSTOM": return `${type}  ${event.name} ${JSON.stringify(event.value)}`;
    default: return type;
  }
}

function toolCallOf(interrupt: OpenInterrupt, info: History | null): ToolCall | undefined {
  if (!interrupt.toolCallId) return undefined;
  if (interrupt.toolCall?.arguments !== undefined) return interrupt.toolCall as ToolCall;
  return info?.toolCalls[interrupt.toolCallId] ?? (info ? { arguments: null } : undefined);
}

function ThreadCard({ threadId, interrupts, onPin }: {
  threadId: string; interrupts: OpenInterrupt[]; onPin: (threadId: string, pinned: boolean) => void;
}) {
  // re-rendered by the clock only when one of the thread's interrupts expires
  useClock((t) => interrupts.filter((i) => isExpired(i, t)).map((i) => i.id).join(" "));
  const now = currentNow();
  const [answers, setAnswers] = useState(() => new Map<string, Answer>());
  const [info, setInfo] = useState<History | null>(null);
  const [submission, setSubmission] = useState<Submission | null>(null);
  const ref = useRef<HTMLElement>(null);
  // the listing carries each tool call once the service has read it; the thread's history
  // is asked only for those it does not (yet) have
  const wantsHistory = interrupts.some((i) => i.toolCallId && i.toolCall?.arguments === undefined);

  useEffect(() => {
    if (!wantsHistory || info || !ref.current) return;
    const observer = new IntersectionObserver((seen) => {
      if (seen.some((s) => s.isIntersecting)) {
        observer.disconnect();
        history(threadId).then(setInfo, () => {});
      }
    });
    observer.observe(ref.current);
    return () => observer.disconnect();
  }, [threadId, wantsHistory, info]);

  const live = submission && submission.phase !== "refused" && submission.phase !== "failed"
    ? submission.shown : interrupts;
  const open = !(submission && (submission.phase === "sending" || submission.phase === "admitted"));
  const checked = plan(interrupts, answers, now);
  const agent = interrupts[0]?.agent ?? info?.thread?.agent;

  const answer = useCallback((id: string, value: Answer | undefined) => setAnswers((old) => {
    const next = new Map(old);
    if (value) next.set(id, value); else next.delete(id);
    return next;
  }), []);

  const submit = async () => {
    const ready = plan(interrupts, answers, currentNow());
    if (!ready.ready || !agent) return;
    const runId = newRunId();
    const shown = interrupts;
    onPin(threadId, true);
    setSubmission({ runId, phase: "sending", events: [], shown });
    try {
      const found = await history(threadId, true);
      setInfo(found);
      const body: JsonObject = {
        state: {}, tools: [], context: [], forwardedProps: {}, ...found.input,
        threadId, runId, resume: ready.entries as unknown as Json,
      };
      const problem = await submitRun(agent, body, (event) => setSubmission((s) => s && {
        ...s, phase: "admitted", events: [...s.events, event] }));
      setSubmission((s) => s && (problem ? { ...s, phase: "refused", problem }
        : { ...s, phase: "admitted" }));
      if (!problem) setAnswers(new Map());
    } catch (error) {
      const problem = error instanceof ApiError ? error.problem
        : { status: 0, code: "network", detail: String(error) };
      setSubmission((s) => s && { ...s, phase: "failed", problem });
    }
  };

  const headingId = `thread-${threadId}`;
  return (
    <section className="thread" data-thread-id={threadId} aria-labelledby={headingId} ref={ref}>
      <header>
        <h2 id={headingId}>Thread <code>{threadId}</code></h2>
        <p className="meta">agent {agent ?? "?"} · <a href={`#/threads/${encodeURIComponent(threadId)}`}>history</a></p>
      </header>
      {live.map((interrupt) => (
        <InterruptCard key={interrupt.id} interrupt={interrupt} open={open}
                       answer={answers.get(interrupt.id)} onAnswer={answer}
                       toolCall={toolCallOf(interrupt, info)} />
      ))}
      {open && interrupts.length > 0 && (
        <footer>
          <p id={`${headingId}-plan`} aria-live="polite">
            {checked.ready ? "Every interrupt has an answer: ready to resume."
              : `${interrupts.length - checked.missing.length} of ${interrupts.length} answered: ` +
                "every open interrupt needs an answer or a cancel."}
          </p>
          <button type="button" className="primary" disabled={!checked.ready}
                  aria-describedby={`${headingId}-plan`} onClick={() => void submit()}>Resume thread</button>
        </footer>
      )}
      {submission && <Outcome submission={submission} />}
    </section>
  );
}

function Outcome({ submission }: { submission: Submission }) {
  return (
    <div className="outcome">
      {submission.phase === "sending" && <p role="status">Sending the resume (run {submission.runId})…</p>}
      {submission.phase === "admitted" && (
        <p role="status" className="admitted">Admitted: the gatekeeper accepted the resume;
          run <code>{submission.runId}</code> {submission.events.some((e) =>
            e.type === "RUN_FINISHED" || e.type === "RUN_ERROR") ? "ended." : "is running."}</p>
      )}
      {submission.problem && (
        <div role="alert" className="problem">
          <p><strong>{submission.phase === "refused" ? "Refused" : "Failed"}:</strong> {submission.problem.detail}</p>
          <p className="meta">{submission.problem.code} (HTTP {submission.problem.status})</p>
        </div>
      )}
      {submission.events.length > 0 && (
        <ol className="events" aria-label="Resumed run events">
          {submission.events.map((event, n) => <li key={n}><code>{eventLine(event)}</code></li>)}
        </ol>
      )}
    </div>
  );
}

function Inbox({ interrupts }: { interrupts: OpenInterrupt[] }) {
  const [pinned, setPinned] = useState(() => new Set<string>());
  const pin = useCallback((threadId: string, on: boolean) => setPinned((old) => {
    const next = new Set(old);
    if (on) next.add(threadId); else next.delete(threadId);
    return next;
  }), []);
  const groups = useMemo(() => {
    const byThread = new Map<string, OpenInterrupt[]>();
    for (const interrupt of interrupts) {
      const list = byThread.get(interrupt.threadId) ?? [];
      list.push(interrupt);
      byThread.set(interrupt.threadId, list);
    }
    for (const id of pinned) if (!byThread.has(id)) byThread.set(id, []);
    return [...byThread.entries()];
  }, [interrupts, pinned]);
  if (groups.length === 0) return <p className="empty">No interrupt is waiting on you.</p>;
  return (
    <>
      {groups.map(([threadId, list]) => (
        <ThreadCard key={threadId} threadId={threadId} interrupts={list} onPin={pin} />
      ))}
    </>
  );
}

function trailLine(row: History["trail"][number]): string {
  if (row.kind === "decision") {
    return `decision ${row.verdict}${row.code ? " " + row.code : ""}: ${row.message ?? ""}`;
  }
  if (row.type === "RUN_FINISHED") {
    const outcome = row.outcome as JsonObject | undefined;
    const opened = outcome?.type === "interrupt" ? (outcome.interrupts as JsonObject[]) : [];
    return opened.length ? `run finished: interrupt (${opened.length} opened) — ` +
      opened.map((i) => `${i.id}${i.message ? ` "${i.message}"` : ""}`).join(", ")
      : "run finished: success";
  }
  if (row.type === "RUN_ERROR") return `run error ${row.code ?? ""}: ${row.message ?? ""}`;
  return "run started";
}

function ThreadPage({ threadId }: { threadId: string }) {
  const [found, setFound] = useState<History | null>(null);
  const [problem, setProblem] = useState<Problem | null>(null);
  useEffect(() => {
    history(threadId, true).then(setFound, (e) => setProblem(
      e instanceof ApiError ? e.problem : { status: 0, code: "network", detail: String(e) }));
  }, [threadId]);
  return (
    <section className="thread-page" aria-labelledby="thread-page-title">
      <p><a href="#">← Back to the inbox</a></p>
      <h2 id="thread-page-title">Thread <code>{threadId}</code></h2>
      {problem && <p role="alert" className="problem">{problem.detail}</p>}
      {found?.thread && <p className="meta">status {found.thread.status} · agent {found.thread.agent ?? "?"}</p>}
      {found && (
        <ol className="trail" aria-label="Runs, decisions and interrupts in order">
          {found.trail.map((row, n) => (
            <li key={n}><time dateTime={new Date(row.at).toISOString()}>
              {new Date(row.at).toLocaleString()}</time> <code>{row.runId}</code> {trailLine(row)}</li>
          ))}
        </ol>
      )}
    </section>
  );
}

/** The thread id of a `#/threads/<id>` route; a malformed escape is kept as typed (a
 *  thrown URIError would unmount the whole page). */
function safeDecode(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

function App() {
  const [key, setKey] = useState(apiKey());
  const [listing, setListing] = useState<OpenInterrupt[] | null>(null);
  const [problem, setProblem] = useState<Problem | undefined>();
  const route = useRoute();

  // One listing walk at a time: a change during a walk asks for one more after it (walks
  // that overlapped landed in any order, an older one putting an answered interrupt back,
  // and a busy feed had a tab walking 12 at once); a walk of a key no longer in use is
  // aborted and never shown.
  useEffect(() => {
    const abort = new AbortController();
    let pending: ReturnType<typeof setTimeout> | undefined;
    let walking = false;
    let again = false;
    const refresh = async () => {
      if (walking) {
        again = true;
        return;
      }
      walking = true;
      do {
        again = false;
        try {
          const page = await listInterrupts(abort.signal);
          if (abort.signal.aborted) return;
          setServerNow(page.now);
          setListing(page.interrupts);
          setProblem(undefined);
        } catch (error) {
          if (abort.signal.aborted) return;
          setProblem(error instanceof ApiError ? error.problem
            : { status: 0, code: "network", detail: String(error) });
        }
      } while (again);
      walking = false;
    };
    const soon = () => { clearTimeout(pending); pending = setTimeout(() => void refresh(), 50); };
    void refresh();  // at once, and again once subscribed (nothing between is lost)
    const stop = followChanges(soon, soon, (error) => {
      if (error instanceof ApiError) setProblem(error.problem);
    });
    return () => { abort.abort(); stop(); clearTimeout(pending); };
  }, [key]);

  const threadMatch = /^#\/threads\/(.+)$/.exec(route);
  const needsKey = problem?.status === 401;
  return (
    <>
      <header className="top">
        <h1><a href="#">Interrupt inbox</a></h1>
        <KeyForm onKey={(value) => { setApiKey(value); setKey(value); histories.clear(); }}
                 problem={needsKey ? problem : undefined} />
      </header>
      <main>
        {problem && !needsKey && <p role="alert" className="problem">{problem.detail}</p>}
        {threadMatch ? <ThreadPage threadId={safeDecode(threadMatch[1])} />
          : listing === null ? (!problem && <p>Loading…</p>)
          : <Inbox key={key} interrupts={listing} />}
      </main>
    </>
  );
}

createRoot(document.getElementById("root")!).render(<StrictMode><App /></StrictMode>);

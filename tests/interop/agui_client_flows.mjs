// The reference AG-UI client (@ag-ui/client 1.0.0, pinned in package.json)
// driven against a running agui-relay. Usage: node agui_client_flows.mjs BASE_URL
//
// Flows, each with the client's own verification on (any violation rejects runAgent):
//  approval    run the `approval` agent to its interrupt, answer it with
//              buildResumeArray, finish the resumed run with success;
//  expired     a `scripted` interrupt whose expiresAt is past: answering it is refused
//              by the client, cancelling it gets through and the thread moves on;
//  uncovered   two open interrupts, a resume covering one: the client refuses to send it
//              (and buildResumeArray refuses to build it).
// Prints one JSON document: per-flow results, every event the client processed, and every
// console.warn/console.error the client made. Exits 1 on the first failed expectation.
import { HttpAgent, buildResumeArray } from "@ag-ui/client";
import { randomUUID } from "node:crypto";

const base = process.argv[2];
const warnings = [];
const errors = [];
const origWarn = console.warn;
const origError = console.error;
console.warn = (...args) => { warnings.push(args.map(String).join(" ")); };
console.error = (...args) => { errors.push(args.map(String).join(" ")); };

const report = { flows: {}, events: [], warnings, errors };
const requests = [];

function expect(condition, message) {
  if (!condition) throw new Error(`expectation failed: ${message}`);
}

function agentFor(name, threadId) {
  return new HttpAgent({
    url: `${base}/agents/${name}`,
    threadId,
    initialMessages: [{ id: `u-${randomUUID()}`, role: "user", content: "Please tidy up." }],
    fetch: async (url, init) => {
      const response = await fetch(url, init);
      requests.push({ url, status: response.status, body: JSON.parse(init.body) });
      return response;
    },
  });
}

function recorder(flow) {
  const seen = { outcomes: [], runErrors: [] };
  return {
    seen,
    subscriber: {
      onEvent: ({ event }) => { report.events.push({ flow, event }); },
      onRunFinishedEvent: (params) => { seen.outcomes.push(params.outcome); },
      onRunErrorEvent: ({ event }) => { seen.runErrors.push(event); },
    },
  };
}

async function refused(promise) {
  try {
    await promise;
  } catch (error) {
    return String(error && error.message ? error.message : error);
  }
  return null;
}

async function approvalFlow() {
  const agent = agentFor("approval", `io-approval-${randomUUID()}`);
  const { seen, subscriber } = recorder("approval");
  await agent.runAgent({}, subscriber);
  expect(agent.pendingInterrupts.length === 1, "one pending interrupt after the first run");
  const [interrupt] = agent.pendingInterrupts;
  expect(interrupt.reason === "tool_approval", "reason tool_approval");
  expect(typeof interrupt.toolCallId === "string", "the interrupt names its tool call");
  const resume = buildResumeArray(agent.pendingInterrupts, {
    [interrupt.id]: { status: "resolved", payload: { approved: true } },
  });
  await agent.runAgent({ resume }, subscriber);
  expect(agent.pendingInterrupts.length === 0, "no pending interrupt after the resumed run");
  expect(seen.runErrors.length === 0, "no RUN_ERROR");
  expect(JSON.stringify(seen.outcomes) === JSON.stringify(["interrupt", "success"]),
    `outcomes interrupt then success, got ${JSON.stringify(seen.outcomes)}`);
  return { interrupt, resume, outcomes: seen.outcomes, messages: agent.messages.length };
}

async function expiredFlow() {
  const agent = agentFor("scripted", `io-expired-${randomUUID()}`);
  const { seen, subscriber } = recorder("expired");
  const script = { interrupts: [{ id: "exp-1", reason: "confirm", expiresAt: "2001-01-01T00:00:00Z" }] };
  await agent.runAgent({ forwardedProps: { script } }, subscriber);
  expect(agent.pendingInterrupts.length === 1, "the expired interrupt is pending");
  const answered = await refused(agent.runAgent({
    resume: buildResumeArray(agent.pendingInterrupts, { "exp-1": { status: "resolved", payload: { ok: true } } }),
  }, subscriber));
  expect(answered !== null && answered.includes("expired"), `answering is refused: ${answered}`);
  const before = requests.length;
  const resume = buildResumeArray(agent.pendingInterrupts, { "exp-1": { status: "cancelled" } });
  const result = await agent.runAgent({ resume }, subscriber);
  expect(requests.length === before + 1, "the cancelling resume was sent");
  expect(requests[requests.length - 1].status === 200, "and admitted");
  expect(agent.pendingInterrupts.length === 0, "nothing pending after cancelling");
  expect(seen.outcomes.at(-1) === "success", "the cancelling run succeeds");
  const said = result.newMessages.map((m) => m.content).join("\n");
  expect(said.includes("exp-1=cancelled"), `the agent saw the cancel: ${said}`);
  return { refusedAnswer: answered, outcomes: seen.outcomes };
}

async function uncoveredFlow() {
  const agent = agentFor("scripted", `io-uncovered-${randomUUID()}`);
  const { subscriber } = recorder("uncovered");
  const script = { interrupts: [{ id: "a", reason: "first" }, { id: "b", reason: "second" }] };
  await agent.runAgent({ forwardedProps: { script } }, subscriber);
  expect(agent.pendingInterrupts.length === 2, "two pending interrupts");
  const built = await refused((async () =>
    buildResumeArray(agent.pendingInterrupts, { a: { status: "resolved", payload: 1 } }))());
  expect(built !== null && built.includes("missing responses"), `buildResumeArray refuses: ${built}`);
  const before = requests.length;
  const sent = await refused(agent.runAgent({
    resume: [{ interruptId: "a", status: "resolved", payload: 1 }],
  }, subscriber));
  expect(sent !== null && sent.includes("not addressed by resume"), `runAgent refuses: ${sent}`);
  expect(requests.length === before, "nothing was sent");
  return { threadId: agent.threadId, refusedBuild: built, refusedRun: sent,
           pending: agent.pendingInterrupts.map((i) => i.id) };
}

let code = 0;
for (const [name, flow] of [["approval", approvalFlow], ["expired", expiredFlow], ["uncovered", uncoveredFlow]]) {
  try {
    report.flows[name] = { ok: true, ...(await flow()) };
  } catch (error) {
    report.flows[name] = { ok: false, error: String(error && error.stack ? error.stack : error) };
    code = 1;
  }
}
report.requests = requests.map(({ url, status }) => ({ url, status }));
console.warn = origWarn;
console.error = origError;
process.stdout.write(JSON.stringify(report) + "\n");
process.exit(code);

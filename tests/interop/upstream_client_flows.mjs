// The reference AG-UI client (@ag-ui/client, pinned in package.json) driving an upstream
// LangGraph agent through agui-relay. Usage: node upstream_client_flows.mjs BASE_URL [AGENT=refunds]
//
// One flow, with the client's own verification on (any violation rejects runAgent):
// run the agent to its two interrupts; send a resume answering only one of them raw over
// HTTP (the client would refuse to build it) and expect the relay's 422
// uncovered_interrupts; answer both with buildResumeArray and finish with success, the
// graph saying what it was told.
// Prints one JSON document: the flow's result, every event the client processed, and every
// console.warn/console.error the client made. Exits 1 on the first failed expectation.
import { HttpAgent, buildResumeArray } from "@ag-ui/client";
import { randomUUID } from "node:crypto";

const [base, agentName = "refunds"] = process.argv.slice(2);
const warnings = [];
const errors = [];
console.warn = (...args) => { warnings.push(args.map(String).join(" ")); };
console.error = (...args) => { errors.push(args.map(String).join(" ")); };
const report = { events: [], warnings, errors, requests: [] };

function expect(condition, message) {
  if (!condition) throw new Error(`expectation failed: ${message}`);
}

async function flow() {
  const threadId = `io-upstream-${randomUUID()}`;
  const agent = new HttpAgent({
    url: `${base}/agents/${agentName}`,
    threadId,
    initialMessages: [{ id: `u-${randomUUID()}`, role: "user", content: "Refund order 42." }],
    fetch: async (url, init) => {
      const response = await fetch(url, init);
      report.requests.push({ url, status: response.status });
      return response;
    },
  });
  const outcomes = [];
  const subscriber = {
    onEvent: ({ event }) => { report.events.push(event); },
    onRunFinishedEvent: (params) => { outcomes.push(params.outcome); },
  };
  await agent.runAgent({}, subscriber);
  const pending = agent.pendingInterrupts;
  expect(pending.length === 2, `two pending interrupts, got ${pending.length}`);
  const [first, second] = pending;

  const partial = await fetch(`${base}/agents/${agentName}`, {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
    body: JSON.stringify({
      threadId, runId: `partial-${randomUUID()}`, state: {}, tools: [], context: [],
      forwardedProps: {}, messages: agent.messages,
      resume: [{ interruptId: first.id, status: "resolved", payload: "yes" }],
    }),
  });
  const problem = await partial.json();

  const resume = buildResumeArray(pending, {
    [first.id]: { status: "resolved", payload: "yes" },
    [second.id]: { status: "resolved", payload: "no" },
  });
  const result = await agent.runAgent({ resume }, subscriber);
  expect(agent.pendingInterrupts.length === 0, "nothing pending after the full resume");
  const said = agent.messages.map((m) => m.content).filter(Boolean).join("\n");
  return {
    threadId, outcomes, interrupts: pending, partialStatus: partial.status, problem,
    said, newMessages: result.newMessages.length,
  };
}

let code = 0;
try {
  report.flow = { ok: true, ...(await flow()) };
} catch (error) {
  report.flow = { ok: false, error: String(error && error.stack ? error.stack : error) };
  code = 1;
}
process.stdout.write(JSON.stringify(report) + "\n");
process.exit(code);

// One interrupt's answer form: generated from its responseSchema by react-jsonschema-form
// and validated in the browser with ajv (the gatekeeper checks no payload against it);
// with no schema, a free JSON field. And "Edit and approve": the gated tool call's
// arguments in a form generated from the schema's `arguments` property (free JSON when
// that property describes no fields), the answer checked against the whole schema. A
// schema `formSchema` refuses (schema.ts), or a form that fails to render, is answered as
// free JSON in its own card: the rest of the page goes on.

import Form from "@rjsf/core";
import { customizeValidator } from "@rjsf/validator-ajv8";
import type { RJSFSchema } from "@rjsf/utils";
import type React from "react";
import { Component, useEffect, useId, useRef, useState } from "react";
import safeRegex from "safe-regex2";
import type { Json, JsonObject, OpenInterrupt } from "./api";
import { argumentsForm } from "./resume";

/** ajv's engine for `pattern`, less the patterns that backtrack exponentially (nested
 *  quantifiers, as `^(a+)+$`): on a long answer that almost matches, one would freeze the
 *  tab, ajv running on the page's only thread. Such a pattern is not checked here; the
 *  agent checks what it receives (the gatekeeper checks no payload against its schema). */
const guardedRegExp = Object.assign(
  (pattern: string, flags: string) =>
    safeRegex(pattern) ? new RegExp(pattern, flags) : { test: () => true },
  { code: "guardedRegExp" },
);

const validator = customizeValidator({ ajvOptionsOverrides: { code: { regExp: guardedRegExp } } });

/** Its children, or `fallback` once rendering them failed: one card's broken form must
 *  not unmount the whole page (React unmounts everything on an uncaught render error). */
export class Contained extends Component<{ children: React.ReactNode; fallback: React.ReactNode },
                                         { failed: boolean }> {
  state = { failed: false };

  static getDerivedStateFromError(): { failed: boolean } {
    return { failed: true };
  }

  render() {
    return this.state.failed ? this.props.fallback : this.props.children;
  }
}

/** The free JSON answer, for a schema the page will not build a form from. */
export function Unformed({ why, onAnswer }: { why: string; onAnswer: (payload: Json) => void }) {
  return (
    <>
      <p className="note">This interrupt's response schema cannot be shown as a form ({why}):
        answer in JSON; the agent checks what it receives.</p>
      <FreeJson onAnswer={onAnswer} />
    </>
  );
}

function initial(schema: JsonObject, toolArguments: Json | undefined): Json | undefined {
  const props = schema.properties as JsonObject | undefined;
  if (props && "arguments" in props && toolArguments !== undefined && toolArguments !== null) {
    return { ...(props.approved ? { approved: true } : {}), arguments: toolArguments };
  }
  return undefined;
}

/** The answer form of `schema`, the interrupt's responseSchema as `formSchema` passed it. */
export function AnswerForm({ interrupt, schema, toolArguments, onAnswer }: {
  interrupt: OpenInterrupt; schema: JsonObject | undefined; toolArguments: Json | undefined;
  onAnswer: (payload: Json) => void;
}) {
  if (!schema) return <FreeJson onAnswer={onAnswer} />;
  return (
    <WhenVisible>
      <Contained fallback={<Unformed why="it failed to render" onAnswer={onAnswer} />}>
        <Form schema={schema as RJSFSchema} validator={validator}
              formData={initial(schema, toolArguments)} idPrefix={`f-${interrupt.id}`}
              noHtml5Validate showErrorList="top"
              uiSchema={{ "ui:submitButtonOptions": { submitText: "Use this answer" } }}
              onSubmit={({ formData }) => onAnswer((formData ?? null) as Json)} />
      </Contained>
    </WhenVisible>
  );
}

/** Its children once on (or near) the screen: a long inbox builds only the forms seen. */
function WhenVisible({ children }: { children: React.ReactNode }) {
  const [seen, setSeen] = useState(false);
  const ref = useRef<HTMLDivElement>(null);
  useEffect(() => {
    if (seen || !ref.current) return;
    const observer = new IntersectionObserver((entries) => {
      if (entries.some((e) => e.isIntersecting)) { setSeen(true); observer.disconnect(); }
    }, { rootMargin: "400px" });
    observer.observe(ref.current);
    return () => observer.disconnect();
  }, [seen]);
  return seen ? <>{children}</> : <div ref={ref} className="form-placeholder">Answer form…</div>;
}

/** Why an answer cannot be sent as typed: a top-level null (AG-UI: any JSON but null) or
 *  a number JSON cannot carry (1e999 parses to Infinity and would be sent as null). */
function unsendable(value: Json): string {
  if (value === null) return "An answer cannot be null: send a value, or cancel the interrupt.";
  const stack: Json[] = [value];
  while (stack.length) {
    const v = stack.pop()!;
    if (typeof v === "number" && !Number.isFinite(v)) return "A number is out of range.";
    if (v && typeof v === "object") for (const item of Array.isArray(v) ? v : Object.values(v)) stack.push(item);
  }
  return "";
}

function FreeJson({ onAnswer }: { onAnswer: (payload: Json) => void }) {
  const id = useId();
  const [text, setText] = useState("");
  const [error, setError] = useState("");
  return (
    <form onSubmit={(e) => {
      e.preventDefault();
      let value: Json;
      try {
        value = JSON.parse(text) as Json;
      } catch (err) {
        setError(`Not JSON: ${(err as Error).message}`);
        return;
      }
      const why = unsendable(value);
      if (why) {
        setError(why);
        return;
      }
      onAnswer(value);
      setError("");
    }}>
      <label htmlFor={id}>Answer (JSON)</label>
      <textarea id={id} rows={4} value={text} onChange={(e) => setText(e.target.value)}
                aria-invalid={error ? true : undefined} aria-describedby={error ? `${id}-err` : undefined} />
      {error && <p id={`${id}-err`} role="alert" className="problem">{error}</p>}
      <button type="submit">Use this answer</button>
    </form>
  );
}

/** Why `payload` does not satisfy `schema` (ajv, as the form validates); "" when it does. */
function problemsOf(schema: JsonObject, payload: Json): string {
  const { errors } = validator.validateFormData(payload, schema as RJSFSchema);
  return errors.map((e) => e.stack).join("; ");
}

/** "Edit and approve": the proposed arguments, editable, sent as `{approved: true, arguments}`
 *  (`schema` as `formSchema` passed it). */
export function EditAndApprove({ interrupt, schema, argumentsSchema, proposed, onAnswer }: {
  interrupt: OpenInterrupt; schema: JsonObject; argumentsSchema: JsonObject;
  proposed: Json | undefined; onAnswer: (payload: Json) => void;
}) {
  const [editing, setEditing] = useState(false);
  const [problem, setProblem] = useState("");
  const id = useId();
  const props = argumentsSchema.properties;
  const hasFields = !!props && typeof props === "object" && Object.keys(props).length > 0;
  const accept = (edited: Json) => {
    const payload: JsonObject = { approved: true, arguments: edited };
    const why = problemsOf(schema, payload);
    setProblem(why);
    if (!why) { onAnswer(payload); setEditing(false); }
  };
  return (
    <div className="edit">
      <button type="button" aria-expanded={editing} aria-controls={`${id}-panel`}
              onClick={() => setEditing(!editing)}>Edit and approve</button>
      {editing && (
        <div id={`${id}-panel`} role="group" aria-label="Edit the tool call's arguments" className="edit-panel">
          {proposed === undefined ? <p>Loading the tool call's arguments…</p> : hasFields ? (
            <Contained fallback={<FreeArguments proposed={proposed} onEdited={accept} onProblem={setProblem} />}>
              <Form schema={argumentsForm(schema, argumentsSchema) as RJSFSchema} validator={validator}
                    formData={proposed ?? undefined} idPrefix={`e-${interrupt.id}`}
                    noHtml5Validate showErrorList="top"
                    uiSchema={{ "ui:submitButtonOptions": { submitText: "Approve with these arguments" } }}
                    onSubmit={({ formData }) => accept((formData ?? {}) as Json)} />
            </Contained>
          ) : (
            <FreeArguments proposed={proposed} onEdited={accept} onProblem={setProblem} />
          )}
          {problem && <p role="alert" className="problem">{problem}</p>}
        </div>
      )}
    </div>
  );
}

function FreeArguments({ proposed, onEdited, onProblem }: {
  proposed: Json; onEdited: (edited: Json) => void; onProblem: (why: string) => void;
}) {
  const id = useId();
  const [text, setText] = useState(() => JSON.stringify(proposed ?? {}, null, 2));
  return (
    <form onSubmit={(e) => {
      e.preventDefault();
      let edited: Json;
      try {
        edited = JSON.parse(text) as Json;
      } catch (err) {
        onProblem(`Not JSON: ${(err as Error).message}`);
        return;
      }
      onEdited(edited);
    }}>
      <label htmlFor={id}>Tool call arguments (JSON)</label>
      <textarea id={id} rows={6} value={text} onChange={(e) => setText(e.target.value)} spellCheck={false} />
      <button type="submit">Approve with these arguments</button>
    </form>
  );
}

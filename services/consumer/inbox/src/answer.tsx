// One interrupt's answer form: generated from its responseSchema by react-jsonschema-form
// and validated in the browser with ajv (the same JSON Schema the gatekeeper checks);
// with no schema, a free JSON field.

import Form from "@rjsf/core";
import validator from "@rjsf/validator-ajv8";
import type { RJSFSchema } from "@rjsf/utils";
import type React from "react";
import { useEffect, useId, useRef, useState } from "react";
import type { Json, JsonObject, OpenInterrupt } from "./api";

function initial(schema: JsonObject, toolArguments: Json | undefined): Json | undefined {
  const props = schema.properties as JsonObject | undefined;
  if (props && "arguments" in props && toolArguments !== undefined && toolArguments !== null) {
    return { ...(props.approved ? { approved: true } : {}), arguments: toolArguments };
  }
  return undefined;
}

export function AnswerForm({ interrupt, toolArguments, onAnswer }: {
  interrupt: OpenInterrupt; toolArguments: Json | undefined; onAnswer: (payload: Json) => void;
}) {
  const schema = interrupt.responseSchema;
  if (!schema) return <FreeJson onAnswer={onAnswer} />;
  return (
    <WhenVisible>
    <Form schema={schema as RJSFSchema} validator={validator}
          formData={initial(schema, toolArguments)} idPrefix={`f-${interrupt.id}`}
          noHtml5Validate showErrorList="top"
          uiSchema={{ "ui:submitButtonOptions": { submitText: "Use this answer" } }}
          onSubmit={({ formData }) => onAnswer((formData ?? null) as Json)} />
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

function FreeJson({ onAnswer }: { onAnswer: (payload: Json) => void }) {
  const id = useId();
  const [text, setText] = useState("");
  const [error, setError] = useState("");
  return (
    <form onSubmit={(e) => {
      e.preventDefault();
      try {
        onAnswer(JSON.parse(text) as Json);
        setError("");
      } catch (err) {
        setError(`Not JSON: ${(err as Error).message}`);
      }
    }}>
      <label htmlFor={id}>Answer (JSON)</label>
      <textarea id={id} rows={4} value={text} onChange={(e) => setText(e.target.value)}
                aria-invalid={error ? true : undefined} aria-describedby={error ? `${id}-err` : undefined} />
      {error && <p id={`${id}-err`} role="alert" className="problem">{error}</p>}
      <button type="submit">Use this answer</button>
    </form>
  );
}

/**
 * The request's OpenTelemetry span, as far as the service writes to it. Deno's built-in
 * instrumentation (`OTEL_DENO=true`) makes the span of every `Deno.serve` request and `fetch`;
 * without it every call here does nothing.
 *
 * @see https://docs.deno.com/runtime/fundamentals/open_telemetry/
 */

import { trace } from "@opentelemetry/api";

/** Attribute values a span takes. */
export type SpanValue = string | number | boolean;

/** Sets `attributes` (undefined ones skipped) on the span of the request being handled. */
export function setSpanAttributes(attributes: Record<string, SpanValue | undefined>): void {
  const span = trace.getActiveSpan();
  if (!span?.isRecording()) return;
  for (const [name, value] of Object.entries(attributes)) {
    if (value !== undefined) span.setAttribute(name, value);
  }
}

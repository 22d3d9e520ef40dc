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

/**
 * Sets the attributes `build` gives (undefined ones skipped) on the span of the request being
 * handled; `build` runs only when a span records them, so a service without OpenTelemetry builds
 * nothing on the gateway's path.
 */
export function setSpanAttributes(build: () => Record<string, SpanValue | undefined>): void {
  const span = trace.getActiveSpan();
  if (!span?.isRecording()) return;
  for (const [name, value] of Object.entries(build())) {
    if (value !== undefined) span.setAttribute(name, value);
  }
}

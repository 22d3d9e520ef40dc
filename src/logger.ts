/**
 * Structured JSON logs, one object a line. Secrets never reach a line: tokens are passed
 * through `redact()` first.
 */

/** Fields of a log line. */
export type LogFields = Record<string, string | number | boolean | undefined>;

/** Where log lines go. */
export interface Logger {
  /** A normal event: a request served, the service listening. */
  info(message: string, fields?: LogFields): void;
  /** Something an operator should look at, that did not fail a request. */
  warn(message: string, fields?: LogFields): void;
  /** A failure. */
  error(message: string, fields?: LogFields): void;
}

/** Builds a logger writing JSON lines to `write` (stdout by default). */
export function createLogger(
  write: (line: string) => void = defaultWrite,
  now: () => number = Date.now,
): Logger {
  const log = (level: string) => (message: string, fields: LogFields = {}) =>
    write(JSON.stringify({ time: new Date(now()).toISOString(), level, message, ...fields }));
  return { info: log("info"), warn: log("warn"), error: log("error") };
}

/** A logger that drops everything (tests that do not look at logs). */
export const silentLogger: Logger = { info() {}, warn() {}, error() {} };

/** A token shortened to a prefix that identifies it in logs without making it usable. */
export function redact(token: string | undefined): string {
  if (!token) return "";
  return token.length <= 8 ? "…" : `${token.slice(0, 6)}…`;
}

const encoder = new TextEncoder();

/**
 * Straight to stdout, not through `console`: `deno serve --parallel` prefixes every console
 * line with its worker's name, and a log line must stay one JSON object. A runtime without a
 * writable stdout (a hosted isolate) gets `console`.
 */
function defaultWrite(line: string): void {
  if (typeof Deno.stdout?.writeSync !== "function") {
    // deno-lint-ignore no-console -- the logger is the one place that prints.
    console.log(line);
    return;
  }
  const bytes = encoder.encode(`${line}\n`);
  for (let written = 0; written < bytes.length;) {
    written += Deno.stdout.writeSync(bytes.subarray(written));
  }
}

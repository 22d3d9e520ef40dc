/**
 * Structured JSON logs, one object a line. Secrets never reach a line: tokens are passed
 * through `redact()` first.
 */

/** Fields of a log line. */
export type LogFields = Record<string, string | number | boolean | undefined>;

/** Where log lines go. */
export interface Logger {
  info(message: string, fields?: LogFields): void;
  warn(message: string, fields?: LogFields): void;
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

function defaultWrite(line: string): void {
  // deno-lint-ignore no-console -- the logger is the one place that prints.
  console.log(line);
}

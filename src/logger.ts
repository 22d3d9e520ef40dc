import { setImmediate } from "node:timers";

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

/**
 * Where a logger's lines go. An `urgent` line (a warning or an error) must be written before the
 * call returns: the process may be about to exit.
 */
export type LineWriter = (line: string, urgent: boolean) => void;

/** Builds a logger writing JSON lines to `write` (stdout by default). */
export function createLogger(
  write: LineWriter = stdoutLines(),
  now: () => number = Date.now,
): Logger {
  const time = isoTimeOf(now);
  const log = (level: string) => {
    const levelField = `,"level":${JSON.stringify(level)},"message":`;
    return (message: string, fields?: LogFields) =>
      write(
        `{"time":"${time()}"${levelField}${printable(JSON.stringify(message) + rest(fields))}}`,
        level !== "info",
      );
  };
  return { info: log("info"), warn: log("warn"), error: log("error") };
}

/**
 * A line's own fields after `time`, `level` and `message`, as `JSON.stringify` writes them (a
 * field named like one of those is written again, and a reader takes the last): the line is one
 * string built once, not an object copied and then written (the gateway writes two a call).
 */
function rest(fields: LogFields | undefined): string {
  if (fields === undefined) return "";
  const json = JSON.stringify(fields);
  return json.length === 2 ? "" : `,${json.slice(1, -1)}`;
}

/**
 * What JSON.stringify leaves raw and a terminal may act on: C1 controls (U+009B is CSI), DEL,
 * format characters (U+202E reverses the text after it, U+200B hides) and the line and paragraph
 * separators. C0 controls are escaped by JSON.stringify already.
 */
const UNPRINTABLE = /[\p{Cc}\p{Cf}\u2028\u2029]/gu;
/** Every UNPRINTABLE character is past U+007E: a line without one (most) is one cheap scan. */
const BEYOND_ASCII = /[\u007f-\uffff]/;

/**
 * `json` with every UNPRINTABLE character as its `\uXXXX` escape (a character past U+FFFF as its
 * two escaped UTF-16 units): the same value to a JSON reader, inert on a screen. Tool names,
 * client names and headers are whatever a client sent; most lines have none, and cost one scan.
 */
function printable(json: string): string {
  if (!BEYOND_ASCII.test(json)) return json;
  return json.replace(UNPRINTABLE, (c) => {
    let escaped = "";
    for (let i = 0; i < c.length; i++) {
      escaped += `\\u${c.charCodeAt(i).toString(16).padStart(4, "0")}`;
    }
    return escaped;
  });
}

/**
 * `now()` as `Date.prototype.toISOString` writes it: the date and time up to the second
 * formatted once per second, the milliseconds appended (a busy gateway writes two lines a call,
 * and formatting a date costs more than building the rest of the line).
 */
function isoTimeOf(now: () => number): () => string {
  let second = NaN;
  let prefix = "";
  return () => {
    // As a Date keeps it: whole milliseconds, truncated.
    const ms = Math.trunc(now());
    const thisSecond = Math.floor(ms / 1000);
    if (thisSecond !== second) {
      second = thisSecond;
      // `….000Z` without its milliseconds (a year past 9999 makes the text longer, not different).
      prefix = new Date(thisSecond * 1000).toISOString().slice(0, -4);
    }
    const millis = ms - thisSecond * 1000;
    return `${prefix}${millis < 10 ? "00" : millis < 100 ? "0" : ""}${millis}Z`;
  };
}

/** A logger that drops everything (tests that do not look at logs). */
export const silentLogger: Logger = { info() {}, warn() {}, error() {} };

/** A token shortened to a prefix that identifies it in logs without making it usable. */
export function redact(token: string | undefined): string {
  if (!token) return "";
  return token.length <= 8 ? "…" : `${token.slice(0, 6)}…`;
}

/**
 * Straight to stdout, not through `console`: `deno serve --parallel` prefixes every console
 * line with its worker's name, and a log line must stay one JSON object. A runtime without a
 * writable stdout (a hosted isolate) gets `console`.
 *
 * Request lines are gathered and written together on the next turn of the event loop
 * (`setImmediate`: no timer, no millisecond's wait): a busy gateway logs a line per request, and
 * a write per line cost it about a tenth of its CPU.
 * Warnings and errors are written at once, with the lines gathered before them, so a line that
 * precedes an exit is never lost; a `kill -9` may lose the request lines of the last turn. At most
 * PENDING_LIMIT characters wait: one request may write many lines (an audit line per message of
 * a batch), and they must not all be held at once.
 */
function stdoutLines(): LineWriter {
  if (typeof Deno.stdout?.writeSync !== "function") {
    // deno-lint-ignore no-console -- the logger is the one place that prints.
    return (line) => console.log(line);
  }
  const encoder = new TextEncoder();
  let pending = "";
  const flush = () => {
    if (pending === "") return;
    const bytes = encoder.encode(pending);
    pending = "";
    for (let written = 0; written < bytes.length;) {
      written += Deno.stdout.writeSync(bytes.subarray(written));
    }
  };
  return (line, urgent) => {
    if (pending === "" && !urgent) setImmediate(flush);
    pending += `${line}\n`;
    if (urgent || pending.length > PENDING_LIMIT) flush();
  };
}

/** Characters of gathered lines that make the logger write them before the turn ends. */
const PENDING_LIMIT = 1024 * 1024;

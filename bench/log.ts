/** The bench's progress lines, on stderr so that stdout carries only the report. */

/** Prints one progress line, prefixed with the UTC time of day. */
export function say(line: string): void {
  // deno-lint-ignore no-console -- progress of a command-line tool
  console.error(`[${new Date().toISOString().slice(11, 19)}] ${line}`);
}

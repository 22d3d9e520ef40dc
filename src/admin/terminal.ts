/**
 * What reaches the operator's terminal: client names, redirect URIs and client ids are whatever
 * anyone registered or sent to `/authorize`, so every control or format character is shown as a
 * `\uXXXX` escape instead of acting on the screen.
 */

/**
 * C0 and C1 controls and DEL (clear the screen, forge rows), format characters such as U+202E
 * (right-to-left override: `moc.live` shown as `evil.com`), U+200B (zero width space) and the
 * bidi isolates, and the line and paragraph separators.
 */
const UNPRINTABLE = /[\p{Cc}\p{Cf}\u2028\u2029]/gu;

/** `\u001b` for ESC, `\u202e` for RLO; astral characters as their two escaped UTF-16 units. */
export function escapeUnprintable(text: string): string {
  return text.replace(UNPRINTABLE, (c) =>
    Array.from(
      { length: c.length },
      (_, i) => `\\u${c.charCodeAt(i).toString(16).padStart(4, "0")}`,
    ).join(""));
}

/**
 * One `--json` line: JSON.stringify leaves C1 and format characters raw; their escapes are the
 * same characters in JSON, so a JSON reader gets the value unchanged.
 */
export function jsonLine(value: unknown): string {
  return escapeUnprintable(JSON.stringify(value));
}

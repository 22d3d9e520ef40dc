/** Plain-text tables for the operator's terminal. */

/**
 * C0 and C1 control characters and DEL: in a cell they could clear the operator's screen, forge
 * rows or hide text. Client names, redirect URIs and client ids are whatever anyone registered
 * or sent to `/authorize`.
 */
// deno-lint-ignore no-control-regex -- the controls are what is matched.
const CONTROL = /[\x00-\x1f\x7f-\x9f]/g;

/** The header and rows as lines, each column padded to its widest cell, controls escaped. */
export function formatTable(header: string[], rows: string[][]): string[] {
  const printable = rows.map((row) => row.map(escapeControls));
  const widths = header.map((title, column) =>
    Math.max(title.length, ...printable.map((row) => row[column]?.length ?? 0))
  );
  const line = (cells: string[]) =>
    cells.map((cell, column) => cell.padEnd(widths[column])).join("  ").trimEnd();
  return [line(header), ...printable.map(line)];
}

/** `\u001b` for ESC, and so on: visible, and the same spelling as the `--json` output's. */
function escapeControls(cell: string): string {
  return cell.replace(CONTROL, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

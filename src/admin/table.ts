/** Plain-text tables for the operator's terminal. */

import { escapeUnprintable } from "./terminal.ts";

/** The header and rows as lines, each column padded to its widest cell, controls escaped. */
export function formatTable(header: string[], rows: string[][]): string[] {
  const printable = rows.map((row) => row.map(escapeUnprintable));
  const widths = header.map((title, column) =>
    Math.max(title.length, ...printable.map((row) => row[column]?.length ?? 0))
  );
  const line = (cells: string[]) =>
    cells.map((cell, column) => cell.padEnd(widths[column])).join("  ").trimEnd();
  return [line(header), ...printable.map(line)];
}

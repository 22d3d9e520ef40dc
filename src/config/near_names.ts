/**
 * Environment variables the service does not read but whose names say they were meant for it: a
 * mistyped name (`ALLOWED_GITLAB_GROUP`) or a `_FILE` form of a variable that has none would
 * otherwise be ignored without a word, and the setting meant (an allow-list, say) be absent.
 */

import type { Env } from "./variable.ts";

/** One warning per variable of `env` that is not among `known` but nearly one of them. */
export function nearNameWarnings(env: Env, known: readonly string[]): string[] {
  const names = new Set(known);
  return Object.keys(env).filter((name) => !names.has(name) && env[name]?.trim())
    .flatMap((name) => {
      const meant = fileFormOf(name, names) ?? nearestName(name, known);
      return meant === undefined ? [] : [meant];
    });
}

/** `NAME_FILE` where `NAME` is read but has no file form (only secrets have). */
function fileFormOf(name: string, known: ReadonlySet<string>): string | undefined {
  const variable = name.replace(/_FILE$/, "");
  if (variable === name || !known.has(variable)) return undefined;
  return `${name} is ignored: only secrets may come from a file; set ${variable} itself`;
}

function nearestName(name: string, known: readonly string[]): string | undefined {
  const upper = name.toUpperCase();
  const meant = known.find((candidate) =>
    candidate === upper || editDistance(upper, candidate) <= allowedEdits(candidate)
  );
  return meant === undefined ? undefined : `${name} is ignored: did you mean ${meant}?`;
}

/**
 * Edits a typo may be away from `name`: none for short names (HOST and HOME are two apart),
 * one from six letters, two from ten.
 */
function allowedEdits(name: string): number {
  if (name.length >= 10) return 2;
  return name.length >= 6 ? 1 : 0;
}

/** Levenshtein distance, a swap of two neighbours counting one edit. */
function editDistance(a: string, b: string): number {
  const rows = Array.from({ length: a.length + 1 }, (_, i) => [i, ...new Array(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) rows[0][j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      rows[i][j] = Math.min(rows[i - 1][j] + 1, rows[i][j - 1] + 1, rows[i - 1][j - 1] + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
        rows[i][j] = Math.min(rows[i][j], rows[i - 2][j - 2] + 1);
      }
    }
  }
  return rows[a.length][b.length];
}

/**
 * The configuration files an operator writes (MCP_SERVERS_FILE, MACHINE_ACCESS_FILE): YAML or
 * JSON by the file's extension, read once and checked with one-line errors that name the file,
 * the place in it and what is wrong there.
 */

import { LineCounter, parseDocument } from "yaml";
import { unreadableReason } from "./unreadable.ts";

/** Throws the reader's error: where in the file, and what is wrong there. */
export type Fail = (where: string, message: string) => never;

/** The Fail of the file at `path`, throwing what `problem` makes of its one line. */
export function failingIn(path: string, problem: (message: string) => Error): Fail {
  return (where, message) => {
    throw problem(`${path}: ${where}${where ? ": " : ""}${message}`);
  };
}

/**
 * The file at `path` read and parsed, whose top is an object with only the `keys` (`what` says
 * what it must hold, for the error); fails otherwise.
 */
export function readTopObject(
  path: string,
  readText: (path: string) => string,
  fail: Fail,
  keys: string[],
  what: string,
): Record<string, unknown> {
  let text: string;
  try {
    text = readText(path);
  } catch (error) {
    return fail("", `cannot read the file (${unreadableReason(error)})`);
  }
  const root = parseText(path, text, fail);
  if (!isObject(root)) return fail("", `must be an object with ${what}`);
  onlyKeys(root, keys, "", fail);
  return root;
}

/**
 * A configuration file's data: YAML or JSON by the file's extension, with the line of a syntax
 * error; a repeated key is an error.
 */
export function parseText(path: string, text: string, fail: Fail): unknown {
  const extension = path.toLowerCase().match(/\.(ya?ml|json)$/)?.[1];
  if (extension === undefined) return fail("", "must end in .yaml, .yml or .json");
  if (extension === "json") {
    try {
      return JSON.parse(text);
    } catch (error) {
      return fail("", `not JSON (${error instanceof Error ? error.message : error})`);
    }
  }
  const lineCounter = new LineCounter();
  const document = parseDocument(text, { lineCounter, uniqueKeys: true, prettyErrors: true });
  const [error] = document.errors;
  if (error) {
    const at = error.linePos?.[0];
    const where = at ? `line ${at.line}, column ${at.col}` : "";
    return fail(where, `not YAML (${error.message.split("\n")[0]})`);
  }
  try {
    return document.toJS();
  } catch (error) {
    // yaml refuses to expand aliases that would multiply without end (a ReferenceError): the
    // file's fault, to be reported as such, not an error that ends the process at a reload.
    return fail("", `not usable YAML (${error instanceof Error ? error.message : error})`);
  }
}

/** Fails naming the first key of `value` that is not `known`. */
export function onlyKeys(
  value: Record<string, unknown>,
  known: string[],
  where: string,
  fail: Fail,
) {
  const unknown = Object.keys(value).find((key) => !known.includes(key));
  if (unknown !== undefined) {
    fail(where, `unknown key ${JSON.stringify(unknown)} (known: ${known.join(", ")})`);
  }
}

export function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * Duplicate member names in a JSON text. `JSON.parse` keeps the last of two members with one
 * name, while other parsers keep the first or refuse: a body with `"name":"read_file"` and then
 * `"name":"delete_project"` would be decided by the gateway as one call and run by a first-wins
 * MCP server as the other. Names are compared decoded (`"na\u006de"` is `"name"`).
 *
 * @see RFC 8259 §4 ("The names within an object SHOULD be unique"), RFC 7493 §2.3 (I-JSON)
 */

/**
 * The first member name that appears twice in one object of `text`, at any depth; undefined
 * when there is none. `text` must be JSON (the caller has parsed it already).
 */
export function firstDuplicateName(text: string): string | undefined {
  /** Per open container: the names seen so far in an object, null for an array. */
  const open: (Set<string> | null)[] = [];
  /** Whether the next string in the innermost object is a member name. */
  let expectingName = false;
  for (let i = 0; i < text.length; i++) {
    const char = text.charCodeAt(i);
    if (char === QUOTE) {
      const end = closingQuote(text, i);
      const names = open.at(-1);
      if (expectingName && names) {
        const name = decodedString(text.slice(i, end + 1));
        if (names.has(name)) return name;
        names.add(name);
        expectingName = false;
      }
      i = end;
    } else if (char === OPEN_BRACE) {
      open.push(new Set());
      expectingName = true;
    } else if (char === OPEN_BRACKET) {
      open.push(null);
      expectingName = false;
    } else if (char === CLOSE_BRACE || char === CLOSE_BRACKET) {
      open.pop();
      expectingName = false;
    } else if (char === COMMA) {
      expectingName = open.length > 0 && open[open.length - 1] !== null;
    }
  }
  return undefined;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COMMA = 0x2c;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;

/** The index of the quote that closes the string opening at `start`. */
function closingQuote(text: string, start: number): number {
  for (let i = start + 1; i < text.length; i++) {
    const char = text.charCodeAt(i);
    if (char === BACKSLASH) i++;
    else if (char === QUOTE) return i;
  }
  return text.length - 1;
}

/** A JSON string literal's value; its escapes are decoded as JSON.parse decodes them. */
function decodedString(literal: string): string {
  return literal.includes("\\") ? JSON.parse(literal) : literal.slice(1, -1);
}

/**
 * The template engine of the service's pages (mustache-like; blanks inside the braces are
 * allowed, as `deno fmt` adds them): `{{name}}` is HTML-escaped, `{{{name}}}` is inserted raw
 * (only values built as script-safe JSON by `jsonForScript` may be), `{{#name}}…{{/name}}` is
 * kept when the value is non-empty and `{{^name}}…{{/name}}` when it is empty. A template is
 * checked at load against the placeholders it must use: a broken one throws then, not when a
 * page is rendered.
 */

/**
 * A template's placeholders: HTML-escaped ones and raw ones, each of which it must use, and
 * optional escaped ones, which it may use.
 */
export interface Placeholders {
  escaped: readonly string[];
  raw: readonly string[];
  optional?: readonly string[];
}

/** The value of every placeholder and section of a template. */
export type Slots = Record<string, string>;

/** Renders a checked template with its slots. */
export type Render = (slots: Slots) => string;

const SECTION = /\{\{\s*([#^])\s*(\w+)\s*\}\}([\s\S]*?)\{\{\s*\/\s*\2\s*\}\}/g;
const PLACEHOLDER = /\{\{\{\s*(\w+)\s*\}\}\}|\{\{\s*(\w+)\s*\}\}/g;
const NONCE_ATTRIBUTE = /\snonce="\{\{\s*nonce\s*\}\}"/;
const FLOW_DATA_SCRIPT =
  /<script type="application\/json" id="flow-data"[^>]*>\{\{\{\s*flowDataJson\s*\}\}\}<\/script>/;
const COMMENT = /<!--[\s\S]*?-->/g;

/** The template without its HTML comments (they document the template, not the page). */
export function withoutComments(template: string): string {
  return template.replace(COMMENT, "");
}

/** Escapes `& < > " '` so a string is inert in HTML text and quoted attribute values. */
export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => HTML_ESCAPES[c]);
}

const HTML_ESCAPES: Record<string, string> = {
  "&": "&amp;",
  "<": "&lt;",
  ">": "&gt;",
  '"': "&quot;",
  "'": "&#39;",
};

/** JSON that is safe inside a `<script>` element: `< > &` U+2028 U+2029 become `\uXXXX`. */
export function jsonForScript(value: unknown): string {
  const json = JSON.stringify(value);
  if (json === undefined) throw new TypeError("value cannot be represented as JSON");
  return json.replace(
    /[<>&\u2028\u2029]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
}

/** A fresh CSP nonce for one rendering. */
export function newNonce(): string {
  return crypto.getRandomValues(new Uint8Array(18)).toBase64();
}

/**
 * Checks a template against the placeholders it must use and returns its render function:
 * a template missing one, or using an unknown one, or with a script or style element without
 * the nonce, is a programming error reported at load.
 */
export function compile(template: string, name: string, placeholders: Placeholders): Render {
  const required = [...placeholders.escaped, ...placeholders.raw];
  const escaped = new Set<string>([...placeholders.escaped, ...placeholders.optional ?? []]);
  const raw = new Set<string>(placeholders.raw);
  const unfolded = unfoldSections(template);
  if (/\{\{\s*[#^/]/.test(unfolded.text)) throw new Error(`${name}: a section is not closed`);
  const seen = new Set<string>(unfolded.names);
  for (const [, rawName, escapedName] of unfolded.text.matchAll(PLACEHOLDER)) {
    if (rawName !== undefined && !raw.has(rawName)) {
      throw new Error(`${name}: {{{${rawName}}}} is not a raw placeholder`);
    }
    if (escapedName !== undefined && !escaped.has(escapedName)) {
      throw new Error(`${name}: unknown placeholder {{${escapedName}}}`);
    }
    seen.add(rawName ?? escapedName);
  }
  for (const needed of required) {
    if (!seen.has(needed)) throw new Error(`${name}: missing placeholder for "${needed}"`);
  }
  for (const [tag] of template.matchAll(/<(?:script|style)\b[^>]*>/gi)) {
    if (!NONCE_ATTRIBUTE.test(tag)) throw new Error(`${name}: ${tag} lacks the nonce`);
  }
  if (raw.has("flowDataJson") && !FLOW_DATA_SCRIPT.test(template)) {
    throw new Error(`${name}: {{{flowDataJson}}} must be the whole #flow-data script`);
  }

  return (slots) =>
    renderSections(template, slots)
      .replace(
        PLACEHOLDER,
        (_, rawName: string | undefined, escapedName: string) =>
          rawName !== undefined ? slots[rawName] : escapeHtml(slots[escapedName]),
      );
}

/** The names of every section, nested ones too, and the text with each replaced by its body. */
function unfoldSections(template: string): { names: Set<string>; text: string } {
  const names = new Set<string>();
  let text = template;
  for (let previous = ""; text !== previous;) {
    previous = text;
    text = text.replace(SECTION, (_, _kind: string, key: string, body: string) => {
      names.add(key);
      return body;
    });
  }
  return { names, text };
}

/**
 * Keeps or drops each section by its slot (`{{#x}}` when non-empty, `{{^x}}` when empty), outer
 * sections first, until none is left; slot values are not inserted yet, so they cannot open one.
 */
function renderSections(template: string, slots: Slots): string {
  let text = template;
  for (let previous = ""; text !== previous;) {
    previous = text;
    text = text.replace(
      SECTION,
      (_, kind: string, key: string, body: string) =>
        (slots[key] !== "") === (kind === "#") ? body : "",
    );
  }
  return text;
}

/** Checks that `raw` is an absolute http(s) URL and returns it; else throws TypeError. */
export function httpUrl(raw: string, name: string): string {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new TypeError(`${name} is not an absolute URL`);
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") {
    throw new TypeError(`${name} must be an http or https URL`);
  }
  return raw;
}

/**
 * Resource URIs as the policy reads them: in WHATWG normal form, the form both official MCP SDKs
 * look a resource up by (`new URL(uri).toString()`). A URI that is not already in that form
 * (other case in the scheme, a space or tab, `..` or `%2e%2e` segments, `file://localhost/`)
 * would be matched by the policy as one string and served by the MCP server as another, so it
 * is refused; a pattern is normalised once, when the policy file is read, with each `*` held by
 * a placeholder while the URL parser works.
 *
 * @see https://url.spec.whatwg.org/#url-serializing
 */

/** Whether `uri` parses and is already in WHATWG normal form. */
export function isNormalUri(uri: string): boolean {
  const url = URL.parse(uri);
  return url !== null && url.href === uri;
}

/**
 * The pattern in normal form with `*` kept, or undefined when it does not parse as a URL. `*`
 * alone stands for every URI.
 */
export function normalUriPattern(pattern: string): string | undefined {
  if (pattern === "*") return pattern;
  const placeholder = placeholderFor(pattern);
  const url = URL.parse(pattern.replaceAll("*", placeholder));
  return url?.href.replaceAll(placeholder, "*");
}

/**
 * A run of lower-case letters and digits the pattern does not contain: the URL parser keeps it
 * as it is in every part of a URL (host, path, query, fragment) and no case folding changes it.
 */
function placeholderFor(pattern: string): string {
  let placeholder = "wildcard";
  for (let n = 0; pattern.toLowerCase().includes(placeholder); n++) placeholder = `wildcard${n}`;
  return placeholder;
}

/**
 * What a `*` may stand for in a pattern as written: a letter of either case, a digit, and runs
 * crossing into the next part of a URI (path, query, fragment), plus a scheme. Dot segments are
 * not among them: a URI in normal form has none, so no pattern has to name them.
 */
const PROBES = ["", "a", "A", "5", "/a", "a/b", "a?b", "a#b", "http"];

/**
 * A URI in normal form that `pattern` names as written (a `*` standing for one of PROBES) but
 * `matcher`, its normal form's matcher, misses; undefined when there is none. The URL parser can
 * leave a `*` in a part it was not meant for (`https://internal.example*` gains a `/` after the
 * `*`, so misses `https://internal.example/secret`), fold a host only for some schemes (a `*` for
 * the scheme, `Secrets.example` for its host) or rewrite a host the `*` completes
 * (`http://0x0a.0.0.*`): each would narrow a `deny` rule.
 */
export function missedInNormalForm(pattern: string, matcher: RegExp): string | undefined {
  if (pattern === "*") return undefined;
  for (const probe of PROBES) {
    const named = URL.parse(pattern.replaceAll("*", probe))?.href;
    if (named !== undefined && !matcher.test(named)) return named;
  }
  return undefined;
}

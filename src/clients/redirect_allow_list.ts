/**
 * The operator's allow-list of redirect URIs (ALLOWED_REDIRECT_URIS): patterns where `*` stands
 * for a port (`http://127.0.0.1:*`) or the rest of one path segment (`/callback/*`,
 * `cursor://*`); everything else matches exactly, character for character.
 *
 * @see docs/security.md "Client allow-list", OAuth 2.1 §2.3.1 (exact redirect URI matching)
 */

/** What a port wildcard matches: one to five digits. */
const PORT = "\\d{1,5}";
/**
 * What any other wildcard matches: the rest of one segment, never `/`, `?` or `#`, nor `\`,
 * which URL parsers and browsers read as `/` in http(s) URLs (`https://evil\.apps.example/`
 * leads to `evil`).
 */
const SEGMENT_REST = "[^/?#\\\\]*";

/** Why `pattern` cannot be used, or undefined when it can. */
export function redirectPatternProblem(pattern: string): string | undefined {
  if (/\s/.test(pattern)) return "must not contain blanks";
  if (pattern.includes("#")) return "must not contain a fragment";
  try {
    new URL(pattern.replaceAll("*", "0"));
  } catch {
    return "is not an absolute URI";
  }
  return undefined;
}

/**
 * Whether `redirectUri` matches one of `patterns`. A URI with a dot segment (`.`, `..`, raw or
 * percent-encoded) never does: a wildcard segment would otherwise admit `/callback/..`, which a
 * browser resolves to a path outside the one the operator allowed.
 */
export function isAllowedRedirect(redirectUri: string, patterns: readonly string[]): boolean {
  // A URL parser drops tabs and line breaks anywhere, and controls and spaces at either end:
  // `/callback/.\t.` would pass the dot check and then be `/callback/..`. No URI holds them raw.
  if (CONTROL_OR_SPACE.test(redirectUri) || hasDotSegment(redirectUri)) return false;
  return patterns.some((pattern) => patternRegExp(pattern).test(redirectUri));
}

/** What a URI never holds unencoded (RFC 3986 §2), and URL parsers strip or drop. */
// deno-lint-ignore no-control-regex -- control characters are what it looks for
const CONTROL_OR_SPACE = /[\x00-\x20\x7f]/;

/** A path segment of `.` or `..`, any of the dots written `%2e` (RFC 3986 §5.2.4, §6.2.2.2). */
const DOT_SEGMENT = /^(?:\.|%2e){1,2}$/i;

function hasDotSegment(uri: string): boolean {
  const beforeQuery = uri.split(/[?#]/, 1)[0];
  return beforeQuery.split(/[/\\]/).some((segment) => DOT_SEGMENT.test(segment));
}

function patternRegExp(pattern: string): RegExp {
  const authorityEnd = authorityEndOf(pattern);
  let source = "";
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i];
    if (c !== "*") {
      source += c.replace(/[\\^$.|?+()[\]{}]/g, "\\$&");
      continue;
    }
    const isPort = i < authorityEnd && pattern[i - 1] === ":" && /^[/?]?$/.test(
      pattern.slice(i + 1, i + 2),
    );
    source += isPort ? PORT : SEGMENT_REST;
  }
  return new RegExp(`^${source}$`);
}

/** Where the authority (`//host:port`) of a pattern ends; 0 when it has none. */
function authorityEndOf(pattern: string): number {
  const start = pattern.indexOf("://");
  if (start < 0) return 0;
  const end = pattern.slice(start + 3).search(/[/?]/);
  return end < 0 ? pattern.length : start + 3 + end;
}

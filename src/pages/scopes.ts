/**
 * The provider's scopes in words, for the pages that say what the application will be able to
 * do with the user's account (the provider's profile carries its words).
 */

/**
 * The space-separated `scopes` in words, one line per scope (a scope without words by its
 * name), for an element that keeps line breaks.
 */
export function scopeWords(
  scopes: string,
  words: Readonly<Record<string, string>> = {},
): string {
  return scopes.split(/\s+/).filter((scope) => scope !== "").map((scope) =>
    Object.hasOwn(words, scope) ? words[scope] : scope
  ).join("\n");
}

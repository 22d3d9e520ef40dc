/**
 * The Content-Security-Policy each page is served with: nothing may load but what the page
 * itself carries under its nonce, and forms and fetches go only where the page needs them.
 */

/** The home page: static, no script, no forms. */
export const HOME_PAGE_POLICY =
  "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; " +
  "frame-ancestors 'none'";

/** The device page: its script and style by nonce; fetches to the poll origin only. */
export function devicePagePolicy(nonce: string, pollOrigin: string): string {
  return [
    "default-src 'none'",
    `script-src 'nonce-${nonce}'`,
    `style-src 'nonce-${nonce}'`,
    `connect-src ${pollOrigin}`,
    "img-src data:",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join("; ");
}

/** No script at all; styles by nonce; forms only to `formTargets`. */
export function formPagePolicy(nonce: string, formTargets: string[]): string {
  return [
    "default-src 'none'",
    `style-src 'nonce-${nonce}'`,
    "img-src data:",
    "base-uri 'none'",
    `form-action ${formTargets.length > 0 ? formTargets.join(" ") : "'none'"}`,
    "frame-ancestors 'none'",
  ].join("; ");
}

/**
 * The CSP source a form may lead to when the browser returns to `redirectUri` (after Cancel):
 * the origin of a web address, the scheme of an app's. Chromium applies `form-action` to the
 * redirects that follow a form's submission too. A CSP host source cannot name an IPv6 literal
 * (Chromium drops `http://[::1]:8080` as invalid, blocking the return), so the scheme stands in.
 */
export function returnSource(redirectUri: string): string {
  const url = new URL(redirectUri);
  const web = url.protocol === "https:" || url.protocol === "http:";
  return web && !url.hostname.startsWith("[") ? url.origin : url.protocol;
}

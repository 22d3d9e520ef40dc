/**
 * URI schemes no redirect may use: they run script or reach local content instead of returning
 * to a client. Registration refuses them, and the page neither follows nor presents them as an
 * app.
 */

/** Schemes a redirect URI must never have (with the colon, as `URL.protocol` gives them). */
export const UNSAFE_REDIRECT_SCHEMES: readonly string[] = [
  "javascript:",
  "data:",
  "vbscript:",
  "file:",
  "blob:",
];

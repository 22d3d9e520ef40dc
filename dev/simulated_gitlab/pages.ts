/** The HTML of the simulated GitLab's "Device authorization" page and the answers it leads to. */

import { escapeHtml } from "../../src/pages/mod.ts";
import type { Decision } from "./state.ts";

const TITLE = "Device authorization";

/** The form asking for a user code; `message` is HTML already escaped by the caller. */
export function deviceFormPage(
  status: number,
  username: string,
  userCode: string,
  message?: string,
): Response {
  return page(status, TITLE, deviceForm(username, userCode, message));
}

/** The page answering a decision on a user code, as `username` (the signed-in account). */
export function decisionPage(outcome: Decision, username: string, userCode: string): Response {
  switch (outcome) {
    case "approved":
      return page(
        200,
        "Device approved",
        `<h1>Device approved</h1>
      <p role="status">Device approved — you can return to the application.</p>
      <p class="muted">Signed in as <strong>${escapeHtml(username)}</strong>.</p>`,
      );
    case "denied":
      return page(
        200,
        "Device denied",
        `<h1>Device denied</h1>
      <p role="status">Device denied — the application was not given access to your account.</p>`,
      );
    case "unknown":
      return deviceFormPage(
        404,
        username,
        userCode,
        `Unknown user code “${escapeHtml(userCode)}”. Check the code and try again.`,
      );
    case "expired":
      return deviceFormPage(
        400,
        username,
        userCode,
        "This code has expired. Start again on your device.",
      );
    case "used":
      return deviceFormPage(400, username, userCode, "This code has already been used.");
  }
}

/** `message` is HTML already escaped by the caller. */
function deviceForm(username: string, userCode: string, message?: string): string {
  return `<h1>Device authorization</h1>
      <p>Enter the code displayed on your device to connect it to your account,
        <strong>${escapeHtml(username)}</strong>.</p>
      ${message === undefined ? "" : `<p class="error" role="alert">${message}</p>`}
      <form method="post" action="/oauth/device">
        <label for="user_code">User code</label>
        <input id="user_code" name="user_code" value="${escapeHtml(userCode)}" autocomplete="off"
          autocapitalize="characters" spellcheck="false" placeholder="ABCD-1234" required>
        <div class="actions">
          <button type="submit" name="action" value="approve">Authorize</button>
          <button type="submit" name="action" value="deny" class="secondary">Deny</button>
        </div>
      </form>`;
}

/**
 * GitLab's "Authorize application" page of the authorization code grant: Authorize or Deny,
 * posting the request's parameters back. Its answer sends the browser to the application's
 * redirect URI, which may send it on anywhere (Chromium applies `form-action` to every redirect
 * that follows), so this page does not restrict where forms lead, as GitLab's does not.
 */
export function authorizeApplicationPage(username: string, params: URLSearchParams): Response {
  const hidden = [...params].map(([name, value]) =>
    `<input type="hidden" name="${escapeHtml(name)}" value="${escapeHtml(value)}">`
  ).join("\n        ");
  return page(
    200,
    "Authorize application",
    `<h1>Authorize application</h1>
      <p>An application wants to access your account, <strong>${escapeHtml(username)}</strong>,
        with the scopes <code>${escapeHtml(params.get("scope") ?? "")}</code>.</p>
      <form method="post" action="/oauth/authorize">
        ${hidden}
        <div class="actions">
          <button type="submit" name="action" value="approve">Authorize</button>
          <button type="submit" name="action" value="deny" class="secondary">Deny</button>
        </div>
      </form>`,
    "",
  );
}

/** GitLab's answer to an authorization request it will not send back: a page, no redirect. */
export function authorizeErrorPage(message: string): Response {
  return page(
    400,
    "An error has occurred",
    `<h1>An error has occurred</h1><p class="error" role="alert">${escapeHtml(message)}</p>`,
  );
}

/** `body` is HTML the caller has escaped; `formAction` is the CSP directive for its forms. */
function page(
  status: number,
  title: string,
  body: string,
  formAction = "form-action 'self'; ",
): Response {
  return new Response(layout(title, body), {
    status,
    headers: {
      "Content-Type": "text/html; charset=utf-8",
      "Cache-Control": "no-store",
      "Content-Security-Policy":
        `default-src 'none'; style-src 'unsafe-inline'; ${formAction}frame-ancestors 'none'`,
    },
  });
}

function layout(title: string, body: string): string {
  return `<!DOCTYPE html>
<html lang="en">
  <head>
    <meta charset="utf-8">
    <meta name="viewport" content="width=device-width, initial-scale=1">
    <title>${escapeHtml(title)} · GitLab (simulated)</title>
    <style>
      :root { color-scheme: light; font-family: system-ui, sans-serif; color: #1f1e24; }
      body { margin: 0; background: #fbfafd; }
      header { background: #292961; color: #fff; padding: 0.75rem 1.5rem; font-weight: 600; }
      header small { font-weight: 400; opacity: 0.75; }
      main { max-width: 28rem; margin: 3rem auto; padding: 2rem; background: #fff;
        border: 1px solid #dcdcde; border-radius: 0.5rem; }
      h1 { font-size: 1.4rem; margin-top: 0; }
      label { display: block; font-weight: 600; margin-bottom: 0.25rem; }
      input { box-sizing: border-box; width: 100%; padding: 0.5rem; font: 1.2rem ui-monospace,
        monospace; letter-spacing: 0.1em; text-transform: uppercase; border: 1px solid #89888d;
        border-radius: 0.25rem; }
      .actions { display: flex; gap: 0.5rem; margin-top: 1rem; }
      button { padding: 0.5rem 1.25rem; font-size: 1rem; border-radius: 0.25rem; cursor: pointer;
        border: 1px solid #1f75cb; background: #1f75cb; color: #fff; }
      button.secondary { background: #fff; color: #1f1e24; border-color: #89888d; }
      .error { color: #a02e1c; }
      .muted { color: #626168; }
    </style>
  </head>
  <body>
    <header>GitLab <small>simulated, for development</small></header>
    <main>
      ${body}
    </main>
  </body>
</html>
`;
}

/**
 * What `/device` says when a GitLab sign-in started there comes back failed. The words come from
 * our own state (the authorization's status) or from this fixed table keyed by the OAuth error
 * code, never from the query's text, so a crafted link can show nothing but these sentences.
 */

import type { DeviceAuthorizationRecord } from "../../store/records.ts";

/** The codes the redirect sign-in's callback returns to `/device` with, besides `access_denied`. */
const FAILURE_CODES: ReadonlySet<string> = new Set(["server_error", "temporarily_unavailable"]);

const RETRY = "To try again, enter the code from your device.";

/** The sentence for the OAuth error code `error` the redirect sign-in's callback returned with. */
export function signInFailureMessage(error: string): string {
  if (error === "access_denied") {
    return "GitLab sign-in was cancelled — the device was not authorized.";
  }
  const code = FAILURE_CODES.has(error) ? `: ${error}` : "";
  return `GitLab sign-in failed${code}. ${RETRY}`;
}

/**
 * The sentence for an authorization whose GitLab device flow failed (its page's return link),
 * by its status: denied (at GitLab, or the allow-lists refused the account), or still pending
 * (GitLab failed or its code expired); undefined for any other status.
 */
export function deviceFlowFailureMessage(
  status: DeviceAuthorizationRecord["status"],
): string | undefined {
  if (status === "denied") {
    return "GitLab sign-in was cancelled, or this service refused the account — " +
      "the device was not authorized.";
  }
  if (status === "pending") return `GitLab sign-in did not complete. ${RETRY}`;
  return undefined;
}

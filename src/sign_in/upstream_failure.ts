/**
 * How GitLab's error code ends a sign-in, as the sign-in metrics count it; the same for both
 * ways in (the device flow's poll and the redirect sign-in's callback).
 */

import type { SignInOutcome } from "../metrics/catalog.ts";

/** How an upstream error code ends a sign-in: the user's no, the code's expiry, or a failure. */
export function signInFailure(
  code: string | undefined,
): Extract<SignInOutcome, "denied" | "expired" | "failed"> {
  if (code === "access_denied") return "denied";
  return code === "expired_token" ? "expired" : "failed";
}

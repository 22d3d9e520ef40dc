/**
 * `GET /oauth/poll`: the page asks whether the user has approved upstream; on approval the
 * session and the single-use authorization code are created in one commit (sign_in/device.ts).
 *
 * @see spec §3.1, §4.2, RFC 8628 §3.4–3.5
 */

import type { SignInContext } from "../sign_in/deps.ts";
import { json, NO_STORE } from "../http/responses.ts";
import { type PollBody, pollFlow } from "../sign_in/device.ts";

/** Handles `GET /oauth/poll`. */
export async function handlePoll(ctx: SignInContext): Promise<Response> {
  const flowStates = ctx.url.searchParams.getAll("flow_state");
  if (flowStates.length > 1) {
    return answer(400, { status: "failed", error: "Repeated parameter: flow_state" });
  }
  const flowState = flowStates[0];
  if (!flowState) return answer(400, { status: "failed", error: "Missing flow_state" });
  const { httpStatus, body } = await pollFlow(ctx, flowState);
  return answer(httpStatus, body);
}

function answer(status: number, body: PollBody): Response {
  return json(body, status, NO_STORE);
}

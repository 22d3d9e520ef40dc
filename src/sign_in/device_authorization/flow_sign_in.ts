/**
 * The `/device` sign-in's completion on either upstream sign-in (the redirect's callback, or
 * the GitLab device flow's poll): the session is stored with the authorization (`signed_in`,
 * awaiting Approve / Deny) by the completion every sign-in uses; a user the allow-lists refuse
 * has the authorization denied, so the device's poll gets `access_denied`.
 */

import { revokeAbandonedUpstreamTokens, storeSignIn } from "../completion.ts";
import type { SignInContext } from "../deps.ts";
import type { Versioned } from "../../store/mod.ts";
import type { FlowRecord, SessionAccess, UpstreamTokenSet } from "../../store/records.ts";
import type { UpstreamUser } from "../../upstream/types.ts";
import { auditDeviceAuthorization } from "./audit.ts";
import { changeDeviceAuthorization, signInRequestOf } from "./sign_in.ts";

/** What the upstream vouched for. */
export interface VouchedUser {
  tokens: UpstreamTokenSet;
  user: UpstreamUser;
  access?: SessionAccess;
}

/**
 * Stores the session with the pending authorization `userCodeHash` (then `signed_in`); false,
 * with the upstream tokens revoked, when it is no longer pending. `afterCommit` runs once the
 * session is stored (the device flow deletes its flow there).
 */
export async function storeDeviceSignIn(
  ctx: SignInContext,
  userCodeHash: string,
  vouched: VouchedUser,
  afterCommit: () => Promise<unknown> = () => Promise.resolve(),
): Promise<boolean> {
  const { store } = ctx.deps;
  const device = await store.getDeviceAuthorizationOfUserCodeHash(userCodeHash);
  const stored = device?.value.status === "pending" && await storeSignIn(
    ctx,
    signInRequestOf(device.value),
    vouched,
    async (done) => {
      const changed = await changeDeviceAuthorization(
        ctx,
        userCodeHash,
        ["pending"],
        (current) =>
          store.approveDeviceAuthorization(
            current,
            // Unredeemed, the session lives as long as the device code, not a code's 10 minutes.
            {
              ...done.session,
              expiresAt: Math.max(done.session.expiresAt, current.value.expiresAt),
            },
            "signed_in",
          ),
      );
      if (changed) await afterCommit();
      return changed !== null;
    },
  );
  if (!stored) await revokeAbandonedUpstreamTokens(ctx, vouched.tokens, "device code gone");
  return !!stored;
}

/**
 * The device flow's completion of a `/device` sign-in: its flow ends with it, stored or not (a
 * device code gone meanwhile: the token is revoked, and the flow must not stay counted and held).
 */
export async function storeDeviceFlowSignIn(
  ctx: SignInContext,
  flow: Versioned<FlowRecord>,
  userCodeHash: string,
  vouched: VouchedUser,
): Promise<boolean> {
  const endFlow = () => ctx.deps.store.deleteFlow(flow);
  const stored = await storeDeviceSignIn(ctx, userCodeHash, vouched, endFlow);
  if (!stored) await endFlow();
  return stored;
}

/** Why a device authorization was denied other than on our page: the audit line's `reason`. */
export type DenialReason = "refused by the allow-lists" | "denied at GitLab";

/**
 * The sign-in for a device authorization ended in a no: the allow-lists refused the user, or the
 * user denied at GitLab. The authorization is denied (audited once), so the device's next poll
 * answers `access_denied` instead of waiting for the code to expire.
 */
export async function denyDevice(
  ctx: SignInContext,
  userCodeHash: string,
  reason: DenialReason,
): Promise<void> {
  const { store } = ctx.deps;
  const denied = await changeDeviceAuthorization(
    ctx,
    userCodeHash,
    ["pending"],
    async (current) =>
      !!await store.updateDeviceAuthorization(current, { ...current.value, status: "denied" }),
  );
  if (denied) {
    auditDeviceAuthorization(ctx.deps, "denied", denied.clientId, ctx.requestId, {
      reason,
    });
  }
}

/** A GitLab device flow started from `/device` ended in a no: its device authorization too. */
export async function denyDeviceOfFlow(
  ctx: SignInContext,
  flow: FlowRecord,
  reason: DenialReason,
): Promise<void> {
  if (flow.deviceUserCodeHash !== undefined) await denyDevice(ctx, flow.deviceUserCodeHash, reason);
}

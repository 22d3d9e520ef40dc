/**
 * A simulated GitLab for the demo and for end-to-end tests: the OAuth device authorization grant,
 * the authorization code grant with PKCE (an "Authorize application" page at `/oauth/authorize`
 * with Authorize and Deny), the refresh-token grant (with rotation), token revocation,
 * `GET /api/v4/user`, CI ID-token keys (`GET /oauth/discovery/keys`, `idTokens` signs the
 * tokens), group memberships (`GET /api/v4/groups/:id/members/all/:user_id`, inherited
 * from parent groups), and a small "Device authorization" page where a person approves or denies
 * a user code.
 *
 * Development only: nothing under src/ imports this module. State lives in memory and dies with
 * the server. Test controls (`approve`, `failNext`, `calls`, ...) let a test drive the flow
 * without a browser and inject the failures a real instance produces now and then. The model
 * is in simulated_gitlab/state.ts, the routes and pages beside it.
 */

import { createSimulatedGitLabHandler } from "./simulated_gitlab/handlers.ts";
import { FakeGitLabIdTokens } from "./simulated_gitlab/id_tokens.ts";
import { createStalledBodies } from "./simulated_gitlab/stalled_bodies.ts";
import { createSimulatedGitLabState } from "./simulated_gitlab/state.ts";
import type {
  SimulatedGitLab,
  SimulatedGitLabControls,
  SimulatedGitLabOptions,
} from "./simulated_gitlab/types.ts";

export type {
  SimulatedEndpoint,
  SimulatedFailure,
  SimulatedGitLab,
  SimulatedGitLabCalls,
  SimulatedGitLabControls,
  SimulatedGitLabOptions,
  SimulatedMembership,
  SimulatedTokens,
  SimulatedUser,
} from "./simulated_gitlab/types.ts";

/** Starts a simulated GitLab on 127.0.0.1 (a random port unless `port` is given). */
export function startSimulatedGitLab(options: SimulatedGitLabOptions = {}): SimulatedGitLab {
  const hostname = options.hostname ?? "127.0.0.1";
  const state = createSimulatedGitLabState(options);
  const stalls = createStalledBodies();
  const server = Deno.serve(
    { port: options.port ?? 0, hostname, onListen() {} },
    // Requests only arrive once this function has returned, so `handle` and `idTokens` are set.
    (request) =>
      new URL(request.url).pathname === "/oauth/discovery/keys" && request.method === "GET"
        ? idTokens.serve(request)
        : handle(request),
  );
  const url = originOf(hostname, server.addr.port);
  const idTokens = new FakeGitLabIdTokens(url.href.replace(/\/+$/, ""));
  const handle = createSimulatedGitLabHandler(state, {
    url,
    interval: options.interval ?? 5,
    stalls,
  });

  let closed: Promise<void> | undefined;
  return {
    ...controlsOf(state),
    url,
    idTokens,
    close() {
      closed ??= (async () => {
        stalls.endAll();
        await server.shutdown();
      })();
      return closed;
    },
  };
}

/** Only the test controls: the handle does not expose what the handlers use. */
function controlsOf(state: SimulatedGitLabControls): SimulatedGitLabControls {
  return {
    calls: state.calls,
    users: state.users,
    revokedTokens: state.revokedTokens,
    approve: state.approve,
    deny: state.deny,
    expireDevice: state.expireDevice,
    lastUserCode: state.lastUserCode,
    failNext: state.failNext,
    rateLimit: state.rateLimit,
    issueTokens: state.issueTokens,
    revoke: state.revoke,
    memberLookups: state.memberLookups,
    addGroup: state.addGroup,
    setMembership: state.setMembership,
    memberAccessLevel: state.memberAccessLevel,
  };
}

function originOf(hostname: string, port: number): URL {
  const url = new URL(`http://${hostname.includes(":") ? `[${hostname}]` : hostname}`);
  url.port = String(port);
  return url;
}

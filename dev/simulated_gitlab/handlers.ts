/**
 * The simulated GitLab's routes: the device authorization grant, the refresh-token grant with
 * rotation, revocation, `GET /api/v4/user` and `/api/v4/projects`, and the verification page, each counting its calls
 * and honouring the failures a test queued.
 */

import {
  authorizeApplicationPage,
  authorizeErrorPage,
  decisionPage,
  deviceFormPage,
} from "./pages.ts";
import {
  invalidClient,
  invalidGrant,
  json,
  oauthError,
  readForm,
  tooManyRequests,
} from "./responses.ts";
import type { StalledBodies } from "./stalled_bodies.ts";
import type { SimulatedGitLabState, TokenRecord } from "./state.ts";
import type { SimulatedEndpoint, SimulatedFailure } from "./types.ts";

/** What the handlers need besides the state. */
export interface SimulatedGitLabHandlerOptions {
  /** The origin the server listens on, for `verification_uri` and `web_url`. */
  url: URL;
  /** Polling interval announced by the device authorization endpoint, in seconds. */
  interval: number;
  /** Where `timeout` failures get their never-ending bodies. */
  stalls: StalledBodies;
}

/** A request handler for `Deno.serve`. */
export type SimulatedGitLabHandler = (request: Request) => Promise<Response>;

const DEVICE_CODE_GRANT_TYPE = "urn:ietf:params:oauth:grant-type:device_code";
/** `/api/v4/groups/{url-encoded full path or id}/members/all/{user id}` */
const MEMBER_PATH = /^\/api\/v4\/groups\/([^/]+)\/members\/all\/(\d+)$/;
/** Token scopes that may read the API (GitLab answers 403 `insufficient_scope` otherwise). */
const API_READ_SCOPES = ["api", "read_api"];

/** Creates the handler that answers every request to the simulated GitLab from `state`. */
export function createSimulatedGitLabHandler(
  state: SimulatedGitLabState,
  { url, interval, stalls }: SimulatedGitLabHandlerOptions,
): SimulatedGitLabHandler {
  const { calls } = state;

  async function route(request: Request): Promise<Response> {
    const { pathname } = new URL(request.url);
    const method = request.method;
    if (pathname === "/oauth/authorize_device" && method === "POST") {
      return await authorizeDevice(request);
    }
    if (pathname === "/oauth/token" && method === "POST") return await token(request);
    if (pathname === "/oauth/revoke" && method === "POST") return await revokeEndpoint(request);
    if (pathname === "/api/v4/user" && method === "GET") return currentUser(request);
    if (pathname === "/api/v4/projects" && method === "GET") return projects(request);
    const member = MEMBER_PATH.exec(pathname);
    if (member && method === "GET") return groupMember(request, member[1], Number(member[2]));
    if (pathname === "/oauth/device" && method === "GET") return devicePage(request);
    if (pathname === "/oauth/device" && method === "POST") return await deviceDecision(request);
    if (pathname === "/oauth/authorize" && method === "GET") {
      return authorizePage(new URL(request.url).searchParams);
    }
    if (pathname === "/oauth/authorize" && method === "POST") {
      return authorizeDecision(await readForm(request));
    }
    await request.body?.cancel();
    return json(404, { message: "404 Not Found" });
  }

  /** Answers an injected failure, or undefined when none is queued (or it is handled later). */
  function injected(
    endpoint: SimulatedEndpoint,
    handledLater: readonly SimulatedFailure[] = [],
  ): Response | SimulatedFailure | undefined {
    const mode = state.takeFailure(endpoint);
    switch (mode) {
      case undefined:
        return undefined;
      case "500":
        return json(500, { message: "500 Internal Server Error" });
      case "429":
        return tooManyRequests(1);
      case "malformed":
        return new Response("<!DOCTYPE html><p>We're sorry, something went wrong.</p>", {
          status: 200,
          headers: { "Content-Type": "text/html; charset=utf-8" },
        });
      case "timeout":
        return stalls.response();
      default:
        if (handledLater.includes(mode)) return mode;
        return json(500, { message: "500 Internal Server Error" });
    }
  }

  async function authorizeDevice(request: Request): Promise<Response> {
    calls.authorizeDevice++;
    const form = await readForm(request);
    const failure = injected("authorize_device");
    if (failure instanceof Response) return failure;
    const clientId = form.get("client_id") ?? "";
    if (!state.isKnownClient(clientId)) return invalidClient();
    const device = state.startDevice(clientId, form.get("scope") ?? undefined);
    const verificationUri = new URL("/oauth/device", url);
    const verificationUriComplete = new URL(verificationUri);
    verificationUriComplete.searchParams.set("user_code", device.userCode);
    return json(200, {
      device_code: device.deviceCode,
      user_code: device.userCode,
      verification_uri: verificationUri.href,
      verification_uri_complete: verificationUriComplete.href,
      expires_in: state.deviceExpiresInSeconds,
      interval,
    });
  }

  async function token(request: Request): Promise<Response> {
    const form = await readForm(request);
    const grantType = form.get("grant_type");
    if (grantType === DEVICE_CODE_GRANT_TYPE) {
      calls.deviceToken++;
      return deviceCodeGrant(form);
    }
    if (grantType === "authorization_code") {
      calls.authorizationCode++;
      return authorizationCodeGrant(form);
    }
    if (grantType === "refresh_token") {
      calls.refresh++;
      return refreshGrant(form);
    }
    return oauthError(
      400,
      "unsupported_grant_type",
      "The authorization grant type is not supported by the authorization server.",
    );
  }

  function deviceCodeGrant(form: URLSearchParams): Response {
    const rateLimited = state.rateLimitSecondsLeft();
    if (rateLimited > 0) {
      return tooManyRequests(rateLimited);
    }
    const failure = injected("token", ["no_refresh_token", "slow_down"]);
    if (failure instanceof Response) return failure;
    if (failure === "slow_down") {
      return oauthError(400, "slow_down", "The client is polling too quickly.");
    }
    const clientId = form.get("client_id") ?? "";
    if (!state.isKnownClient(clientId)) return invalidClient();
    const deviceCode = form.get("device_code");
    if (!deviceCode) {
      return oauthError(400, "invalid_request", "Missing required parameter: device_code.");
    }
    const device = state.deviceByCode(deviceCode);
    if (device === undefined || device.status === "consumed" || device.clientId !== clientId) {
      return invalidGrant();
    }
    if (state.isExpired(device)) {
      return oauthError(400, "expired_token", "The device_code has expired.");
    }
    if (device.status === "denied") {
      return oauthError(400, "access_denied", "The end-user denied the authorization request.");
    }
    if (device.status === "pending") {
      return oauthError(
        400,
        "authorization_pending",
        "The authorization request is still pending.",
      );
    }
    return tokenResponse(state.consumeDevice(device, failure !== "no_refresh_token"));
  }

  /** The request's problem, or its parsed redirect URI when GitLab would answer it. */
  function checkAuthorizationRequest(params: URLSearchParams): string | URL {
    if (!state.isKnownClient(params.get("client_id") ?? "")) {
      return "Client authentication failed due to unknown client.";
    }
    const redirectUri = params.get("redirect_uri") ?? "";
    if (!URL.canParse(redirectUri) || !/^https?:$/.test(new URL(redirectUri).protocol)) {
      return "The redirect URI included is not valid.";
    }
    if (params.get("response_type") !== "code") return "The response type is not supported.";
    const method = params.get("code_challenge_method");
    if (params.get("code_challenge") && method !== "S256") {
      return "The code challenge method must be S256 here.";
    }
    return new URL(redirectUri);
  }

  function authorizePage(params: URLSearchParams): Response {
    calls.authorizePage++;
    const checked = checkAuthorizationRequest(params);
    if (typeof checked === "string") return authorizeErrorPage(checked);
    return authorizeApplicationPage(state.defaultUser().username, params);
  }

  /** Authorize: a code back to the redirect URI; Deny: `access_denied` (RFC 6749 §4.1.2.1). */
  function authorizeDecision(form: URLSearchParams): Response {
    calls.authorizePage++;
    const checked = checkAuthorizationRequest(form);
    if (typeof checked === "string") return authorizeErrorPage(checked);
    const back = new URL(checked);
    if (form.get("action") === "approve") {
      const code = state.codes.issue({
        clientId: form.get("client_id") ?? "",
        redirectUri: checked.href,
        scope: form.get("scope")?.trim() || "read_user",
        codeChallenge: form.get("code_challenge") ?? "",
      }, state.defaultUser().id);
      back.searchParams.set("code", code);
    } else {
      back.searchParams.set("error", "access_denied");
      back.searchParams.set(
        "error_description",
        "The resource owner or authorization server denied the request.",
      );
    }
    const requestState = form.get("state");
    if (requestState !== null) back.searchParams.set("state", requestState);
    return new Response(null, { status: 302, headers: { Location: back.href } });
  }

  function authorizationCodeGrant(form: URLSearchParams): Response {
    const failure = injected("token");
    if (failure instanceof Response) return failure;
    const clientId = form.get("client_id") ?? "";
    if (
      !state.isKnownClient(clientId) ||
      !state.isClientSecret(form.get("client_secret") ?? undefined)
    ) {
      return invalidClient();
    }
    const code = form.get("code");
    if (!code) return oauthError(400, "invalid_request", "Missing required parameter: code.");
    const record = state.codes.redeem(code, {
      clientId,
      redirectUri: form.get("redirect_uri") ?? "",
      codeVerifier: form.get("code_verifier") ?? "",
    });
    if (record === undefined) return invalidGrant();
    return tokenResponse(state.grantTokens(record.userId, clientId, record.scope));
  }

  function refreshGrant(form: URLSearchParams): Response {
    const failure = injected("refresh", ["no_refresh_token"]);
    if (failure instanceof Response) return failure;
    const clientId = form.get("client_id") ?? "";
    if (!state.isKnownClient(clientId)) return invalidClient();
    const refreshToken = form.get("refresh_token");
    if (!refreshToken) {
      return oauthError(400, "invalid_request", "Missing required parameter: refresh_token.");
    }
    const old = state.tokensByRefreshToken(refreshToken);
    if (old === undefined || old.revoked) return invalidGrant();
    if (old.clientId !== "" && old.clientId !== clientId) return invalidGrant();
    // GitLab rotates: the used refresh token and its access token die with this answer.
    return tokenResponse(state.rotate(old, clientId, failure !== "no_refresh_token"));
  }

  async function revokeEndpoint(request: Request): Promise<Response> {
    calls.revoke++;
    const form = await readForm(request);
    const value = form.get("token");
    if (value) state.revoke(value);
    return json(200, {});
  }

  /** The account a request's bearer token (or PRIVATE-TOKEN, as the API takes) belongs to. */
  function userOf(request: Request) {
    const bearer = /^Bearer\s+(\S+)$/i.exec(request.headers.get("Authorization") ?? "")?.[1];
    const token = bearer ?? request.headers.get("Private-Token") ?? undefined;
    const record = token === undefined ? undefined : state.liveAccessToken(token);
    return record === undefined ? undefined : state.userById(record.userId);
  }

  function currentUser(request: Request): Response {
    calls.user++;
    const failure = injected("user");
    if (failure instanceof Response) return failure;
    const user = userOf(request);
    if (user === undefined) return json(401, { message: "401 Unauthorized" });
    return json(200, {
      id: user.id,
      username: user.username,
      name: user.name,
      state: "active",
      avatar_url: null,
      web_url: new URL(`/${encodeURIComponent(user.username)}`, url).href,
    });
  }

  /**
   * A member of a group, inherited memberships included (members/all), read with a user's
   * token: 404 for an unknown group or a non-member, as GitLab answers.
   */
  function groupMember(request: Request, encodedGroup: string, userId: number): Response {
    let group: string;
    try {
      group = decodeURIComponent(encodedGroup);
    } catch {
      return json(404, { message: "404 Group Not Found" });
    }
    state.memberLookups.push({ group, userId });
    const failure = injected("members");
    if (failure instanceof Response) return failure;
    const bearer = /^Bearer\s+(\S+)$/i.exec(request.headers.get("Authorization") ?? "")?.[1];
    const record = bearer === undefined ? undefined : state.liveAccessToken(bearer);
    if (record === undefined) return json(401, { message: "401 Unauthorized" });
    if (!record.scope.split(/\s+/).some((scope) => API_READ_SCOPES.includes(scope))) {
      return json(403, { error: "insufficient_scope" });
    }
    const level = state.memberAccessLevel(group, userId);
    if (level === undefined) return json(404, { message: "404 Group Not Found" });
    const user = state.userById(userId);
    if (level === null || user === undefined) return json(404, { message: "404 Not found" });
    return json(200, {
      id: user.id,
      username: user.username,
      name: user.name,
      state: "active",
      membership_state: "active",
      access_level: level,
      web_url: new URL(`/${encodeURIComponent(user.username)}`, url).href,
    });
  }

  /** Two projects of the token's user, in the shape of GitLab's project list. */
  function projects(request: Request): Response {
    calls.projects++;
    const user = userOf(request);
    if (user === undefined) return json(401, { message: "401 Unauthorized" });
    return json(
      200,
      ["handbook", "website"].map((name, index) => ({
        id: user.id * 100 + index + 1,
        name,
        path_with_namespace: `${user.username}/${name}`,
        web_url: new URL(`/${encodeURIComponent(user.username)}/${name}`, url).href,
        visibility: "private",
      })),
    );
  }

  function devicePage(request: Request): Response {
    calls.devicePage++;
    const userCode = new URL(request.url).searchParams.get("user_code") ?? "";
    return deviceFormPage(200, state.defaultUser().username, userCode);
  }

  async function deviceDecision(request: Request): Promise<Response> {
    calls.devicePage++;
    const form = await readForm(request);
    const userCode = (form.get("user_code") ?? "").trim();
    const action = form.get("action");
    const user = state.defaultUser();
    if (userCode === "") {
      return deviceFormPage(400, user.username, "", "Enter the code shown on your device.");
    }
    if (action !== "approve" && action !== "deny") {
      return deviceFormPage(400, user.username, userCode, "Choose Authorize or Deny.");
    }
    const outcome = state.decide(userCode, action === "approve", user.id);
    return decisionPage(outcome, user.username, userCode);
  }

  function tokenResponse(record: TokenRecord): Response {
    return json(200, {
      access_token: record.accessToken,
      token_type: "Bearer",
      expires_in: state.accessTokenTtlSeconds,
      ...(record.refreshToken === "" ? {} : { refresh_token: record.refreshToken }),
      created_at: Math.floor(record.createdAt / 1000),
      scope: record.scope,
    });
  }

  return route;
}

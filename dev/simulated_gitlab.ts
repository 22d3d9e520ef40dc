/**
 * A simulated GitLab for the demo and for end-to-end tests: the OAuth device authorization grant,
 * the refresh-token grant (with rotation), token revocation, `GET /api/v4/user`, and a small
 * "Device authorization" page where a person approves or denies a user code.
 *
 * Development only: nothing under src/ imports this module. State lives in memory and dies with
 * the server. Test controls (`approve`, `failNext`, `calls`, ...) let a test drive the flow
 * without a browser and inject the failures a real instance produces now and then.
 */

/** An endpoint `failNext` can make fail; `token` is the device-code grant, `refresh` the other. */
export type SimulatedEndpoint = "authorize_device" | "token" | "refresh" | "user";

/**
 * How the next request to an endpoint fails: an HTTP 500 or 429, a 200 whose body is not JSON,
 * a 200 whose body never comes so the client times out (`timeout`), a token response without
 * `refresh_token` (`token`/`refresh` only), or an RFC 8628 `slow_down` (`token` only).
 */
export type SimulatedFailure =
  | "500"
  | "429"
  | "malformed"
  | "timeout"
  | "no_refresh_token"
  | "slow_down";

/** A GitLab account known to the simulation. */
export interface SimulatedUser {
  id: number;
  username: string;
  name: string;
}

/** A token pair the simulation issued. */
export interface SimulatedTokens {
  accessToken: string;
  refreshToken: string;
  /** Lifetime of the access token, in seconds. */
  expiresIn: number;
}

/** How many requests each endpoint has received, failed ones included. */
export interface SimulatedGitLabCalls {
  /** `POST /oauth/authorize_device` */
  authorizeDevice: number;
  /** `POST /oauth/token` with the device-code grant. */
  deviceToken: number;
  /** `POST /oauth/token` with the refresh-token grant. */
  refresh: number;
  /** `GET /api/v4/user` */
  user: number;
  /** `POST /oauth/revoke` */
  revoke: number;
  /** `GET` or `POST /oauth/device` (the verification page). */
  devicePage: number;
}

/** Options of `startSimulatedGitLab`. */
export interface SimulatedGitLabOptions {
  /** 0 (the default) picks a free port. */
  port?: number;
  /** Defaults to 127.0.0.1. */
  hostname?: string;
  /** Lifetime of issued access tokens; defaults to 7200 like GitLab. */
  accessTokenTtlSeconds?: number;
  /** Lifetime of device codes; defaults to 300. */
  deviceExpiresInSeconds?: number;
  /** Polling interval announced by the device authorization endpoint; defaults to 5. */
  interval?: number;
  /** When set, only this OAuth application id is accepted; otherwise any non-empty one. */
  clientId?: string;
  /** Accounts; the first one approves on the verification page. Defaults to ada (4242). */
  users?: SimulatedUser[];
}

/** A running simulated GitLab and its test controls. */
export interface SimulatedGitLab {
  /** The origin it listens on, e.g. `http://127.0.0.1:40123`. */
  readonly url: URL;
  /** Requests received per endpoint. */
  readonly calls: SimulatedGitLabCalls;
  /** Known accounts (mutable); `users[0]` is the default. */
  readonly users: SimulatedUser[];
  /** Every token revoked through `POST /oauth/revoke` or `revoke()`. */
  readonly revokedTokens: Set<string>;
  /** Approves a pending user code as `userId` (default: the first user); throws if it cannot. */
  approve(userCode: string, userId?: number): void;
  /** Denies a pending user code; throws if it cannot. */
  deny(userCode: string): void;
  /** Makes a user code's device code expired at once; throws if the code is unknown. */
  expireDevice(userCode: string): void;
  /** The user code of the most recent device authorization, if any. */
  lastUserCode(): string | undefined;
  /** Queues a failure for the next request to `endpoint` (first queued, first used). */
  failNext(endpoint: SimulatedEndpoint, mode: SimulatedFailure): void;
  /**
   * Issues a token pair directly, as if `userId` (default: the first user) had signed in; any
   * accepted client id may refresh it.
   */
  issueTokens(userId?: number): SimulatedTokens;
  /** Revokes an access or refresh token (and its pair), as `POST /oauth/revoke` does. */
  revoke(token: string): void;
  /** Stops the server; requests left hanging by `timeout` are ended first. Idempotent. */
  close(): Promise<void>;
}

type DeviceStatus = "pending" | "approved" | "denied" | "consumed";

interface DeviceRecord {
  deviceCode: string;
  userCode: string;
  clientId: string;
  scope: string;
  expiresAt: number;
  status: DeviceStatus;
  userId?: number;
}

interface TokenRecord {
  accessToken: string;
  /** Empty when none was issued. */
  refreshToken: string;
  userId: number;
  clientId: string;
  scope: string;
  createdAt: number;
  expiresAt: number;
  revoked: boolean;
}

const DEFAULT_USER: SimulatedUser = { id: 4242, username: "ada", name: "Ada Lovelace" };
const DEFAULT_SCOPE = "read_user";
const DEVICE_CODE_GRANT_TYPE = "urn:ietf:params:oauth:grant-type:device_code";
const USER_CODE_LETTERS = "BCDFGHJKLMNPQRSTVWXZ";
const USER_CODE_DIGITS = "0123456789";

const FAILURES_BY_ENDPOINT: Record<SimulatedEndpoint, readonly SimulatedFailure[]> = {
  authorize_device: ["500", "429", "malformed", "timeout"],
  token: ["500", "429", "malformed", "timeout", "no_refresh_token", "slow_down"],
  refresh: ["500", "429", "malformed", "timeout", "no_refresh_token"],
  user: ["500", "429", "malformed", "timeout"],
};

/** Starts a simulated GitLab on 127.0.0.1 (a random port unless `port` is given). */
export function startSimulatedGitLab(options: SimulatedGitLabOptions = {}): SimulatedGitLab {
  const hostname = options.hostname ?? "127.0.0.1";
  const accessTokenTtlSeconds = options.accessTokenTtlSeconds ?? 7200;
  const deviceExpiresInSeconds = options.deviceExpiresInSeconds ?? 300;
  const interval = options.interval ?? 5;
  const users: SimulatedUser[] = (options.users ?? [DEFAULT_USER]).map((user) => ({ ...user }));
  if (users.length === 0) throw new TypeError("users must not be empty");

  const calls: SimulatedGitLabCalls = {
    authorizeDevice: 0,
    deviceToken: 0,
    refresh: 0,
    user: 0,
    revoke: 0,
    devicePage: 0,
  };
  const revokedTokens = new Set<string>();
  const devicesByCode = new Map<string, DeviceRecord>();
  const devicesByUserCode = new Map<string, DeviceRecord>();
  const tokensByAccess = new Map<string, TokenRecord>();
  const tokensByRefresh = new Map<string, TokenRecord>();
  const failures: Record<SimulatedEndpoint, SimulatedFailure[]> = {
    authorize_device: [],
    token: [],
    refresh: [],
    user: [],
  };
  let latestUserCode: string | undefined;
  const stalledBodies = new Set<() => void>();

  const server = Deno.serve(
    { port: options.port ?? 0, hostname, onListen() {} },
    (request) => route(request),
  );
  const url = new URL(`http://${hostname.includes(":") ? `[${hostname}]` : hostname}`);
  url.port = String(server.addr.port);

  // --- state helpers ---------------------------------------------------------------------

  function findUser(userId: number): SimulatedUser {
    const user = users.find((candidate) => candidate.id === userId);
    if (user === undefined) throw new Error(`simulated GitLab: no user with id ${userId}`);
    return user;
  }

  function findDevice(userCode: string): DeviceRecord | undefined {
    return devicesByUserCode.get(normalizeUserCode(userCode));
  }

  function isExpired(device: DeviceRecord): boolean {
    return Date.now() >= device.expiresAt;
  }

  function issue(userId: number, clientId: string, scope: string, withRefresh = true): TokenRecord {
    const now = Date.now();
    const record: TokenRecord = {
      accessToken: randomHex(32),
      refreshToken: withRefresh ? randomHex(32) : "",
      userId,
      clientId,
      scope,
      createdAt: now,
      expiresAt: now + accessTokenTtlSeconds * 1000,
      revoked: false,
    };
    tokensByAccess.set(record.accessToken, record);
    if (record.refreshToken !== "") tokensByRefresh.set(record.refreshToken, record);
    return record;
  }

  function revokeRecord(record: TokenRecord): void {
    record.revoked = true;
    tokensByAccess.delete(record.accessToken);
    tokensByRefresh.delete(record.refreshToken);
  }

  type Decision = "approved" | "denied" | "unknown" | "expired" | "used";

  function decide(userCode: string, approve: boolean, userId: number): Decision {
    const device = findDevice(userCode);
    if (device === undefined) return "unknown";
    if (device.status !== "pending") return "used";
    if (isExpired(device)) return "expired";
    if (approve) {
      findUser(userId);
      device.status = "approved";
      device.userId = userId;
      return "approved";
    }
    device.status = "denied";
    return "denied";
  }

  // --- routing -----------------------------------------------------------------------------

  async function route(request: Request): Promise<Response> {
    const { pathname } = new URL(request.url);
    const method = request.method;
    if (pathname === "/oauth/authorize_device" && method === "POST") {
      return await authorizeDevice(request);
    }
    if (pathname === "/oauth/token" && method === "POST") return await token(request);
    if (pathname === "/oauth/revoke" && method === "POST") return await revokeEndpoint(request);
    if (pathname === "/api/v4/user" && method === "GET") return currentUser(request);
    if (pathname === "/oauth/device" && method === "GET") return devicePage(request);
    if (pathname === "/oauth/device" && method === "POST") return await deviceDecision(request);
    await request.body?.cancel();
    return json(404, { message: "404 Not Found" });
  }

  /** Answers an injected failure, or undefined when none is queued (or it is handled later). */
  function injected(
    endpoint: SimulatedEndpoint,
    handledLater: readonly SimulatedFailure[] = [],
  ): Response | SimulatedFailure | undefined {
    const mode = failures[endpoint].shift();
    switch (mode) {
      case undefined:
        return undefined;
      case "500":
        return json(500, { message: "500 Internal Server Error" });
      case "429":
        return new Response("Retry later\n", {
          status: 429,
          headers: { "Content-Type": "text/plain", "Retry-After": "1" },
        });
      case "malformed":
        return new Response("<!DOCTYPE html><p>We're sorry, something went wrong.</p>", {
          status: 200,
          headers: { "Content-Type": "text/html; charset=utf-8" },
        });
      case "timeout":
        return stalled();
      default:
        if (handledLater.includes(mode)) return mode;
        return json(500, { message: "500 Internal Server Error" });
    }
  }

  /**
   * A 200 whose body never arrives: the client sees headers, then nothing until its timeout.
   * (Waiting before the headers would need `request.signal` to notice the client leaving, and
   * Deno warns about that signal's legacy semantics.) The server cancels the body when the
   * client disconnects; `close()` ends the ones still open.
   */
  function stalled(): Response {
    let end = () => {};
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        end = () => {
          stalledBodies.delete(end);
          try {
            controller.close();
          } catch {
            // Already closed or cancelled.
          }
        };
        stalledBodies.add(end);
      },
      cancel() {
        stalledBodies.delete(end);
      },
    });
    return new Response(body, {
      status: 200,
      headers: { "Content-Type": "application/json; charset=utf-8" },
    });
  }

  async function authorizeDevice(request: Request): Promise<Response> {
    calls.authorizeDevice++;
    const form = await readForm(request);
    const failure = injected("authorize_device");
    if (failure instanceof Response) return failure;
    const clientId = form.get("client_id") ?? "";
    if (!isKnownClient(clientId)) return invalidClient();
    let userCode: string;
    do userCode = newUserCode(); while (devicesByUserCode.has(normalizeUserCode(userCode)));
    const device: DeviceRecord = {
      deviceCode: randomHex(32),
      userCode,
      clientId,
      scope: form.get("scope")?.trim() || DEFAULT_SCOPE,
      expiresAt: Date.now() + deviceExpiresInSeconds * 1000,
      status: "pending",
    };
    devicesByCode.set(device.deviceCode, device);
    devicesByUserCode.set(normalizeUserCode(userCode), device);
    latestUserCode = userCode;
    const verificationUri = new URL("/oauth/device", url);
    const verificationUriComplete = new URL(verificationUri);
    verificationUriComplete.searchParams.set("user_code", userCode);
    return json(200, {
      device_code: device.deviceCode,
      user_code: userCode,
      verification_uri: verificationUri.href,
      verification_uri_complete: verificationUriComplete.href,
      expires_in: deviceExpiresInSeconds,
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
    const failure = injected("token", ["no_refresh_token", "slow_down"]);
    if (failure instanceof Response) return failure;
    if (failure === "slow_down") {
      return oauthError(400, "slow_down", "The client is polling too quickly.");
    }
    const clientId = form.get("client_id") ?? "";
    if (!isKnownClient(clientId)) return invalidClient();
    const deviceCode = form.get("device_code");
    if (!deviceCode) {
      return oauthError(400, "invalid_request", "Missing required parameter: device_code.");
    }
    const device = devicesByCode.get(deviceCode);
    if (device === undefined || device.status === "consumed" || device.clientId !== clientId) {
      return invalidGrant();
    }
    if (isExpired(device)) {
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
    device.status = "consumed";
    const record = issue(device.userId!, clientId, device.scope, failure !== "no_refresh_token");
    return tokenResponse(record);
  }

  function refreshGrant(form: URLSearchParams): Response {
    const failure = injected("refresh", ["no_refresh_token"]);
    if (failure instanceof Response) return failure;
    const clientId = form.get("client_id") ?? "";
    if (!isKnownClient(clientId)) return invalidClient();
    const refreshToken = form.get("refresh_token");
    if (!refreshToken) {
      return oauthError(400, "invalid_request", "Missing required parameter: refresh_token.");
    }
    const old = tokensByRefresh.get(refreshToken);
    if (old === undefined || old.revoked) return invalidGrant();
    if (old.clientId !== "" && old.clientId !== clientId) return invalidGrant();
    // GitLab rotates: the used refresh token and its access token die with this answer.
    revokeRecord(old);
    const record = issue(old.userId, clientId, old.scope, failure !== "no_refresh_token");
    return tokenResponse(record);
  }

  async function revokeEndpoint(request: Request): Promise<Response> {
    calls.revoke++;
    const form = await readForm(request);
    const value = form.get("token");
    if (value) revokeToken(value);
    return json(200, {});
  }

  function revokeToken(value: string): void {
    revokedTokens.add(value);
    const record = tokensByAccess.get(value) ?? tokensByRefresh.get(value);
    if (record !== undefined) revokeRecord(record);
  }

  function currentUser(request: Request): Response {
    calls.user++;
    const failure = injected("user");
    if (failure instanceof Response) return failure;
    const match = /^Bearer\s+(\S+)$/i.exec(request.headers.get("Authorization") ?? "");
    const record = match === null ? undefined : tokensByAccess.get(match[1]);
    if (record === undefined || record.revoked || Date.now() >= record.expiresAt) {
      return json(401, { message: "401 Unauthorized" });
    }
    const user = users.find((candidate) => candidate.id === record.userId);
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

  // --- verification page ---------------------------------------------------------------

  function devicePage(request: Request): Response {
    calls.devicePage++;
    const userCode = new URL(request.url).searchParams.get("user_code") ?? "";
    return html(200, "Device authorization", deviceForm(userCode));
  }

  async function deviceDecision(request: Request): Promise<Response> {
    calls.devicePage++;
    const form = await readForm(request);
    const userCode = (form.get("user_code") ?? "").trim();
    const action = form.get("action");
    if (userCode === "") {
      return html(
        400,
        "Device authorization",
        deviceForm("", "Enter the code shown on your device."),
      );
    }
    if (action !== "approve" && action !== "deny") {
      return html(400, "Device authorization", deviceForm(userCode, "Choose Approve or Deny."));
    }
    const outcome = decide(userCode, action === "approve", users[0].id);
    switch (outcome) {
      case "approved":
        return html(
          200,
          "Device approved",
          `<h1>Device approved</h1>
      <p role="status">Device approved — you can return to the application.</p>
      <p class="muted">Signed in as <strong>${escapeHtml(users[0].username)}</strong>.</p>`,
        );
      case "denied":
        return html(
          200,
          "Device denied",
          `<h1>Device denied</h1>
      <p role="status">Device denied — the application was not given access to your account.</p>`,
        );
      case "unknown":
        return html(
          404,
          "Device authorization",
          deviceForm(
            userCode,
            `Unknown user code “${escapeHtml(userCode)}”. Check the code and try again.`,
          ),
        );
      case "expired":
        return html(
          400,
          "Device authorization",
          deviceForm(userCode, "This code has expired. Start again on your device."),
        );
      case "used":
        return html(
          400,
          "Device authorization",
          deviceForm(userCode, "This code has already been used."),
        );
    }
  }

  /** `message` is HTML already escaped by the caller. */
  function deviceForm(userCode: string, message?: string): string {
    const user = users[0];
    return `<h1>Device authorization</h1>
      <p>Enter the code displayed on your device to connect it to your account,
        <strong>${escapeHtml(user.username)}</strong>.</p>
      ${message === undefined ? "" : `<p class="error" role="alert">${message}</p>`}
      <form method="post" action="/oauth/device">
        <label for="user_code">User code</label>
        <input id="user_code" name="user_code" value="${escapeHtml(userCode)}" autocomplete="off"
          autocapitalize="characters" spellcheck="false" placeholder="ABCD-1234" required>
        <div class="actions">
          <button type="submit" name="action" value="approve">Approve</button>
          <button type="submit" name="action" value="deny" class="secondary">Deny</button>
        </div>
      </form>`;
  }

  // --- public handle ---------------------------------------------------------------------

  let closed: Promise<void> | undefined;

  return {
    url,
    calls,
    users,
    revokedTokens,
    approve(userCode, userId = users[0].id) {
      const outcome = decide(userCode, true, userId);
      if (outcome !== "approved") {
        throw new Error(`simulated GitLab: cannot approve ${userCode}: ${outcome}`);
      }
    },
    deny(userCode) {
      const outcome = decide(userCode, false, users[0].id);
      if (outcome !== "denied") {
        throw new Error(`simulated GitLab: cannot deny ${userCode}: ${outcome}`);
      }
    },
    expireDevice(userCode) {
      const device = findDevice(userCode);
      if (device === undefined) throw new Error(`simulated GitLab: unknown user code ${userCode}`);
      device.expiresAt = Date.now() - 1;
    },
    lastUserCode: () => latestUserCode,
    failNext(endpoint, mode) {
      if (!FAILURES_BY_ENDPOINT[endpoint]?.includes(mode)) {
        throw new TypeError(`simulated GitLab: ${endpoint} cannot fail with ${mode}`);
      }
      failures[endpoint].push(mode);
    },
    issueTokens(userId = users[0].id) {
      findUser(userId);
      // Bound to no client: whichever client id refreshes it is accepted.
      const record = issue(userId, options.clientId ?? "", DEFAULT_SCOPE);
      return {
        accessToken: record.accessToken,
        refreshToken: record.refreshToken,
        expiresIn: accessTokenTtlSeconds,
      };
    },
    revoke: revokeToken,
    close() {
      closed ??= (async () => {
        for (const end of [...stalledBodies]) end();
        await server.shutdown();
      })();
      return closed;
    },
  };

  function isKnownClient(clientId: string): boolean {
    return clientId !== "" && (options.clientId === undefined || clientId === options.clientId);
  }

  function tokenResponse(record: TokenRecord): Response {
    return json(200, {
      access_token: record.accessToken,
      token_type: "Bearer",
      expires_in: accessTokenTtlSeconds,
      ...(record.refreshToken === "" ? {} : { refresh_token: record.refreshToken }),
      created_at: Math.floor(record.createdAt / 1000),
      scope: record.scope,
    });
  }
}

// --- helpers -------------------------------------------------------------------------------

/** Escapes text for HTML element content and quoted attribute values. */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (char) => `&#${char.charCodeAt(0)};`);
}

function normalizeUserCode(userCode: string): string {
  return userCode.toUpperCase().replace(/[^A-Z0-9]/g, "");
}

function newUserCode(): string {
  const pick = (alphabet: string, count: number) =>
    Array.from(crypto.getRandomValues(new Uint32Array(count)), (n) => alphabet[n % alphabet.length])
      .join("");
  return `${pick(USER_CODE_LETTERS, 4)}-${pick(USER_CODE_DIGITS, 4)}`;
}

function randomHex(bytes: number): string {
  return Array.from(
    crypto.getRandomValues(new Uint8Array(bytes)),
    (b) => b.toString(16).padStart(2, "0"),
  )
    .join("");
}

async function readForm(request: Request): Promise<URLSearchParams> {
  const type = request.headers.get("Content-Type") ?? "";
  const text = await request.text();
  if (type.includes("application/json")) {
    const params = new URLSearchParams();
    try {
      const value: unknown = JSON.parse(text);
      if (typeof value === "object" && value !== null) {
        for (const [key, field] of Object.entries(value)) {
          if (typeof field === "string") params.set(key, field);
        }
      }
    } catch {
      // An unreadable body is an empty form, as far as the simulation cares.
    }
    return params;
  }
  return new URLSearchParams(text);
}

function json(status: number, body: unknown): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: { "Content-Type": "application/json; charset=utf-8", "Cache-Control": "no-store" },
  });
}

function oauthError(status: number, error: string, description: string): Response {
  return json(status, { error, error_description: description });
}

function invalidGrant(): Response {
  return oauthError(
    400,
    "invalid_grant",
    "The provided authorization grant is invalid, expired, revoked, does not match the redirection URI used in the authorization request, or was issued to another client.",
  );
}

function invalidClient(): Response {
  return oauthError(
    401,
    "invalid_client",
    "Client authentication failed due to unknown client, no client authentication included, or unsupported authentication method.",
  );
}

/** `body` is HTML the caller has escaped. */
function html(status: number, title: string, body: string): Response {
  const page = `<!DOCTYPE html>
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
  return new Response(page, {
    status,
    headers: {
      "Content-Type": "text/html; charset=utf-8",
      "Cache-Control": "no-store",
      "Content-Security-Policy":
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
    },
  });
}

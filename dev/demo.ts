/**
 * `deno task demo`: the service, a simulated GitLab, an MCP server behind the service's gateway
 * at `/mcp` and a tiny example client, all on loopback, so a newcomer can watch a whole sign-in,
 * and try MCP clients, without a GitLab account. `PORT` sets the service's port (0: any free).
 * `GITLAB_SIGN_IN=redirect deno task demo` shows the redirect sign-in instead of the device flow.
 *
 * Development only. Production starts with `deno task start` and a real GitLab.
 */

import { type RunningService, startService } from "../main.ts";
import { ConfigError } from "../src/app/config.ts";
import { unbracketed } from "../src/config/parsers.ts";
import { randomToken, sha256Base64Url } from "../src/crypto.ts";
import { createLogger } from "../src/logger.ts";
import { startDemoDocsServer } from "./demo_docs_server.ts";
import { startDemoMcpServer } from "./demo_mcp_server.ts";
import { startSimulatedGitLab } from "./simulated_gitlab.ts";

// A signal from the first moment stops the demo cleanly: once everything is up at once, before
// that as soon as it is (the service prints its listening line before the rest is ready).
const stopping: { requested: boolean; now?: () => Promise<void> } = { requested: false };
const onSignal = () => {
  stopping.requested = true;
  stopping.now?.();
};
Deno.addSignalListener("SIGINT", onSignal);
Deno.addSignalListener("SIGTERM", onSignal);

const env = Deno.env.toObject();
const host = unbracketed("HOST", env.HOST ?? "127.0.0.1");
const port = demoPort(env, host);
const gitlab = startSimulatedGitLab({ clientId: "demo-gitlab-app" });
const mcp = startDemoMcpServer(gitlab.url, { withRefusedTool: true });
const docs = startDemoDocsServer(gitlab.url);
// The servers file names the docs server's port, known only now, so it is written to a folder
// of the demo's own; the service reads it once, at start, so the folder goes as soon as the
// service has started (or failed to): no exit path, a crash or SIGKILL included, leaves it.
const ownFiles = await Deno.makeTempDir({ prefix: "demo-" });
const serversFile = env.MCP_SERVERS_FILE ?? await writeDemoServers(ownFiles, docs.url);
/**
 * The demo's MCP_POLICY_FILE: `delete_project` only for maintainers of `demo/admins`, whom the
 * simulated GitLab has none of, so a newcomer sees a tool refused (and left out of the list).
 */
const policyFile = env.MCP_POLICY_FILE ?? new URL("demo_policy.json", import.meta.url).pathname;
let service: RunningService;
try {
  service = await startService({
    KV_PATH: ":memory:",
    ACCESS_TOKEN_TTL: "3600",
    ...env,
    PORT: port,
    HOST: host,
    GITLAB_URL: gitlab.url.href,
    GITLAB_CLIENT_ID: "demo-gitlab-app",
    JWT_SECRET: randomToken(32),
    MCP_UPSTREAM_URL: mcp.url,
    MCP_POLICY_FILE: policyFile,
    MCP_SERVERS_FILE: serversFile,
    // The redirect sign-in needs BASE_URL (GitLab's callback URL is built from it).
    ...(env.GITLAB_SIGN_IN === "redirect" && !env.BASE_URL
      ? { BASE_URL: browserUrl(host, port) }
      : {}),
  }, createLogger());
} catch (error) {
  await Deno.remove(ownFiles, { recursive: true });
  if (!(error instanceof ConfigError)) throw error;
  // One line, no stack trace: most often PORT is taken by an earlier demo still running.
  await Deno.stderr.write(new TextEncoder().encode(`demo: ${error.message}\n`));
  await mcp.close();
  await docs.close();
  await gitlab.close();
  Deno.exit(1);
}
await Deno.remove(ownFiles, { recursive: true });

/** The demo's MCP_SERVERS_FILE: the docs server at `/mcp/docs`, beside the demo's `/mcp`. */
async function writeDemoServers(dir: string, docsUrl: string): Promise<string> {
  const path = `${dir}/servers.json`;
  await Deno.writeTextFile(path, JSON.stringify({ servers: [{ name: "docs", url: docsUrl }] }));
  return path;
}

/**
 * PORT (default 8000). The redirect sign-in needs its BASE_URL before the service listens, so
 * there `0` (any free port) is resolved here.
 */
function demoPort(env: Record<string, string>, host: string): string {
  const port = env.PORT ?? "8000";
  if (port !== "0" || env.GITLAB_SIGN_IN !== "redirect" || env.BASE_URL) return port;
  const listener = Deno.listen({ hostname: host, port: 0 });
  listener.close();
  return String(listener.addr.port);
}

/**
 * The URL a browser on this machine opens the demo at: a wildcard HOST (every interface) is
 * reached on loopback, and an IPv6 address goes in brackets.
 */
function browserUrl(host: string, port: string): string {
  const reached = host === "0.0.0.0" ? "127.0.0.1" : host === "::" ? "::1" : host;
  return `http://${reached.includes(":") ? `[${reached}]` : reached}:${port}`;
}

/** PKCE verifiers of sign-ins the example client started, by `state`. */
const pending = new Map<string, string>();

const client = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
  const url = new URL(request.url);
  const callback = `${url.origin}/callback`;
  if (url.pathname === "/") {
    const state = randomToken(16);
    const verifier = randomToken(32);
    pending.set(state, verifier);
    const authorize = new URL(`${service.url}/authorize`);
    authorize.search = new URLSearchParams({
      response_type: "code",
      client_id: clientId,
      redirect_uri: callback,
      code_challenge: sha256Base64Url(verifier),
      code_challenge_method: "S256",
      state,
      scope: "mcp:tools mcp:resources",
    }).toString();
    return Response.redirect(authorize.href, 302);
  }
  if (url.pathname === "/callback") {
    const state = url.searchParams.get("state") ?? "";
    const verifier = pending.get(state);
    pending.delete(state);
    if (!verifier) return page("Unknown or reused state", "<p>Start again.</p>");
    const refusal = url.searchParams.get("error");
    if (refusal !== null) return refused(refusal, url.searchParams.get("error_description"));
    const response = await fetch(`${service.url}/token`, {
      method: "POST",
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({
        grant_type: "authorization_code",
        code: url.searchParams.get("code") ?? "",
        code_verifier: verifier,
        redirect_uri: callback,
      }),
    });
    const body = await response.json();
    const claims = body.access_token
      ? JSON.parse(new TextDecoder().decode(Uint8Array.fromBase64(
        body.access_token.split(".")[1],
        { alphabet: "base64url" },
      )))
      : undefined;
    return page(
      response.ok ? "Signed in" : `Token exchange failed (${response.status})`,
      `<p>The example client exchanged the code at <code>POST /token</code>.</p>
       <h2>Token response</h2><pre>${escape(JSON.stringify(body, null, 2))}</pre>
       ${
        claims
          ? `<h2>Access-token claims</h2><pre>${escape(JSON.stringify(claims, null, 2))}</pre>`
          : ""
      }
       <p><a href="/">Sign in again</a></p>`,
    );
  }
  return new Response("Not found", { status: 404 });
});

/**
 * The authorization server sent an error instead of a code (RFC 6749 §4.1.2.1): Cancel, Deny at
 * GitLab, a GitLab failure. There is no code to exchange; say what happened.
 */
function refused(error: string, description: string | null): Response {
  const why = error === "access_denied"
    ? "You cancelled the sign-in, or denied it at GitLab."
    : "The sign-in did not complete.";
  return page(
    error === "access_denied" ? "Sign-in cancelled" : "Sign-in failed",
    `<p>${why} The service answered <code>error=${escape(error)}</code>${
      description ? ` (${escape(description)})` : ""
    }; no code, so nothing to exchange.</p>
     <p><a href="/">Sign in again</a></p>`,
  );
}

function page(title: string, body: string): Response {
  return new Response(
    `<!doctype html><html lang="en"><meta charset="utf-8">
     <meta name="viewport" content="width=device-width, initial-scale=1">
     <title>${escape(title)}</title>
     <style>body{font:16px/1.5 system-ui,sans-serif;max-width:46rem;margin:2rem auto;padding:0 1rem}
     pre{background:#f4f4f5;padding:1rem;overflow:auto;border-radius:8px}</style>
     <h1>${escape(title)}</h1>${body}</html>`,
    { headers: { "Content-Type": "text/html; charset=utf-8" } },
  );
}

function escape(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

const clientUrl = `http://127.0.0.1:${client.addr.port}/`;

const stop = async () => {
  await service.shutdown();
  await client.shutdown();
  await mcp.close();
  await docs.close();
  await gitlab.close();
  Deno.exit(0);
};
stopping.now = stop;
if (stopping.requested) await stop();

const clientId = await registerExampleClient(`${clientUrl}callback`);

/**
 * Registers the example client as MCP clients do (RFC 7591), so the sign-in page names it
 * instead of warning of an unknown id any app could send. Where registration is closed
 * (`ALLOWED_REDIRECT_URIS` without loopback), it goes on unregistered and says so.
 */
async function registerExampleClient(redirectUri: string): Promise<string> {
  const response = await fetch(`${service.url}/register`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({
      client_name: "Demo example client",
      redirect_uris: [redirectUri],
      token_endpoint_auth_method: "none",
    }),
  });
  const body = await response.json();
  if (response.status === 201) return body.client_id;
  await Deno.stderr.write(new TextEncoder().encode(
    `demo: the example client could not register (${response.status} ${body.error}): ` +
      "its sign-in page will call it unknown\n",
  ));
  return "demo-client";
}
const banner = [
  "",
  "  Demo running — everything is on this machine, nothing reaches gitlab.com.",
  "",
  `  1. Open the example client:   ${clientUrl}`,
  "     It sends you to the service's /authorize page with a fresh PKCE challenge.",
  ...(service.config.upstream.signIn === "redirect"
    ? [
      '  2. Click "Continue with GitLab" on the consent page (Cancel to see a refusal): a',
      `     simulated GitLab (${gitlab.url.origin}) asks; click Authorize (or Deny).`,
      "  3. GitLab returns you to the service, which sends you on to the client with a code.",
      "     Sign in again: the consent is remembered, you go straight to GitLab.",
    ]
    : [
      `  2. Click "Open GitLab" on that page: a simulated GitLab (${gitlab.url.origin}) asks for`,
      "     the code; click Authorize (or Deny: the first tab then offers",
      '     "Return to the application", and the client shows the refusal).',
      "  3. Back on the first tab, the page redirects to the client, which redeems the code.",
    ]),
  "",
  `  Or connect an MCP client to ${service.url}/mcp (tools: whoami, list_projects):`,
  `  delete_project exists too, but the policy (${policyFile}) refuses it to you.`,
  `    npx @modelcontextprotocol/inspector            (Streamable HTTP, URL ${service.url}/mcp)`,
  `    claude mcp add --transport http demo ${service.url}/mcp`,
  `    npx mcp-remote ${service.url}/mcp`,
  `  A second server is at ${service.url}/mcp/docs (tool: docs_reader; MCP revisions`,
  "  2025-11-25 and 2026-07-28): a token for one server is refused at the other, so a client",
  "  signs in to each.",
  "",
  `  Service: ${service.url}   Simulated GitLab: ${gitlab.url.origin}   MCP server: ${mcp.url}`,
  "  Ctrl-C stops all.",
  "",
].join("\n");
await Deno.stdout.write(new TextEncoder().encode(banner + "\n"));

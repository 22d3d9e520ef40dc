/**
 * Builds the fetch handler from explicit dependencies: the route table, the one place errors
 * are rendered, security headers and one log line per request.
 */

import { type AppDeps, deriveBaseUrl, type RequestContext } from "./context.ts";
import { OAuthError } from "./errors.ts";
import { errorResponse } from "./http.ts";
import { route, type Routes } from "./router.ts";
import { handleAuthorize } from "./routes/authorize.ts";
import { handlePoll } from "./routes/poll.ts";
import { handleToken } from "./routes/token.ts";

/** The handler `Deno.serve` runs. */
export type FetchHandler = (request: Request, info?: Deno.ServeHandlerInfo) => Promise<Response>;

const routes: Routes<RequestContext> = {
  "/authorize": { GET: handleAuthorize },
  "/oauth/poll": { GET: handlePoll },
  "/token": { POST: handleToken },
};

const SECURITY_HEADERS = {
  "X-Content-Type-Options": "nosniff",
  "X-Frame-Options": "DENY",
  "Referrer-Policy": "no-referrer",
} as const;

/** Creates the service's request handler. */
export function createApp(deps: AppDeps): FetchHandler {
  return async (request) => {
    const started = performance.now();
    const requestId = crypto.randomUUID();
    const url = new URL(request.url);
    let response: Response;
    try {
      const ctx: RequestContext = {
        request,
        url,
        baseUrl: deriveBaseUrl(request, url, deps.config),
        deps,
        requestId,
      };
      response = await route(routes, request.method, url.pathname)(ctx);
    } catch (error) {
      response = renderError(error, deps, requestId);
    }
    for (const [name, value] of Object.entries(SECURITY_HEADERS)) {
      if (!response.headers.has(name)) response.headers.set(name, value);
    }
    response.headers.set("X-Request-Id", requestId);
    deps.logger.info("request", {
      requestId,
      method: request.method,
      path: url.pathname,
      status: response.status,
      ms: Math.round((performance.now() - started) * 10) / 10,
    });
    return response;
  };
}

function renderError(error: unknown, deps: AppDeps, requestId: string): Response {
  if (error instanceof OAuthError) return errorResponse(error);
  deps.logger.error("unhandled error", {
    requestId,
    error: error instanceof Error ? `${error.name}: ${error.message}` : String(error),
  });
  return errorResponse(new OAuthError(500, "server_error", "Internal server error"));
}

/** `GET /`: a short human-readable description (metadata's `service_documentation`). */

import type { RequestContext } from "../http/request_context.ts";
import type { Templates } from "../pages/mod.ts";

/** Serves the static home page. */
export function handleHome(
  ctx: RequestContext<{ templates: Pick<Templates, "homePage"> }>,
): Promise<Response> {
  const page = ctx.deps.templates.homePage;
  return Promise.resolve(
    new Response(page.html, {
      headers: {
        "Content-Type": "text/html; charset=utf-8",
        "Content-Security-Policy": page.contentSecurityPolicy,
        "Cache-Control": "public, max-age=3600",
      },
    }),
  );
}

/**
 * The MCP server behind the gateway in the bench: answers every POST with one fixed JSON-RPC
 * result (a `tools/call`'s), as cheaply as Deno can, so that the gateway case measures the gateway. It counts the
 * requests that carried the GitLab token header (the gateway must forward it) and prints the
 * count on SIGTERM.
 *
 * env: PORT, TOKEN_HEADER (default authorization)
 */

const port = Number(Deno.env.get("PORT") ?? "18092");
const tokenHeader = Deno.env.get("TOKEN_HEADER") ?? "authorization";
/** The answer to wrk.lua's `tools/call` of the tool `echo`. */
const body = JSON.stringify({
  jsonrpc: "2.0",
  id: 1,
  result: { content: [{ type: "text", text: "hello from wrk" }], isError: false },
});
let withToken = 0;

const server = Deno.serve({ port, hostname: "127.0.0.1", onListen() {} }, async (request) => {
  if (request.headers.has(tokenHeader)) withToken++;
  await request.body?.cancel();
  return new Response(body, { headers: { "content-type": "application/json" } });
});

Deno.addSignalListener("SIGTERM", async () => {
  // deno-lint-ignore no-console -- the bench reads this line from the log.
  console.log(JSON.stringify({ withToken }));
  await server.shutdown();
  Deno.exit(0);
});

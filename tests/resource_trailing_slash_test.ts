/**
 * An MCP client pointed at `…/mcp/` (a trailing slash) that validates RFC 9728 §3.3 to the
 * letter, as oauth4webapi does: the protected resource metadata it finds, by the well-known URI
 * with the path inserted (§3.1) or by the 401's `resource_metadata`, names the resource as the
 * client spelled it. The token it then asks for (`resource=…/mcp/`) is bound to that server's
 * canonical URL, good at `/mcp` and `/mcp/` and refused at every other server, over real HTTP
 * against the real app with two MCP servers (docs/mcp-clients.md "Resource indicators").
 */

import assert from "node:assert/strict";
import * as oauth from "oauth4webapi";
import { decodeJwt } from "jose";
import { exchange, issueCode, refresh } from "./_helpers.ts";
import { serveTestApp } from "./_served_app.ts";
import { echo, startScripted } from "./_gateway.ts";
import { mcpPostInit } from "./_service.ts";

/** oauth4webapi refuses http:// unless told; everything here is on loopback. */
const INSECURE = { [oauth.allowInsecureRequests]: true } as const;

/** The metadata of `resource` found as oauth4webapi finds it, with its §3.3 check. */
async function discovered(resource: string): Promise<oauth.ResourceServer> {
  const url = new URL(resource);
  return await oauth.processResourceDiscoveryResponse(
    url,
    await oauth.resourceDiscoveryRequest(url, INSECURE),
  );
}

/** The metadata the 401 at `resource` names, checked against the URL the client used (§3.3). */
async function challenged(resource: string): Promise<oauth.ResourceServer> {
  const refused = await fetch(resource, { method: "POST", body: "{}" });
  await refused.body?.cancel();
  assert.equal(refused.status, 401);
  const challenge = refused.headers.get("www-authenticate") ?? "";
  const metadataUrl = challenge.match(/resource_metadata="([^"]+)"/)?.[1];
  assert.ok(metadataUrl, challenge);
  return await oauth.processResourceDiscoveryResponse(
    new URL(resource),
    await fetch(metadataUrl, { headers: { Accept: "application/json" } }),
  );
}

async function statusAt(url: string, accessToken: string): Promise<number> {
  const response = await fetch(url, mcpPostInit(accessToken));
  await response.body?.cancel();
  return response.status;
}

Deno.test("trailing slash: oauth4webapi discovers …/mcp/ and …/mcp/docs/ (RFC 9728 §3.3); their tokens bind to their own server", async () => {
  const main = startScripted(echo);
  const docs = startScripted(echo);
  const dir = await Deno.makeTempDir();
  const file = `${dir}/servers.yaml`;
  await Deno.writeTextFile(file, `servers:\n  - name: docs\n    url: ${docs.url}\n`);
  const service = await serveTestApp({ MCP_UPSTREAM_URL: main.url, MCP_SERVERS_FILE: file });
  try {
    const t = service.current();
    const servers = [`${service.url}/mcp`, `${service.url}/mcp/docs`];
    for (const [index, canonical] of servers.entries()) {
      const other = servers[1 - index];
      // Without the slash, as before.
      assert.equal((await discovered(canonical)).resource, canonical);
      assert.equal((await challenged(canonical)).resource, canonical);

      const slashed = `${canonical}/`;
      const metadata = await discovered(slashed);
      assert.equal(metadata.resource, slashed);
      assert.deepEqual(metadata.authorization_servers, [service.url]);
      assert.equal((await challenged(slashed)).resource, slashed);

      // The client asks for the resource as its metadata names it.
      const code = await issueCode(t, { resource: metadata.resource });
      const issued = await (await exchange(t, code, { resource: metadata.resource })).json();
      assert.equal(decodeJwt(issued.access_token).resource, canonical, JSON.stringify(issued));
      const renewed = await (await refresh(t, issued.refresh_token, {
        resource: metadata.resource,
      })).json();
      assert.equal(decodeJwt(renewed.access_token).resource, canonical, JSON.stringify(renewed));
      for (const token of [issued.access_token, renewed.access_token]) {
        assert.equal(await statusAt(slashed, token), 200);
        assert.equal(await statusAt(canonical, token), 200);
        assert.equal(await statusAt(other, token), 401, `refused at ${other}`);
        assert.equal(await statusAt(`${other}/`, token), 401, `refused at ${other}/`);
      }
    }
  } finally {
    await service.close();
    await main.close();
    await docs.close();
    await Deno.remove(dir, { recursive: true });
  }
});

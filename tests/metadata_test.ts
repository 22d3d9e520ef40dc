/**
 * Discovery documents: authorization server metadata (RFC 8414) and the MCP server's protected
 * resource metadata (RFC 9728), in process over the real app.
 */

import assert from "node:assert/strict";
import { decodeJwt } from "jose";
import { issueTokens, type Json, TEST_BASE, type TestApp, withApp, withEnv } from "./_helpers.ts";

const AS_PATH = "/.well-known/oauth-authorization-server";
const PRM_PATH = "/.well-known/oauth-protected-resource";

async function getJson(t: TestApp, url: string): Promise<{ status: number; body: Json }> {
  const response = await t.app(new Request(url));
  assert.match(response.headers.get("content-type") ?? "", /^application\/json/);
  return { status: response.status, body: await response.json() };
}

function expectedAsMetadata(issuer: string): Json {
  return {
    issuer,
    authorization_endpoint: `${issuer}/authorize`,
    token_endpoint: `${issuer}/token`,
    registration_endpoint: `${issuer}/register`,
    revocation_endpoint: `${issuer}/revoke`,
    response_types_supported: ["code"],
    response_modes_supported: ["query"],
    grant_types_supported: [
      "authorization_code",
      "refresh_token",
      "urn:ietf:params:oauth:grant-type:device_code",
    ],
    code_challenge_methods_supported: ["S256"],
    token_endpoint_auth_methods_supported: ["none"],
    revocation_endpoint_auth_methods_supported: ["none"],
    scopes_supported: ["mcp:tools", "mcp:resources"],
    service_documentation: `${issuer}/`,
    authorization_response_iss_parameter_supported: true,
    client_id_metadata_document_supported: true,
    device_authorization_endpoint: `${issuer}/device_authorization`,
  };
}

Deno.test("AS metadata: exactly the documented fields, endpoints under the issuer", () =>
  withApp(async (t) => {
    const response = await t.app(new Request(`${TEST_BASE}${AS_PATH}`));
    assert.equal(response.status, 200);
    assert.match(response.headers.get("cache-control") ?? "", /max-age=\d+/);
    const body = await response.json();
    // deepEqual on a plain object also proves there is no field beyond these.
    assert.deepEqual(body, expectedAsMetadata(TEST_BASE));
  }));

Deno.test("AS metadata: issuer equals the iss of issued access tokens and PRM's authorization server", () =>
  withApp(async (t) => {
    const { body: metadata } = await getJson(t, `${TEST_BASE}${AS_PATH}`);
    const { body: prm } = await getJson(t, `${TEST_BASE}${PRM_PATH}`);
    const tokens = await issueTokens(t);
    assert.equal(decodeJwt(tokens.access_token).iss, metadata.issuer);
    assert.deepEqual(prm.authorization_servers, [metadata.issuer]);
  }));

Deno.test("AS metadata: without BASE_URL the issuer is the request origin, byte for byte as in tokens", () =>
  withEnv({ BASE_URL: "" }, async (t) => {
    const origin = "http://127.0.0.1:43210";
    const { body } = await getJson(t, `${origin}${AS_PATH}`);
    assert.deepEqual(body, expectedAsMetadata(origin));
    const { body: prm } = await getJson(t, `${origin}${PRM_PATH}/mcp`);
    assert.deepEqual(prm.authorization_servers, [origin]);
    assert.equal(prm.resource, `${origin}/mcp`);
    // Tokens minted through requests to another origin carry that origin, as its metadata says.
    const tokens = await issueTokens(t);
    const { body: other } = await getJson(t, `${TEST_BASE}${AS_PATH}`);
    assert.equal(decodeJwt(tokens.access_token).iss, other.issuer);
    assert.equal(other.issuer, TEST_BASE);
  }));

Deno.test("AS metadata: BASE_URL with a path is served at the path-inserted well-known URI", () =>
  withEnv({ BASE_URL: "https://x.test/auth/" }, async (t) => {
    const issuer = "https://x.test/auth";
    const { status, body } = await getJson(t, `https://x.test${AS_PATH}/auth`);
    assert.equal(status, 200);
    assert.deepEqual(body, expectedAsMetadata(issuer));
    assert.equal(body.authorization_endpoint, "https://x.test/auth/authorize");
  }));

Deno.test("AS metadata: a path suffix that is not the issuer's path → 404 JSON", () =>
  withEnv({ BASE_URL: "https://x.test/auth" }, async (t) => {
    for (const path of [`${AS_PATH}/other`, `${AS_PATH}/auth/extra`, `${AS_PATH}/au`]) {
      const { status, body } = await getJson(t, `https://x.test${path}`);
      assert.equal(status, 404, path);
      assert.equal(body.error, "invalid_request");
    }
  }));

Deno.test("AS metadata: not under BASE_URL's path, even where that path ends as the well-known one", () =>
  withEnv({ BASE_URL: "https://x.test/oauth-authorization-server" }, async (t) => {
    assert.equal(
      (await getJson(t, `https://x.test${AS_PATH}/oauth-authorization-server`)).status,
      200,
    );
    for (
      const path of [
        `/oauth-authorization-server${AS_PATH}`,
        `/oauth-authorization-server${PRM_PATH}`,
      ]
    ) {
      const { status, body } = await getJson(t, `https://x.test${path}`);
      assert.equal(status, 404, path);
      assert.equal(body.error, "invalid_request");
    }
  }));

Deno.test("AS metadata: issuer without a path refuses any path suffix with 404 JSON", () =>
  withApp(async (t) => {
    const { status, body } = await getJson(t, `${TEST_BASE}${AS_PATH}/mcp`);
    assert.equal(status, 404);
    assert.equal(body.error, "invalid_request");
  }));

Deno.test("AS metadata: POST → 405 with Allow", () =>
  withApp(async (t) => {
    const response = await t.app(new Request(`${TEST_BASE}${AS_PATH}`, { method: "POST" }));
    assert.equal(response.status, 405);
    assert.equal(response.headers.get("allow"), "GET, HEAD, OPTIONS");
    assert.equal((await response.json()).error, "invalid_request");
  }));

Deno.test("PRM: at the root and at the resource's path, exactly the documented fields", () =>
  withApp(async (t) => {
    const expected = {
      resource: `${TEST_BASE}/mcp`,
      authorization_servers: [TEST_BASE],
      scopes_supported: ["mcp:tools", "mcp:resources"],
      bearer_methods_supported: ["header"],
      resource_name: "MCP server (sign in with GitLab)",
    };
    for (const path of [PRM_PATH, `${PRM_PATH}/mcp`]) {
      const { status, body } = await getJson(t, `${TEST_BASE}${path}`);
      assert.equal(status, 200, path);
      assert.deepEqual(body, expected, path);
    }
  }));

Deno.test("PRM: a path suffix other than the resource's path → 404 JSON", () =>
  withApp(async (t) => {
    for (const path of [`${PRM_PATH}/other`, `${PRM_PATH}/mcp/extra`, `${PRM_PATH}/mc`]) {
      const { status, body } = await getJson(t, `${TEST_BASE}${path}`);
      assert.equal(status, 404, path);
      assert.equal(body.error, "invalid_request");
      assert.equal(typeof body.error_description, "string");
    }
  }));

Deno.test("PRM: MCP_RESOURCE_URL is the resource, its trailing slash removed, its path served", () =>
  withEnv({ MCP_RESOURCE_URL: "https://mcp.example/api/v1/" }, async (t) => {
    const { status, body } = await getJson(t, `${TEST_BASE}${PRM_PATH}/api/v1`);
    assert.equal(status, 200);
    assert.equal(body.resource, "https://mcp.example/api/v1");
    assert.deepEqual(body.authorization_servers, [TEST_BASE]);
    assert.equal((await getJson(t, `${TEST_BASE}${PRM_PATH}`)).body.resource, body.resource);
    assert.equal((await getJson(t, `${TEST_BASE}${PRM_PATH}/mcp`)).status, 404);
  }));

Deno.test("PRM: an MCP_RESOURCE_URL without a path is served only at the bare well-known URI", () =>
  withEnv({ MCP_RESOURCE_URL: "https://mcp.example/" }, async (t) => {
    const { status, body } = await getJson(t, `${TEST_BASE}${PRM_PATH}`);
    assert.equal(status, 200);
    assert.equal(body.resource, "https://mcp.example");
    assert.equal((await getJson(t, `${TEST_BASE}${PRM_PATH}/mcp`)).status, 404);
  }));

/**
 * Issue 21 §2's last line, over real HTTP: with Deno's OpenTelemetry on (`OTEL_DENO=true`), the
 * audit line's fields are attributes of the gateway request's span, as an OTLP collector
 * receives them (a loopback collector taking OTLP/HTTP JSON), and never a token or an argument.
 */

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { AUDITED_CHARS } from "../src/gateway/audit.ts";
import { modernBody } from "./_gateway_mcp.ts";
import { signInOverHttp, spawnWithGitLab, waitFor } from "./_service.ts";

/** One attribute as OTLP/JSON writes it. */
interface OtlpAttribute {
  key: string;
  value: {
    stringValue?: string;
    intValue?: string | number;
    doubleValue?: number;
    boolValue?: boolean;
  };
}

interface OtlpSpan {
  name: string;
  attributes?: OtlpAttribute[];
}

interface OtlpTraces {
  resourceSpans?: { scopeSpans?: { spans?: OtlpSpan[] }[] }[];
}

/** A loopback OTLP/HTTP collector keeping every span it receives. */
function startCollector() {
  const spans: OtlpSpan[] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
    if (new URL(request.url).pathname === "/v1/traces") {
      const traces: OtlpTraces = await request.json();
      for (const resource of traces.resourceSpans ?? []) {
        for (const scope of resource.scopeSpans ?? []) spans.push(...scope.spans ?? []);
      }
    } else {
      await request.body?.cancel();
    }
    return Response.json({});
  });
  return { spans, url: `http://127.0.0.1:${server.addr.port}`, close: () => server.shutdown() };
}

/**
 * The span's attributes as plain values (OTLP/JSON writes integers as strings). The first value
 * of a key: Deno's own `http.response.status_code` (a string) follows the service's.
 */
function attributesOf(span: OtlpSpan): Record<string, string | number | boolean | undefined> {
  const found: Record<string, string | number | boolean | undefined> = {};
  for (const { key, value } of span.attributes ?? []) {
    if (key in found) continue;
    const integer = value.intValue === undefined ? undefined : Number(value.intValue);
    found[key] = value.stringValue ?? integer ?? value.doubleValue ?? value.boolValue;
  }
  return found;
}

Deno.test({
  name: "gateway: the audit fields are attributes of the request's OpenTelemetry span",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const collector = startCollector();
    const mcp = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
      const { id } = await request.json();
      return Response.json({ jsonrpc: "2.0", id, result: { content: [] } });
    });
    const { gitlab, service, close } = await spawnWithGitLab("gitlab-app-id", {
      MCP_UPSTREAM_URL: `http://127.0.0.1:${mcp.addr.port}/mcp`,
      OTEL_DENO: "true",
      OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
      OTEL_EXPORTER_OTLP_ENDPOINT: collector.url,
      OTEL_BSP_SCHEDULE_DELAY: "100",
    });
    try {
      const tokens = await signInOverHttp(service.url, gitlab);
      const secretArgument = "an-argument-never-written";
      const response = await fetch(`${service.url}/mcp`, {
        method: "POST",
        headers: {
          Authorization: `Bearer ${tokens.access_token}`,
          "Content-Type": "application/json",
          Accept: "application/json, text/event-stream",
          "MCP-Protocol-Version": "2026-07-28",
          "Mcp-Method": "tools/call",
          "Mcp-Name": "echo",
        },
        body: modernBody(7, "tools/call", { name: "echo", arguments: { text: secretArgument } }),
      });
      assert.equal(response.status, 200, await response.text());

      const audited = () =>
        collector.spans.find((span) => attributesOf(span)["mcp.name"] === "echo");
      await waitFor(() => audited() !== undefined, 10_000);
      const attributes = attributesOf(audited()!);
      const auditLine = JSON.parse(service.logs.find((line) => line.includes('"message":"mcp"'))!);
      assert.deepEqual(
        {
          "enduser.id": attributes["enduser.id"],
          "gitlab.username": attributes["gitlab.username"],
          "oauth.client.id": attributes["oauth.client.id"],
          "session.id": attributes["session.id"],
          "mcp.protocol.version": attributes["mcp.protocol.version"],
          "mcp.method.name": attributes["mcp.method.name"],
          "jsonrpc.request.id": attributes["jsonrpc.request.id"],
          "http.response.status_code": attributes["http.response.status_code"],
          "mcp.rpc_error": attributes["mcp.rpc_error"],
        },
        {
          "enduser.id": String(auditLine.userId),
          "gitlab.username": auditLine.username,
          "oauth.client.id": auditLine.clientId,
          "session.id": auditLine.sessionId,
          "mcp.protocol.version": "2026-07-28",
          "mcp.method.name": "tools/call",
          "jsonrpc.request.id": "7",
          "http.response.status_code": 200,
          "mcp.rpc_error": false,
        },
      );
      const written = JSON.stringify(audited());
      assert.ok(!written.includes(secretArgument), "no argument on the span");
      assert.ok(!written.includes(tokens.access_token), "no token on the span");

      // A client's long name and id are cut on the span as in the audit line (issue 33 §1.2).
      const longName = `echo${"x".repeat(100_000)}`;
      const longId = "i".repeat(1000);
      const long = await fetch(`${service.url}/mcp`, {
        method: "POST",
        headers: {
          Authorization: `Bearer ${tokens.access_token}`,
          "Content-Type": "application/json",
          Accept: "application/json, text/event-stream",
        },
        body: JSON.stringify({
          jsonrpc: "2.0",
          id: longId,
          method: "tools/call",
          params: { name: longName },
        }),
      });
      await long.body?.cancel();
      const cut = (value: string) =>
        `${value.slice(0, AUDITED_CHARS)}…sha256:${
          createHash("sha256").update(value).digest("hex").slice(0, 16)
        }`;
      const bounded = () =>
        collector.spans.find((span) => attributesOf(span)["mcp.name"] === cut(longName));
      await waitFor(() => bounded() !== undefined, 10_000);
      assert.equal(attributesOf(bounded()!)["jsonrpc.request.id"], cut(longId));
    } finally {
      await close();
      await mcp.shutdown();
      await collector.close();
    }
  },
});

/**
 * The gateway in front of the MCP servers: the client headers it passes on, who may call what
 * (MCP_POLICY_FILE) and its audit line. Which servers it serves, and how they are reached, are
 * the served set's (src/servers/config.ts).
 */

import { parseBoolean } from "../config/parsers.ts";
import { ConfigError, type ConfigTable, type ValuesOf, variable } from "../config/variable.ts";
import { parsePolicyFile } from "../access/call_policy_file.ts";
import { NEVER_FORWARDED_HEADERS } from "./headers.ts";

/** The code refused calls were answered with before -32403; kept for clients that match it. */
const FORMER_POLICY_ERROR_CODE = -32003;

/**
 * Whether `code` is one JSON-RPC or MCP gives a meaning: JSON-RPC's parse error, invalid
 * request, method not found, invalid params and internal error, and -32000…-32099, which MCP
 * partitions between the SDKs' own codes and the protocol's (2026-07-28).
 */
function isProtocolCode(code: number): boolean {
  return code === -32700 || (code >= -32603 && code <= -32600) ||
    (code >= -32099 && code <= -32000);
}

/**
 * A JSON-RPC error code that means nothing else to a client: none JSON-RPC or MCP defines or
 * keeps for itself, but the former -32003.
 */
function parsePolicyErrorCode(name: string, raw: string): number {
  const code = Number(raw);
  if (!/^-?\d{1,10}$/.test(raw) || Math.abs(code) > 2 ** 31 - 1) {
    throw new ConfigError(name, `must be an integer, got ${JSON.stringify(raw)}`);
  }
  if (isProtocolCode(code) && code !== FORMER_POLICY_ERROR_CODE) {
    throw new ConfigError(
      name,
      `${code} is a code JSON-RPC or MCP defines or keeps (-32700, -32600…-32603, ` +
        `-32000…-32099); use -32403 (the default), another code, or -32003 (the former one)`,
    );
  }
  return code;
}

/** Header names only; no header that carries a credential or frames the message. */
export function parseForwardHeaders(name: string, raw: string): readonly string[] {
  return raw.split(",").map((entry) => entry.trim().toLowerCase()).filter((entry) => entry)
    .map((header) => {
      if (!/^[!#$%&'*+.^_`|~0-9a-z-]+$/.test(header)) {
        throw new ConfigError(name, `${JSON.stringify(header)} is not a header name`);
      }
      if (NEVER_FORWARDED_HEADERS.has(header) || header.startsWith("proxy-")) {
        throw new ConfigError(name, `must not name ${header}: the gateway never forwards it`);
      }
      return header;
    });
}

export const GATEWAY_VARIABLES = {
  /**
   * Client headers the gateway passes on beyond its own list (lower case); never a credential.
   * Undefined: none.
   */
  mcpUpstreamForwardHeaders: variable(
    "MCP_UPSTREAM_FORWARD_HEADERS",
    undefined,
    parseForwardHeaders,
    "gateway: more client headers to pass on, comma-separated ([which](#the-gateways-headers))",
  ),
  /** Gateway: what each account may call; read at start-up, again on SIGHUP. Undefined: all. */
  mcpPolicyFile: variable(
    "MCP_POLICY_FILE",
    undefined,
    parsePolicyFile,
    "gateway: JSON rules of who may call what ([policy](#what-they-may-call))",
  ),
  /** The JSON-RPC code of a call MCP_POLICY_FILE refuses. */
  mcpPolicyErrorCode: variable(
    "MCP_POLICY_ERROR_CODE",
    "-32403",
    parsePolicyErrorCode,
    "gateway: JSON-RPC code of a refused call (`-32003`: the code before; [why](#what-they-may-call))",
  ),
  /** The gateway's audit line per MCP message. */
  auditLog: variable(
    "AUDIT_LOG",
    "on",
    parseBoolean,
    "gateway: `off` drops the audit line written per MCP message",
  ),
} satisfies ConfigTable;

/** What GATEWAY_VARIABLES reads to. */
export type GatewayConfig = ValuesOf<typeof GATEWAY_VARIABLES>;

/**
 * What is in force, for the start-up line (issue 38 §5): the store, the signing algorithm and
 * key, the MCP servers' and policy files, the allow-lists' sizes. Never a secret: PostgreSQL is
 * named by host and database (no user, no password), an HS256 secret by a short fingerprint.
 */

import type { Config } from "./config.ts";
import { configuredSigningKeys } from "../keys/config.ts";

/** The store in force: the KV path (or Deno's default), or PostgreSQL's host and database. */
export function storeInForce(config: Pick<Config, "databaseUrl" | "kvPath">): string {
  if (config.databaseUrl === undefined) return `kv:${config.kvPath ?? "default"}`;
  const url = new URL(config.databaseUrl);
  const database = decodeURIComponent(url.pathname.replace(/^\//, "")) || "(default)";
  return `postgres:${url.host}/${database}`;
}

/**
 * A short public name of an HS256 secret: the first 8 hex digits of SHA-256 over a label and the
 * secret, so two processes can be seen to share a secret without the secret being shown.
 */
export async function secretFingerprint(secret: string): Promise<string> {
  const data = new TextEncoder().encode(`gitlab-mcp-auth fingerprint\0${secret}`);
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", data));
  return `sha256:${[...digest.slice(0, 4)].map((b) => b.toString(16).padStart(2, "0")).join("")}`;
}

/** The signing algorithm and the key that signs: its `kid`, or the HS256 secret's fingerprint. */
async function signingInForce(config: Config): Promise<{ alg: string; keyId?: string }> {
  const alg = config.accessTokenAlg;
  if (alg !== "HS256") return { alg, keyId: configuredSigningKeys(config)[0]?.kid };
  return { alg, keyId: config.jwtSecret && await secretFingerprint(config.jwtSecret) };
}

/** The fields the start-up line adds about what is in force (undefined ones are left out). */
export async function inForce(config: Config): Promise<Record<string, unknown>> {
  const signing = await signingInForce(config);
  return {
    store: storeInForce(config),
    signingAlg: signing.alg,
    signingKeyId: signing.keyId,
    serversFile: config.mcpServersFile?.path,
    policyFile: config.mcpPolicyFile?.path,
    machineAccessFile: config.machineAccessFile?.path,
    allowedGroups: config.access.groups?.length ?? 0,
    allowedUsers: config.access.users?.length ?? 0,
    allowedRedirectUris: config.allowedRedirectUris?.length ?? 0,
  };
}

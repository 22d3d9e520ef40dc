/**
 * The KV files the service runs on: seeded by bench/seed.ts in a child process, copied fresh
 * for each case, sized and removed (with SQLite's -wal and -shm beside each).
 */

import { childEnv, runCommand } from "./commands.ts";
import { say } from "./log.ts";
import { type ServiceStore, storeEnv } from "./servers.ts";

const KV_SUFFIXES = ["", "-wal", "-shm"];

/** What seeding needs to know about the bench and the service's configuration. */
export interface SeedOptions {
  /** The project root, where seed.ts runs. */
  root: string;
  /** The path of seed.ts. */
  script: string;
  secret: string;
  gitlabClientId: string;
  clientId: string;
}

/** What to seed: `n` sessions into `store`, their tokens into the files named. */
export interface SeedRequest {
  /** A fresh KV file or PostgreSQL database. */
  store: ServiceStore;
  n: number;
  /** Receives one refresh token a line. */
  refreshOut: string;
  /** When not "", receives `n` more sessions' codes, `<code> <verifier>` a line. */
  codesOut?: string;
  /** The MCP server (RFC 8707 resource) the sessions are for; default `/mcp`. */
  resource?: string;
}

/** Seeds a KV file or a database; returns the seconds it took. */
export async function seedKv(options: SeedOptions, request: SeedRequest): Promise<number> {
  const started = performance.now();
  const out = await runCommand(Deno.execPath(), ["run", "-A", options.script], {
    cwd: options.root,
    clearEnv: true,
    env: childEnv({
      ...storeEnv(request.store),
      JWT_SECRET: options.secret,
      GITLAB_CLIENT_ID: options.gitlabClientId,
      BENCH_N: String(request.n),
      BENCH_REFRESH_OUT: request.refreshOut,
      BENCH_CODES_OUT: request.codesOut ?? "",
      BENCH_CLIENT_ID: options.clientId,
      BENCH_RESOURCE: request.resource ?? "",
    }),
  });
  if (out.code !== 0) throw new Error(`seeding failed:\n${out.stderr}`);
  for (const l of out.stderr.trim().split("\n")) say(`  seed: ${l}`);
  return (performance.now() - started) / 1000;
}

/**
 * Copies a seeded KV for one case, then writes every dirty page to disk (`sync`): otherwise
 * the kernel flushes a 1 GiB seed or copy during the measurement and SQLite's fsyncs wait for
 * it, which makes a large KV look slower than it is.
 */
export async function copyKv(from: string, to: string): Promise<void> {
  for (const s of KV_SUFFIXES) {
    await Deno.remove(to + s).catch(() => {});
    await Deno.copyFile(from + s, to + s).catch(() => {});
  }
  await runCommand("sync", []);
}

/** Removes a KV file and its companions, if there. */
export async function removeKv(path: string): Promise<void> {
  for (const s of KV_SUFFIXES) await Deno.remove(path + s).catch(() => {});
}

/** The bytes of a KV file and its companions. */
export async function kvBytes(path: string): Promise<number> {
  let total = 0;
  for (const s of KV_SUFFIXES) total += (await Deno.stat(path + s).catch(() => null))?.size ?? 0;
  return total;
}

/**
 * Opens the database the configuration names: PostgreSQL when DATABASE_URL is set (migrated
 * on the way), else Deno KV at KV_PATH (Deno's default location when unset).
 */

import { ConfigError } from "../config/variable.ts";
import type { StoreConfig } from "./config.ts";
import { denoKvBackend, type StoreDatabase } from "./backend.ts";
import { fileReplacedCheck, kvLocation, openKv } from "./kv_open.ts";

/** An open database and how to close it (awaited: PostgreSQL drains its pool). */
export interface OpenDatabase {
  database: StoreDatabase;
  /** "postgres" or "kv": for logs and the operator's tools. */
  kind: "postgres" | "kv";
  close(): Promise<void>;
}

/** Opens the configured database; throws when it cannot be opened or migrated. */
export async function openDatabase(
  config:
    & Pick<StoreConfig, "databaseUrl" | "databasePoolSize" | "kvPath">
    & Partial<Pick<StoreConfig, "databaseTimeoutMs">>,
  options: { existingOnly?: boolean } = {},
): Promise<OpenDatabase> {
  if (config.databaseUrl !== undefined) {
    // Loaded only when configured: a KV deployment never loads the driver.
    const { openPostgresBackend } = await import("./postgres/backend.ts");
    let backend;
    try {
      backend = await openPostgresBackend({
        url: config.databaseUrl,
        poolSize: config.databasePoolSize,
        // The server gives a statement up when the request waiting for it has (deadline.ts).
        statementTimeoutMs: config.databaseTimeoutMs,
        existingOnly: options.existingOnly,
      });
    } catch (error) {
      // One line at start-up, without the URL (it may hold a password).
      throw new ConfigError("DATABASE_URL", `cannot open the database: ${messageOf(error)}`);
    }
    return { database: backend, kind: "postgres", close: () => backend.close() };
  }
  const kv = await openKv(config.kvPath);
  const database = config.kvPath !== undefined && kvLocation(config.kvPath) === "file"
    ? denoKvBackend(kv, await fileReplacedCheck(config.kvPath))
    : kv;
  return { database, kind: "kv", close: () => Promise.resolve(kv.close()) };
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * Where records live (KV_PATH, or DATABASE_URL for PostgreSQL) and the key that seals GitLab
 * tokens at rest.
 */

import { integerBetween, MIN_SECRET_BYTES, parseSecret, text } from "../config/parsers.ts";
import { secret } from "../config/secret_files.ts";
import { ConfigError, type ConfigTable, type ValuesOf, variable } from "../config/variable.ts";
import { tlsSettingsOf } from "./postgres/tls_settings.ts";

/**
 * Settings the store's connections must have (src/store/postgres/connect.ts): the driver sends
 * a URL's other parameters to the server as settings, after its own, so one of these in the URL
 * would replace the store's (a statement never given up; checked writes reading an old snapshot).
 */
const STORE_SETTINGS = ["statement_timeout", "default_transaction_isolation"];

/**
 * A `postgres://` or `postgresql://` URL naming a host, with TLS parameters that make sense
 * (src/store/postgres/tls_settings.ts) and none of the store's settings; the value is never
 * echoed (it may hold a password).
 */
function parseDatabaseUrl(name: string, raw: string): string {
  let url: URL | undefined;
  try {
    url = new URL(raw);
  } catch {
    // Answered below without the value.
  }
  if (!url || !/^postgres(ql)?:$/.test(url.protocol) || url.hostname === "") {
    throw new ConfigError(name, "must be a postgres://user:password@host:port/database URL");
  }
  for (const parameter of url.searchParams.keys()) {
    // PostgreSQL reads setting names in any case.
    if (STORE_SETTINGS.includes(parameter.toLowerCase())) {
      throw new ConfigError(
        name,
        `${parameter} cannot be set in the URL: the service sets it ` +
          "(statement_timeout to DATABASE_TIMEOUT_MS, default_transaction_isolation to read committed)",
      );
    }
  }
  try {
    tlsSettingsOf(url);
  } catch (error) {
    throw new ConfigError(name, (error as Error).message);
  }
  return raw;
}

export const STORE_VARIABLES = {
  /** Undefined: Deno's default KV location. */
  kvPath: variable(
    "KV_PATH",
    undefined,
    text,
    "file path, `:memory:`, or a KV Connect URL",
    "Deno's default `Deno.openKv()`",
  ),
  /** PostgreSQL instead of Deno KV (src/store/postgres/); a secret when it holds a password. */
  databaseUrl: secret(variable(
    "DATABASE_URL",
    undefined,
    parseDatabaseUrl,
    "PostgreSQL store: `postgres://user:pass@host:5432/db?sslmode=require`; not with `KV_PATH`",
    "unset: Deno KV",
  )),
  databasePoolSize: variable(
    "DATABASE_POOL_SIZE",
    "10",
    integerBetween(1, 1000),
    "connections to PostgreSQL per process",
  ),
  /** Database time one request may wait for, in all, before it is answered 503 (deadline.ts). */
  databaseTimeoutMs: variable(
    "DATABASE_TIMEOUT_MS",
    "5000",
    integerBetween(100, 600_000),
    "most time a request may wait for the store in all, then 503 with `Retry-After` " +
      "([when the database hangs](operating.md#when-the-database-hangs-or-is-down))",
  ),
  /** Key for GitLab tokens at rest (AES-GCM); undefined: derived from JWT_SECRET with HKDF. */
  encryptionKey: secret(variable(
    "ENCRYPTION_KEY",
    undefined,
    parseSecret,
    `key (≥ ${MIN_SECRET_BYTES} bytes) for GitLab tokens at rest`,
    "derived from `JWT_SECRET`",
  )),
  /** A retired key that still opens what it sealed; each record is resealed when next written. */
  encryptionKeyPrevious: secret(variable(
    "ENCRYPTION_KEY_PREVIOUS",
    undefined,
    parseSecret,
    "the key before a rotation, or `JWT_SECRET` when it was derived: GitLab tokens sealed " +
      "with it still open, and are resealed when next written",
  )),
} satisfies ConfigTable;

/** What STORE_VARIABLES reads to. */
export type StoreConfig = ValuesOf<typeof STORE_VARIABLES>;

/** KV_PATH and DATABASE_URL each choose the store; both set is a mistake, not a preference. */
export function requireOneStore(config: Pick<StoreConfig, "databaseUrl" | "kvPath">): void {
  if (config.databaseUrl !== undefined && config.kvPath !== undefined) {
    throw new ConfigError(
      "DATABASE_URL",
      "cannot be set together with KV_PATH: unset one (DATABASE_URL: PostgreSQL, KV_PATH: Deno KV)",
    );
  }
}

/** The connection pool to PostgreSQL (npm:postgres), configured as the store needs it. */

import postgres from "postgres";
import { driverSsl, withoutTlsParameters } from "./tls.ts";
import { tlsSettingsOf } from "./tls_settings.ts";

export type Sql = postgres.Sql;

export const DEFAULT_STATEMENT_TIMEOUT_MS = 5_000;
export const DEFAULT_CONNECT_TIMEOUT_SECONDS = 2;

/** How the PostgreSQL store connects. */
export interface PostgresOptions {
  /**
   * `postgres://user:pass@host:port/db?sslmode=…&sslrootcert=…`: sslmode disable, prefer (the
   * default), require, verify-ca or verify-full; sslrootcert a PEM file of the CAs to trust (tls.ts).
   */
  url: string;
  /** Connections of this process (DATABASE_POOL_SIZE). */
  poolSize: number;
  /** Server-side limit of one statement, lock waits included. */
  statementTimeoutMs?: number;
  /** Limit of opening one connection. */
  connectTimeoutSeconds?: number;
  /** How often expired rows are deleted (the backend's sweep); 0: never. */
  sweepIntervalMs?: number;
  /**
   * Open only a database the service has already set up (the operator's commands): one without
   * the store's tables is refused, not migrated into one.
   */
  existingOnly?: boolean;
}

/**
 * A connection pool as configured (no query is sent yet). Throws a one-line Error when the
 * URL's TLS parameters make no sense or its root certificate file cannot be read.
 */
export function connect(options: PostgresOptions): Sql {
  const url = new URL(options.url);
  return postgres(withoutTlsParameters(url), {
    ssl: driverSsl(tlsSettingsOf(url), url.hostname),
    max: options.poolSize,
    connect_timeout: options.connectTimeoutSeconds ?? DEFAULT_CONNECT_TIMEOUT_SECONDS,
    idle_timeout: 60,
    onnotice: () => {},
    connection: {
      application_name: "gitlab-mcp-auth",
      statement_timeout: options.statementTimeoutMs ?? DEFAULT_STATEMENT_TIMEOUT_MS,
      // kv_commit's checks read what committed before its advisory locks were granted: a
      // database or role defaulting to repeatable read would have them read an older snapshot.
      default_transaction_isolation: "read committed",
    },
  });
}

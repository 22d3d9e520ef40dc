/**
 * Applies the pending migrations, once, however many processes start together: the first to
 * take the advisory lock applies them in one transaction, the others wait and find them done.
 * A database migrated by newer code (a version this code does not know) refuses start-up.
 */

import type postgres from "postgres";
import { connect } from "./connect.ts";
import { MIGRATIONS } from "./migrations.ts";

/** The lock every migrating process takes (any fixed number; "gmcpauth" in ASCII). */
const MIGRATION_LOCK = 0x676d6370617574n;

/** The database's schema is newer than this code: start-up stops with this one line. */
export class SchemaTooNewError extends Error {
  constructor(readonly databaseVersion: number, readonly codeVersion: number) {
    super(
      `the database's schema is version ${databaseVersion}, newer than this code's ` +
        `${codeVersion}: run the newer release (or restore a matching backup)`,
    );
    this.name = "SchemaTooNewError";
  }
}

/** The versions applied by this call (empty when the database was up to date). */
export async function migrate(sql: postgres.Sql): Promise<number[]> {
  return await sql.begin(async (tx) => {
    await tx.unsafe("SELECT pg_advisory_xact_lock($1)", [String(MIGRATION_LOCK)]);
    await tx.unsafe(
      `CREATE TABLE IF NOT EXISTS schema_migrations (
         version integer PRIMARY KEY,
         name text NOT NULL,
         applied_at timestamptz NOT NULL DEFAULT now()
       )`,
    );
    const [{ current }] = await tx.unsafe<{ current: number }[]>(
      "SELECT coalesce(max(version), 0) AS current FROM schema_migrations",
    );
    const latest = MIGRATIONS[MIGRATIONS.length - 1].version;
    if (current > latest) throw new SchemaTooNewError(current, latest);
    const applied: number[] = [];
    for (const migration of MIGRATIONS) {
      if (migration.version <= current) continue;
      await tx.unsafe(migration.sql);
      await tx.unsafe("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", [
        migration.version,
        migration.name,
      ]);
      applied.push(migration.version);
    }
    return applied;
  }) as number[];
}

/**
 * Connects to `url`, applies what is pending, disconnects: `admin migrate`, each statement
 * (waiting for another process's migration included) within `statementTimeoutMs`.
 */
export async function migrateDatabaseAt(
  url: string,
  statementTimeoutMs: number,
): Promise<{ applied: number[]; version: number }> {
  const sql = connect({ url, poolSize: 1, statementTimeoutMs });
  try {
    const applied = await migrate(sql);
    return { applied, version: MIGRATIONS[MIGRATIONS.length - 1].version };
  } finally {
    await sql.end({ timeout: 5 });
  }
}

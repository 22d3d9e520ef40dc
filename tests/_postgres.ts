/**
 * A throwaway PostgreSQL cluster for tests (dev/postgres_cluster.ts, tuned for speed: no
 * fsync), each test taking its own database in it. Where PostgreSQL is not installed the tests
 * that need it are reported as ignored, except under CI (env `CI` set), where they fail.
 *
 * Usage:
 *   Deno.test({ name, ignore: ignorePostgresTests, async fn() {
 *     const cluster = await startPostgres();
 *     try { const url = await cluster.createDatabase(); ... } finally { await cluster.stop(); }
 *   } });
 */

import {
  postgresBin,
  type PostgresCluster as Cluster,
  postgresMissing,
  type PostgresTlsOptions,
  startCluster,
} from "../dev/postgres_cluster.ts";

export { postgresBin, postgresMissing };
export type { PostgresTlsOptions };

/** The `ignore` of every PostgreSQL test: not installed, and not under CI. */
export const ignorePostgresTests: boolean = postgresMissing !== undefined && !Deno.env.get("CI");

/** A running throwaway cluster. */
export interface PostgresCluster extends Cluster {
  /** A new empty database; its URL. */
  createDatabase(): Promise<string>;
}

/** Durability off: a test cluster's data dies with the test anyway. */
const TEST_SETTINGS = [
  "fsync=off",
  "synchronous_commit=off",
  "full_page_writes=off",
  "max_connections=200",
];

let databases = 0;

/** Initializes and starts a cluster; throws when PostgreSQL is missing. */
export async function startPostgres(
  options: { tls?: PostgresTlsOptions } = {},
): Promise<PostgresCluster> {
  if (postgresMissing) throw new Error(`PostgreSQL tests cannot run: ${postgresMissing}`);
  const cluster = await startCluster({ prefix: "pg-test-", settings: TEST_SETTINGS, ...options });
  return {
    ...cluster,
    async createDatabase() {
      const name = `test_${Deno.pid}_${++databases}`;
      await cluster.psql(`CREATE DATABASE ${name}`);
      return cluster.urlOf(name);
    },
  };
}

let shared: Promise<PostgresCluster> | undefined;

/**
 * One cluster for the whole test file, started on first use and stopped when the test process
 * exits (the `unload` handler of startCluster): each test takes its own database in it.
 */
export function sharedPostgres(): Promise<PostgresCluster> {
  return shared ??= startPostgres();
}

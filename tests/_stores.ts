/**
 * The store backends the contract tests run against: a Deno KV file (what several processes on
 * one host share) and a database in the test file's throwaway PostgreSQL cluster (_postgres.ts).
 * Each gives the environment a service process needs to use it, and opens it in this process
 * for a look at what was written.
 */

import type { StoreDatabase } from "../src/store/mod.ts";
import { openDatabase } from "../src/store/open.ts";
import { ignorePostgresTests, sharedPostgres } from "./_postgres.ts";

/** One shared store, fresh and empty. */
export interface SharedStore {
  /** The variables that point a service process at it (KV_PATH or DATABASE_URL). */
  env: Record<string, string>;
  /** Opens it in this process (as a service would). */
  open(): Promise<{ database: StoreDatabase; close(): Promise<void> }>;
  /** Removes it (the KV file; a PostgreSQL database goes with its cluster). */
  dispose(): Promise<void>;
}

/** A kind of store, for test names and `ignore`. */
export interface StoreKind {
  name: string;
  /** True where the backend cannot run here (and the test is reported as ignored). */
  ignore: boolean;
  create(): Promise<SharedStore>;
}

export const KV_FILE: StoreKind = {
  name: "KV file",
  ignore: false,
  async create() {
    const dir = await Deno.makeTempDir({ prefix: "store-kv-" });
    const env = { KV_PATH: `${dir}/kv.sqlite` };
    return {
      env,
      open: () => openDatabase({ kvPath: env.KV_PATH, databasePoolSize: 1 }),
      dispose: () => Deno.remove(dir, { recursive: true }),
    };
  },
};

export const POSTGRES: StoreKind = {
  name: "PostgreSQL",
  ignore: ignorePostgresTests,
  async create() {
    const url = await (await sharedPostgres()).createDatabase();
    return {
      env: { DATABASE_URL: url },
      open: () => openDatabase({ databaseUrl: url, databasePoolSize: 4 }),
      dispose: () => Promise.resolve(),
    };
  },
};

/** Both backends: every contract test runs once on each. */
export const STORE_KINDS: readonly StoreKind[] = [KV_FILE, POSTGRES];

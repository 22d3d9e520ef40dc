/**
 * The bench's PostgreSQL: a throwaway cluster on loopback (dev/postgres_cluster.ts) with
 * PostgreSQL's durable defaults (fsync and synchronous commit on, as in production, and as the
 * KV cases' SQLite file fsyncs each commit), started on the first `-pg` case's need and stopped
 * at the end of the run, also on failure or interruption.
 *
 * Seeded once into a template database through bench/seed.ts (the store's own seam); each case
 * then runs on `CREATE DATABASE … TEMPLATE` of it, the PostgreSQL twin of the KV cases' file
 * copy: a file-level copy takes seconds, where re-seeding would take a minute per case, and
 * TRUNCATE + re-seed would not give every case the same starting table.
 */

import { type PostgresCluster, startCluster } from "../dev/postgres_cluster.ts";
import { runCommand } from "./commands.ts";
import type { Pinner } from "./machine.ts";
import { cpuTicks } from "./process_stats.ts";

const TEMPLATE = "bench_golden";
const RUN = "bench_run";

/** The bench's cluster, started when first needed. */
export interface BenchPostgres {
  /** The template database's URL (seed it before the first `freshCopy`). */
  templateUrl(): Promise<string>;
  /** The template's size in bytes. */
  templateBytes(): Promise<number>;
  /** Drops the previous run database and copies the template; the copy's URL. */
  freshCopy(): Promise<string>;
  /** Moves every server process (and so each new connection's) to `cpus`. */
  pinTo(cpus: number | string): Promise<void>;
  /** CPU ticks the server's processes used so far (those alive now). */
  cpuTicks(): number;
  /** The server's version line, once started. */
  version(): Promise<string>;
  /** Stops the cluster and removes its data, if it was started. */
  stop(): Promise<void>;
}

/** A BenchPostgres whose server runs under `pin` (CPUs given per case by `pinTo`). */
export function benchPostgres(pin: Pinner): BenchPostgres {
  let cluster: Promise<PostgresCluster> | undefined;
  let running: PostgresCluster | undefined;
  const started = () =>
    cluster ??= startCluster({
      prefix: "oauth-bench-pg-",
      settings: ["max_connections=100", "log_min_messages=warning"],
      wrap: pin(1),
    }).then(async (c) => {
      running = c;
      await c.psql(`CREATE DATABASE ${TEMPLATE}`);
      return c;
    });
  return {
    templateUrl: async () => (await started()).urlOf(TEMPLATE),
    async templateBytes() {
      return Number(await (await started()).psql(`SELECT pg_database_size('${TEMPLATE}')`));
    },
    async freshCopy() {
      const c = await started();
      await c.psql(`DROP DATABASE IF EXISTS ${RUN} WITH (FORCE)`);
      // FILE_COPY: copies the files and checkpoints, instead of writing the copy through the
      // WAL that the measured commits then wait behind.
      await c.psql(`CREATE DATABASE ${RUN} TEMPLATE ${TEMPLATE} STRATEGY FILE_COPY`);
      await c.psql("CHECKPOINT");
      await runCommand("sync", []);
      return c.urlOf(RUN);
    },
    async pinTo(cpus) {
      const args = pin(cpus);
      if (!args.length) return;
      for (const pid of (await started()).pids()) {
        await runCommand("taskset", ["-a", "-p", "-c", String(cpus), String(pid)]);
      }
    },
    cpuTicks: () => running ? ticksOf(running.pids()) : 0,
    async version() {
      return (await (await started()).psql("SHOW server_version")).trim().split(" ")[0];
    },
    async stop() {
      const c = cluster;
      cluster = running = undefined;
      await (await c?.catch(() => undefined))?.stop();
    },
  };
}

/** CPU ticks of `pids` now. */
function ticksOf(pids: number[]): number {
  return pids.reduce((sum, pid) => sum + cpuTicks(pid), 0);
}

/**
 * `admin stats`: the store, the counts of its records, and on KV the file's size; one JSON line
 * with `--json`.
 */

import type { Store } from "../store/mod.ts";
import { formatTable } from "./table.ts";
import { jsonLine } from "./terminal.ts";

/** What `admin stats` reads (the command's dependencies, AdminDeps, have these). */
export interface StatsDeps {
  store: Pick<Store, "countRecords">;
  /** The KV file's size in bytes (with its WAL), or undefined when KV is no local file. */
  kvFileSize(): Promise<number | undefined>;
  /** Which store this is, as the start-up line names it. */
  storeName?: string;
  print(line: string): void;
}

/** Prints the stats of `deps`'s store. */
export async function printStats(json: boolean, deps: StatsDeps): Promise<void> {
  const [counts, kvFileBytes] = await Promise.all([
    deps.store.countRecords(),
    deps.kvFileSize(),
  ]);
  const { flows: pendingFlows, sessions, clients, machineClients } = counts;
  const onPostgres = deps.storeName?.startsWith("postgres:") ?? false;
  const stats = {
    store: deps.storeName,
    pendingFlows,
    sessions,
    clients,
    machineClients,
    // PostgreSQL has no KV file: its records are the counts above.
    ...(onPostgres ? {} : { kvFileBytes: kvFileBytes ?? null }),
  };
  if (json) return deps.print(jsonLine(stats));
  formatTable(["", ""], [
    ...(deps.storeName === undefined ? [] : [["store", deps.storeName]]),
    ["pending flows", String(stats.pendingFlows)],
    ["sessions", String(stats.sessions)],
    ["clients", String(stats.clients)],
    ["machine clients", String(stats.machineClients)],
    ...(onPostgres ? [] : [[
      "KV file",
      kvFileBytes === undefined ? "not a local file" : `${kvFileBytes} bytes`,
    ]]),
  ]).slice(1).forEach((line) => deps.print(line));
}

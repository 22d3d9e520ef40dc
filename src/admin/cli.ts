/**
 * `deno task admin <command>` (and `main.ts admin …`, so the compiled executable has it too):
 * the operator's tools on the KV a running service uses. Configured like the service, from
 * the same environment (KV_PATH, JWT_SECRET or ENCRYPTION_KEY to open GitLab tokens,
 * GITLAB_URL and GITLAB_CLIENT_ID to revoke them).
 *
 * Exit codes: 0 done, 1 what the command names does not exist or the configuration is bad,
 * 2 bad arguments.
 */

import { systemClock } from "../clock.ts";
import { type Config, ConfigError, loadConfig } from "../config/mod.ts";
import { randomToken } from "../crypto.ts";
import { createAppDeps } from "../deps.ts";
import { createLogger } from "../logger.ts";
import { type OpenDatabase, openDatabase } from "../store/open.ts";
import { loadTemplates } from "../templates.ts";
import { parseAdminArgs, USAGE, UsageError } from "./args.ts";
import { runStoreCommand } from "./commands.ts";

/** Where the CLI writes: output and JSON log lines to `out`, refusals to `err`. */
export interface AdminOutput {
  out(line: string): void;
  err(line: string): void;
}

const consoleOutput: AdminOutput = {
  // deno-lint-ignore no-console -- a command-line tool prints its output.
  out: (line) => console.log(line),
  // deno-lint-ignore no-console -- a command-line tool prints its refusals.
  err: (line) => console.error(line),
};

/** Runs the command in `args` (the words after `admin`); answers the exit code. */
export async function runAdmin(
  args: readonly string[],
  env: Record<string, string | undefined>,
  output: AdminOutput = consoleOutput,
): Promise<number> {
  let command;
  try {
    command = parseAdminArgs(args);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    output.err(`admin: ${error.message}`);
    output.err(USAGE);
    return 2;
  }
  if (command.name === "help") {
    output.out(USAGE);
    return 0;
  }
  if (command.name === "keys generate") {
    output.out(`JWT_SECRET=${randomToken(32)}`);
    output.out(`ENCRYPTION_KEY=${randomToken(32)}`);
    output.err(
      "# Set both for a new deployment. On a running one, a new JWT_SECRET goes with " +
        "JWT_SECRET_PREVIOUS=<the old one>; a new ENCRYPTION_KEY makes stored sessions unreadable.",
    );
    return 0;
  }
  let config;
  try {
    config = loadConfig(env);
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    output.err(`admin: configuration error: ${error.message}`);
    return 1;
  }
  if (command.name === "migrate") return await migrateDatabase(config, output);
  let opened: OpenDatabase;
  try {
    opened = await openDatabase(config);
  } catch (error) {
    const what = config.databaseUrl ? "PostgreSQL" : `KV ${config.kvPath ?? "(Deno's default)"}`;
    output.err(`admin: cannot open ${what}: ${error instanceof Error ? error.message : error}`);
    return 1;
  }
  const kv = opened.database;
  try {
    const logger = createLogger(output.out);
    const deps = createAppDeps(config, {
      kv,
      clock: systemClock,
      logger,
      templates: loadTemplates(),
    });
    return await runStoreCommand(command, {
      store: deps.store,
      upstream: deps.oauth?.upstream,
      logger,
      print: output.out,
      kvFileSize: () =>
        opened.kind === "kv" ? kvFileSize(config.kvPath) : Promise.resolve(undefined),
    });
  } finally {
    await opened.close();
  }
}

/** `admin migrate`: applies PostgreSQL's pending migrations without starting the service. */
async function migrateDatabase(config: Config, output: AdminOutput): Promise<number> {
  if (config.databaseUrl === undefined) {
    output.err("admin: migrate needs DATABASE_URL (Deno KV has no schema to migrate)");
    return 1;
  }
  const { migrateDatabaseAt } = await import("../store/postgres/migrate.ts");
  try {
    const { applied, version } = await migrateDatabaseAt(config.databaseUrl);
    output.out(
      applied.length === 0
        ? `schema up to date at version ${version}`
        : `applied migrations ${applied.join(", ")}; schema at version ${version}`,
    );
    return 0;
  } catch (error) {
    output.err(`admin: migrate failed: ${error instanceof Error ? error.message : error}`);
    return 1;
  }
}

/** Bytes of a local KV file and its write-ahead log; undefined for memory or KV Connect. */
async function kvFileSize(path: string | undefined): Promise<number | undefined> {
  if (path === undefined || path === ":memory:" || /^https?:\/\//i.test(path)) return undefined;
  let bytes = 0;
  for (const file of [path, `${path}-wal`]) {
    try {
      bytes += (await Deno.stat(file)).size;
    } catch (error) {
      if (!(error instanceof Deno.errors.NotFound)) throw error;
    }
  }
  return bytes;
}

/**
 * `deno task admin <command>` (and `main.ts admin …`, so the compiled executable has it too):
 * the operator's tools on the KV a running service uses. Configured like the service, from
 * the same environment (KV_PATH, JWT_SECRET or ENCRYPTION_KEY to open GitLab tokens,
 * GITLAB_URL and GITLAB_CLIENT_ID to revoke them).
 *
 * It works only on an existing store: KV_PATH must be set (to a file that exists, or a KV
 * Connect URL), so that a missing or mistyped setting is an error instead of an empty store
 * that reports "0 sessions".
 *
 * Exit codes: 0 done, 1 what the command names does not exist, the configuration is bad or the
 * store did not answer in time, 2 bad arguments, 3 `sessions revoke --user` found no session to
 * end.
 */

import { systemClock } from "../clock.ts";
import { type Config, ConfigError, loadConfig } from "../app/config.ts";
import { randomToken } from "../crypto.ts";
import { configuredUpstream, createAppDeps } from "../app/deps.ts";
import { existingStoreProblem, kvLocation } from "../store/kv_open.ts";
import { type OpenDatabase, openDatabase } from "../store/open.ts";
import { StoreUnavailableError } from "../store/backend.ts";
import { createLogger, type Logger } from "../logger.ts";
import { sealingSecrets } from "../secret_box.ts";
import { generateSigningKey } from "../keys/signing_keys.ts";
import { loadTemplates } from "../pages/mod.ts";
import { checkConfiguration } from "../app/config_check.ts";
import type { Env } from "../config/variable.ts";
import { storeInForce } from "../app/in_force.ts";
import type { Upstream } from "../upstream/types.ts";
import { parseAdminArgs, USAGE, UsageError } from "./args.ts";
import { AdminRefusal, runStoreCommand } from "./commands.ts";
import { escapeUnprintable } from "./terminal.ts";

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
  if (command.name === "keys generate" && command.alg) {
    output.out(JSON.stringify(await generateSigningKey(command.alg, new Date(systemClock.now()))));
    output.err(
      "# A private key: add it to SIGNING_KEYS (a JSON array), second to publish it first, " +
        "first to sign with it (docs/resource-servers.md: rotating a signing key). " +
        "Keep it as secret as JWT_SECRET.",
    );
    return 0;
  }
  if (command.name === "keys generate") {
    output.out(`JWT_SECRET=${randomToken(32)}`);
    output.out(`ENCRYPTION_KEY=${randomToken(32)}`);
    output.err(
      "# Set both for a new deployment. On a running one, rotate each in two steps, each on " +
        "every instance before the next: the new value as JWT_SECRET_PREVIOUS (or " +
        "ENCRYPTION_KEY_PREVIOUS), then swapped with the old one (docs/security.md: rotating " +
        "JWT_SECRET, rotating ENCRYPTION_KEY); in one step, sessions end.",
    );
    return 0;
  }
  if (command.name === "config check") return await checkConfig(env, command.connect, output);
  let config;
  try {
    config = loadConfig(env);
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    output.err(`admin: configuration error: ${error.message}`);
    return 1;
  }
  if (command.name === "migrate") return await migrateDatabase(config, output);
  if (config.databaseUrl === undefined) {
    const storeProblem = await existingStoreProblem(config.kvPath);
    if (storeProblem) {
      output.err(`admin: ${storeProblem}`);
      return 1;
    }
  }
  let opened: OpenDatabase;
  try {
    // An operator's command works on the service's store: a database without one is refused.
    opened = await openDatabase(config, { existingOnly: true });
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    output.err(`admin: configuration error: ${error.message}`);
    return 1;
  }
  const kv = opened.database;
  let unanswered = false;
  try {
    // A log line may name what GitLab or a registration sent (a username): JSON escapes C0
    // controls, not C1 ones nor format characters.
    const logger = createLogger((line) => output.out(escapeUnprintable(line)));
    const deps = createAppDeps(config, {
      kv,
      clock: systemClock,
      logger,
      templates: loadTemplates(),
    });
    return await runStoreCommand(command, {
      store: deps.store,
      upstream: gitLabOf(config, logger),
      missingForRevocation: sealingSecrets(config).length > 0
        ? []
        : ["ENCRYPTION_KEY or JWT_SECRET"],
      logger,
      print: output.out,
      note: output.err,
      kvFileSize: () =>
        opened.kind === "kv" ? kvFileSize(config.kvPath) : Promise.resolve(undefined),
      storeName: storeInForce(config),
      servers: ["default", ...(config.mcpServersFile?.servers ?? []).map(({ name }) => name)],
      roles: deps.callPolicy.rules.roles,
      baseUrl: config.baseUrl,
    });
  } catch (error) {
    if (error instanceof StoreUnavailableError) {
      // Its message names the time limit or the database's answer, never the URL's password.
      output.err(`admin: the store did not answer: ${escapeUnprintable(error.message)}`);
      unanswered = true;
      return 1;
    }
    if (!(error instanceof AdminRefusal)) throw error;
    // A refusal may name a user as GitLab spelled it.
    output.err(`admin: ${escapeUnprintable(error.message)}`);
    return error.exitCode;
  } finally {
    // Closing would wait for the operation the store did not answer (a KV file's lock held by
    // another process): the process exits instead, and that operation with it.
    if (!unanswered) await opened.close();
  }
}

/**
 * `admin config check`: the effective configuration on stdout (secrets as `****`), one line
 * per warning start-up would log and per problem on stderr; with `connect`, the store is opened
 * (and closed) too. 0: no problem (warnings do not count, as they do not stop start-up).
 */
async function checkConfig(env: Env, connect: boolean, output: AdminOutput): Promise<number> {
  const { lines, problems, warnings, config } = checkConfiguration(env);
  lines.forEach((line) => output.out(line));
  warnings.forEach((warning) => output.err(`admin: warning: ${warning}`));
  if (connect && config) {
    const problem = await storeProblem(config);
    if (problem) problems.push(problem);
  }
  problems.forEach((problem) => output.err(`admin: ${problem}`));
  return problems.length === 0 ? 0 : 1;
}

/** Why the configured store cannot be opened as the service's, or undefined when it can. */
async function storeProblem(config: Config): Promise<string | undefined> {
  if (config.databaseUrl === undefined) {
    const problem = await existingStoreProblem(config.kvPath);
    if (problem) return problem;
  }
  try {
    await (await openDatabase(config, { existingOnly: true })).close();
    return undefined;
  } catch (error) {
    // Only ConfigError's message is known to leave the database URL's password out.
    if (error instanceof ConfigError) return error.message;
    return `cannot open the store (${error instanceof Error ? error.name : "error"})`;
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
    const { applied, version } = await migrateDatabaseAt(
      config.databaseUrl,
      config.databaseTimeoutMs,
    );
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

/**
 * GitLab's client for revocations: it needs GITLAB_URL and GITLAB_CLIENT_ID (and the secret of
 * a confidential application), not JWT_SECRET, which the service's own OAuth settings require.
 */
function gitLabOf(config: Config, logger: Logger): Upstream | undefined {
  const { clientId } = config.upstream;
  return clientId ? configuredUpstream(config, clientId, logger) : undefined;
}

/** Bytes of a local KV file and its write-ahead log; undefined for memory or KV Connect. */
async function kvFileSize(path: string | undefined): Promise<number | undefined> {
  if (path === undefined || kvLocation(path) !== "file") return undefined;
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

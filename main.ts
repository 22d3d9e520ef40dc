/**
 * Composition root: reads the configuration, opens KV, wires the dependencies and serves.
 * The only module that touches Deno.env and Deno.serve, and opens the service's KV (through
 * src/kv_open.ts; the demo reuses `startService` with an environment of its own).
 *
 * Two ways in, both configured from the environment:
 * - `deno serve main.ts` (also `--parallel`): the default export `{ fetch }`;
 *   `deno serve` picks the address (`--port`, `--host`) and drains requests on SIGTERM.
 * - `deno run main.ts start` (`deno task start`), the compiled executable and Deno Deploy: the
 *   service listens on `HOST`:`PORT` itself, with the graceful shutdown of `startService`.
 *
 * `import.meta.main` is true under both `deno run` and `deno serve`, so the `start` argument
 * is what tells them apart; imported (by the demo, the tests), this module does nothing.
 */

import { createApp, type FetchHandler } from "./src/app/app.ts";
import { systemClock } from "./src/clock.ts";
import {
  type Config,
  ConfigError,
  type Env,
  listenHostname,
  loadConfig,
  missingOAuthSettings,
  signInReason,
} from "./src/app/config.ts";
import { startupWarnings } from "./src/app/weak_settings.ts";
import { ignoredVariables } from "./src/app/config_check.ts";
import { inForce } from "./src/app/in_force.ts";
import { createAppDeps } from "./src/app/deps.ts";
import { mcpClientFor } from "./src/gateway/mcp_client/for_url.ts";
import { createClientMetadataFetcher, httpsProxyFor } from "./src/client_metadata/fetcher.ts";
import { createLogger, type Logger } from "./src/logger.ts";
import { loadTemplates } from "./src/pages/mod.ts";
import type { StoreDatabase } from "./src/store/mod.ts";
import { openDatabase } from "./src/store/open.ts";
import type { AppDeps } from "./src/app/context.ts";
import { sweepPeriodically } from "./src/app/periodic_sweep.ts";
import { followConfigFiles, hasFollowedFiles } from "./src/app/file_reloads.ts";
import { METRICS_CHANNEL } from "./src/metrics/workers.ts";

/** How long a stopping service waits for requests in flight (deploy/kubernetes allows more). */
export const SHUTDOWN_GRACE_MS = 10_000;

/** The app built from one environment, and the KV it owns. */
export interface Composition {
  app: FetchHandler;
  config: Config;
  /** Closed by whoever stops serving `app`. */
  kv: StoreDatabase;
  /** Stops the sweep, closes the MCP servers' clients and `kv` (PostgreSQL: drains its pool). */
  close(): Promise<void>;
  /** What a reload of MCP_POLICY_FILE, MCP_SERVERS_FILE or MACHINE_ACCESS_FILE changes. */
  reloadable: Reloadable;
}

/** The parts of the service a reload of its configuration files changes. */
type Reloadable = Pick<
  AppDeps,
  "config" | "callPolicy" | "servers" | "openStreams" | "machineAccess"
>;

/** A running service. */
export interface RunningService {
  /** Where it listens, e.g. `http://127.0.0.1:8000`. */
  url: string;
  config: Config;
  /** What a reload of MCP_POLICY_FILE, MCP_SERVERS_FILE or MACHINE_ACCESS_FILE changes. */
  reloadable: Reloadable;
  /** Stops accepting, finishes in-flight requests (bounded), closes the MCP clients and KV. */
  shutdown(): Promise<void>;
  finished: Promise<void>;
}

/**
 * Reads the configuration, opens KV and builds the app. Throws ConfigError on a bad value, and
 * on a KV that cannot be opened (naming KV_PATH). `metricsWorkers`: the channel of the
 * process's `deno serve` workers, whose counts each scrape adds up.
 */
export async function composeService(
  env: Env,
  logger: Logger,
  metricsWorkers?: BroadcastChannel,
): Promise<Composition> {
  // Before reading: a mistyped name may be why what it meant is found missing.
  for (const warning of ignoredVariables(env)) logger.warn(warning);
  const config = loadConfig(env);
  warnIfNotConfigured(config, logger);
  for (const warning of startupWarnings(config)) logger.warn(warning);
  const { database: kv, close: closeKv } = await openDatabase(config);
  const deps = createAppDeps(config, {
    kv,
    clock: systemClock,
    logger,
    templates: await loadTemplates(),
    // The runtime's proxy variables decide how the MCP servers are reached, named ones too.
    mcpClient: config.mcpUpstreamUrl && mcpClientFor(config.mcpUpstreamUrl, env),
    mcpClientFor: (url) => mcpClientFor(url, env),
    // And whether a metadata document is fetched from its checked address or through the proxy.
    clientMetadataFetcher: createClientMetadataFetcher({
      allowPrivate: config.clientMetadataAllowPrivate,
      viaProxy: httpsProxyFor(env),
    }),
    metricsWorkers,
  });
  const sweep = sweepPeriodically(deps);
  const close = async () => {
    sweep.stop();
    deps.servers.close();
    await closeKv();
  };
  return { app: createApp(deps), config, kv, close, reloadable: deps };
}

/**
 * Starts the service from an environment map on `HOST`:`PORT`. Throws ConfigError on a bad
 * value, and on a port already in use (naming it and `PORT`).
 */
export async function startService(
  env: Env,
  logger: Logger = createLogger(),
): Promise<RunningService> {
  const { app, config, close, reloadable } = await composeService(env, logger);
  const { promise: listening, resolve } = Promise.withResolvers<string>();
  const summary = await inForce(config);
  let server: Deno.HttpServer;
  try {
    server = Deno.serve({
      port: config.port,
      hostname: listenHostname(config),
      onListen: (address) =>
        resolve(
          logListening(address, config, { signInBecause: signInReason(env), summary }, logger),
        ),
    }, app);
  } catch (error) {
    await close();
    throw error instanceof Deno.errors.AddrInUse ? portInUse(config) : cannotListen(config, error);
  }
  let stopping: Promise<void> | undefined;
  return {
    url: await listening,
    config,
    reloadable,
    finished: server.finished,
    shutdown() {
      stopping ??= (async () => {
        logger.info("shutting down");
        const timer = setTimeout(() => {
          logger.error("in-flight requests did not finish in time; exiting");
          Deno.exit(1);
        }, SHUTDOWN_GRACE_MS);
        const draining = server.shutdown();
        reloadable.openStreams.endForShutdown();
        await draining;
        await close();
        clearTimeout(timer);
      })();
      return stopping;
    },
  };
}

/** Any other failure to listen: an address that is none, or one this host does not have. */
function cannotListen(config: Config, error: unknown): ConfigError {
  const reason = error instanceof Error ? error.message : String(error);
  const variable = error instanceof Deno.errors.PermissionDenied ? "PORT" : "HOST";
  return new ConfigError(
    variable,
    `cannot listen on ${listenHostname(config)} port ${config.port}: ${reason.split("\n")[0]}`,
  );
}

function portInUse(config: Config): ConfigError {
  return new ConfigError(
    "PORT",
    `port ${config.port} is already in use on ${listenHostname(config)}; ` +
      "stop what holds it or set PORT to a free port",
  );
}

/** The MCP servers the gateway serves: `default` (at /mcp) and each of MCP_SERVERS_FILE's. */
function servedServerNames(config: Config): string[] {
  return [
    ...(config.mcpUpstreamUrl ? ["default"] : []),
    ...(config.mcpServersFile?.servers ?? []).map((server) => server.name),
  ];
}

/** Logs the `listening` line (tests and operators read its `url`) and returns the URL. */
function logListening(
  address: Deno.Addr,
  config: Config,
  { signInBecause, summary }: { signInBecause: string; summary: Record<string, unknown> },
  logger: Logger,
): string {
  const { hostname, port } = address as Deno.NetAddr;
  const host = hostname.includes(":") ? `[${hostname}]` : hostname;
  const url = `http://${host}:${port}`;
  logger.info("listening", {
    url,
    // The process to send SIGHUP or SIGTERM to (not npx's or `deno task`'s).
    pid: Deno.pid,
    gitlab: config.upstream.url.href,
    securityProfile: config.securityProfile,
    signIn: config.upstream.signIn,
    signInBecause,
    mcpServers: servedServerNames(config).join(",") || undefined,
    ...summary,
  });
  return url;
}

function warnIfNotConfigured(config: Config, logger: Logger): void {
  const missing = missingOAuthSettings(config);
  if (missing.length === 0) return;
  logger.warn(
    `OAuth is not configured (missing ${missing.join(" and ")}): ` +
      "every endpoint answers 500 server_error until it is set; /readyz answers 503",
  );
}

/**
 * MCP_POLICY_FILE and MCP_SERVERS_FILE are read again when their content changes on disk
 * (checked every few seconds) and on SIGHUP (where the platform has signals: not on Windows); a
 * file that cannot be used keeps what is in force and logs an error. Without either file SIGHUP
 * keeps its default meaning.
 */
function reloadOnChange(reloadable: Reloadable, logger: Logger): void {
  if (!hasFollowedFiles(reloadable)) return;
  const files = followConfigFiles(reloadable, logger);
  if (Deno.build.os === "windows") return;
  Deno.addSignalListener("SIGHUP", () => files.reload());
}

/** Runs `step`; a ConfigError ends the process with one line and exit code 1. */
async function orExit<T>(logger: Logger, step: () => Promise<T>): Promise<T> {
  try {
    return await step();
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    logger.error(`configuration error: ${error.message}`);
    Deno.exit(1);
  }
}

/**
 * `deno run main.ts start`: listens itself; SIGTERM/SIGINT shut it down gracefully. On Deno
 * Deploy the platform stops isolates itself, and signals may not exist there.
 */
async function start(onDeploy: boolean): Promise<void> {
  const logger = createLogger();
  const service = await orExit(logger, () => startService(Deno.env.toObject(), logger));
  if (!onDeploy) {
    const stop = () => void service.shutdown();
    Deno.addSignalListener("SIGTERM", stop);
    Deno.addSignalListener("SIGINT", stop);
    reloadOnChange(service.reloadable, logger);
  }
  await service.finished;
}

/** `main.ts admin …`: the operator's CLI on the same KV (docs/operating.md "Operator's CLI"). */
async function admin(): Promise<never> {
  const { runAdmin } = await import("./src/admin/cli.ts");
  Deno.exit(await runAdmin(Deno.args.slice(1), Deno.env.toObject()));
}

/** `deno serve main.ts`: the handler `deno serve` runs; it owns the listener. */
async function serveEntry(): Promise<Deno.ServeDefaultExport> {
  const logger = createLogger();
  const env = Deno.env.toObject();
  const { app, config, reloadable } = await orExit(
    logger,
    () => composeService(env, logger, metricsChannel()),
  );
  reloadOnChange(reloadable, logger);
  // `deno serve` drains requests on these signals: GET streams would hold it for ever.
  onStopSignals(() => reloadable.openStreams.endForShutdown());
  const summary = await inForce(config);
  // One line per `--parallel` worker: a SIGTERM before every worker is up can be lost.
  logger.info("ready to serve");
  return {
    fetch: app,
    onListen: (address) =>
      void logListening(address, config, { signInBecause: signInReason(env), summary }, logger),
  };
}

/**
 * Every `deno serve --parallel` worker joins this channel, so a scrape, which reaches one
 * worker, reports them all. An open channel keeps a worker alive: it is closed when `deno serve`
 * is told to stop, or the process would not exit.
 */
function metricsChannel(): BroadcastChannel {
  const channel = new BroadcastChannel(METRICS_CHANNEL);
  onStopSignals(() => channel.close());
  return channel;
}

/** Runs `stop` when `deno serve` is told to stop (SIGTERM, SIGINT; only SIGINT on Windows). */
function onStopSignals(stop: () => void): void {
  const signals: Deno.Signal[] = Deno.build.os === "windows" ? ["SIGINT"] : ["SIGTERM", "SIGINT"];
  for (const signal of signals) Deno.addSignalListener(signal, stop);
}

// Without `fetch` (imported, or listening itself) Deno neither serves the export nor warns.
let served: Partial<Deno.ServeDefaultExport> = {};
if (import.meta.main) {
  const [command] = Deno.args;
  if (command === "admin") await admin();
  // Deno Deploy sets DENO_DEPLOYMENT_ID and may run the entrypoint as `deno run` does, which
  // would leave a default export unserved: there, as in the executable, the service listens.
  const onDeploy = Deno.env.get("DENO_DEPLOYMENT_ID") !== undefined;
  const standalone = command === undefined && (Deno.build.standalone || onDeploy);
  if (command === "start" || standalone) await start(onDeploy);
  else served = await serveEntry();
}

/** For `deno serve main.ts`: the app configured from the environment. */
export { served as default };

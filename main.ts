/**
 * Composition root: reads the configuration, opens KV, wires the dependencies and serves.
 * The only module that touches Deno.env, Deno.openKv and Deno.serve (the demo reuses
 * `startService` with an environment of its own).
 */

import { createApp } from "./src/app.ts";
import { systemClock } from "./src/clock.ts";
import { type Config, ConfigError, loadConfig, missingOAuthSettings } from "./src/config.ts";
import { createAppDeps } from "./src/deps.ts";
import { createLogger, type Logger } from "./src/logger.ts";
import { loadTemplates } from "./src/templates.ts";

const SHUTDOWN_GRACE_MS = 10_000;

/** A running service. */
export interface RunningService {
  /** Where it listens, e.g. `http://127.0.0.1:8000`. */
  url: string;
  config: Config;
  /** Stops accepting, finishes in-flight requests (bounded), closes KV. */
  shutdown(): Promise<void>;
  finished: Promise<void>;
}

/** Starts the service from an environment map. Throws ConfigError on a bad value. */
export async function startService(
  env: Record<string, string | undefined>,
  logger: Logger = createLogger(),
): Promise<RunningService> {
  const config = loadConfig(env);
  warnIfNotConfigured(config, logger);
  const kv = await Deno.openKv(config.kvPath);
  const app = createApp(
    createAppDeps(config, { kv, clock: systemClock, logger, templates: await loadTemplates() }),
  );
  const { promise: listening, resolve } = Promise.withResolvers<string>();
  const server = Deno.serve({
    port: config.port,
    hostname: config.hostname,
    onListen: ({ hostname, port }) => {
      const host = hostname.includes(":") ? `[${hostname}]` : hostname;
      const url = `http://${host}:${port}`;
      logger.info("listening", {
        url,
        gitlab: config.gitlabUrl.href,
        securityProfile: config.securityProfile,
      });
      resolve(url);
    },
  }, app);
  let stopping: Promise<void> | undefined;
  return {
    url: await listening,
    config,
    finished: server.finished,
    shutdown() {
      stopping ??= (async () => {
        logger.info("shutting down");
        const timer = setTimeout(() => {
          logger.error("in-flight requests did not finish in time; exiting");
          Deno.exit(1);
        }, SHUTDOWN_GRACE_MS);
        await server.shutdown();
        kv.close();
        clearTimeout(timer);
      })();
      return stopping;
    },
  };
}

function warnIfNotConfigured(config: Config, logger: Logger): void {
  const missing = missingOAuthSettings(config);
  if (missing.length === 0) return;
  logger.warn(
    `OAuth is not configured (missing ${missing.join(" and ")}): ` +
      "every endpoint answers 500 server_error until it is set",
  );
}

async function main(): Promise<void> {
  if (Deno.args[0] === "admin") {
    const { runAdmin } = await import("./src/admin/cli.ts");
    Deno.exit(await runAdmin(Deno.args.slice(1), Deno.env.toObject()));
  }
  const logger = createLogger();
  let service: RunningService;
  try {
    service = await startService(Deno.env.toObject(), logger);
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    logger.error(`configuration error: ${error.message}`);
    Deno.exit(1);
  }
  const stop = () => void service.shutdown();
  Deno.addSignalListener("SIGTERM", stop);
  Deno.addSignalListener("SIGINT", stop);
  await service.finished;
}

if (import.meta.main) await main();

/**
 * The servers the cases measure and the helpers beside them: the service as `deno task start`
 * runs it, the Deno floors (floor.ts), the bench's MCP server (mcp_server.ts) and the simulated
 * GitLab (sim_gitlab.ts). The measured server is pinned to CPU 0 on the bench's port.
 */

import { BENCH_DIR, GITLAB_CLIENT_ID, ROOT, SECRET } from "./config.ts";
import type { Proc, ProcessGroup } from "./processes.ts";

/** What the service runs on: a KV file, or a PostgreSQL database. */
export type ServiceStore = { kvPath: string } | { databaseUrl: string };

/** The service's environment for `store`. */
export function storeEnv(store: ServiceStore): Record<string, string> {
  return "kvPath" in store ? { KV_PATH: store.kvPath } : { DATABASE_URL: store.databaseUrl };
}

/** What the servers of a run share. */
export interface ServerOptions {
  processes: ProcessGroup;
  /** The project root, whose deno.json holds `deno task start`. */
  root: string;
  /** The folder of floor.ts, mcp_server.ts and sim_gitlab.ts. */
  benchDir: string;
  /** The folder for logs and the floors' KV. */
  dir: string;
  /** The port of the measured server; the simulated GitLab listens on the next. */
  port: number;
  secret: string;
  gitlabClientId: string;
  /** Extra environment for the service (BENCH_SERVICE_ENV), over the bench's own. */
  serviceEnv: Record<string, string>;
}

/** Starts the servers of a run. */
export interface Servers {
  /** The KV file of the jwt-kv floor. */
  floorKv: string;
  /** The service, logging to `<name>.log`, with GitLab at `gitlabUrl`. */
  service(
    name: string,
    store: ServiceStore,
    gitlabUrl: string,
    extraEnv?: Record<string, string>,
  ): Promise<Proc>;
  /**
   * The service as `deno serve --parallel` runs it: `workers` workers in one process, each with
   * its own app and KV handle on the same file (or its own pool to the same database), free to
   * use every CPU.
   */
  parallelService(
    name: string,
    workers: number,
    store: ServiceStore,
    gitlabUrl: string,
    extraEnv?: Record<string, string>,
  ): Promise<Proc>;
  /** A floor (FLOOR=`floor`, KEY_MODE=`keyMode`, more `env`), logging to `<name>.log`. */
  floor(
    name: string,
    floor: string,
    keyMode?: string,
    env?: Record<string, string>,
  ): Promise<Proc>;
  /** The bench's MCP server on `port`, pinned to `cpu`. */
  mcpServer(cpu: number, port: number): Promise<Proc>;
  /** The simulated GitLab on the port after the bench's, pinned to CPU 1. */
  simulatedGitLab(): Promise<Proc>;
}

/** The Servers of one run. */
export function createServers(options: ServerOptions): Servers {
  const { processes, benchDir, dir, port } = options;
  const deno = Deno.execPath();
  const v8Flags = startV8Flags(options.root);
  const floorKv = `${dir}/floor-kv.sqlite`;
  const serviceEnv = (
    store: ServiceStore,
    gitlabUrl: string,
    extraEnv: Record<string, string>,
  ) => ({
    PORT: String(port),
    HOST: "127.0.0.1",
    ...storeEnv(store),
    JWT_SECRET: options.secret,
    GITLAB_CLIENT_ID: options.gitlabClientId,
    GITLAB_URL: gitlabUrl,
    ...options.serviceEnv,
    ...extraEnv,
  });
  return {
    floorKv,
    service: (name, store, gitlabUrl, extraEnv = {}) =>
      processes.start({
        name,
        cpu: 0,
        cmd: [deno, "run", ...v8Flags, "-A", "main.ts", "start"],
        env: serviceEnv(store, gitlabUrl, extraEnv),
        port,
        log: `${dir}/${name}.log`,
      }),
    parallelService: (name, workers, store, gitlabUrl, extraEnv = {}) =>
      processes.start({
        name,
        cpu: `0-${workers - 1}`,
        cmd: [
          deno,
          "serve",
          "--parallel",
          ...v8Flags,
          "-A",
          "--host",
          "127.0.0.1",
          "--port",
          String(port),
          "main.ts",
        ],
        env: { ...serviceEnv(store, gitlabUrl, extraEnv), DENO_JOBS: String(workers) },
        port,
        log: `${dir}/${name}.log`,
      }),
    floor: (name, floor, keyMode = "cryptokey", env = {}) =>
      processes.start({
        name,
        cpu: 0,
        cmd: [deno, "run", "-A", `${benchDir}floor.ts`],
        env: {
          PORT: String(port),
          HOSTNAME: "127.0.0.1",
          FLOOR: floor,
          KEY_MODE: keyMode,
          KV_PATH: floorKv,
          JWT_SECRET: options.secret,
          ...env,
        },
        port,
        log: `${dir}/${name}.log`,
      }),
    mcpServer: (cpu, mcpPort) =>
      processes.start({
        name: `mcp-server-${mcpPort}`,
        cpu,
        cmd: [deno, "run", "-A", `${benchDir}mcp_server.ts`],
        env: { PORT: String(mcpPort) },
        port: mcpPort,
        log: `${dir}/mcp-server-${mcpPort}.log`,
      }),
    simulatedGitLab: () =>
      processes.start({
        name: "sim-gitlab",
        cpu: 1,
        cmd: [deno, "run", "-A", `${benchDir}sim_gitlab.ts`],
        env: { PORT: String(port + 1), GITLAB_CLIENT_ID: options.gitlabClientId },
        port: port + 1,
        log: `${dir}/sim-gitlab.log`,
      }),
  };
}

/** The Servers of one run with the bench's own secret and GitLab application (config.ts). */
export function createBenchServers(
  processes: ProcessGroup,
  dir: string,
  port: number,
  serviceEnv: Record<string, string>,
): Servers {
  return createServers({
    processes,
    root: ROOT,
    benchDir: BENCH_DIR,
    dir,
    port,
    secret: SECRET,
    gitlabClientId: GITLAB_CLIENT_ID,
    serviceEnv,
  });
}

/** The V8 flags `deno task start` gives the service, so that the bench measures that process. */
function startV8Flags(root: string): string[] {
  return String(JSON.parse(Deno.readTextFileSync(`${root}deno.json`)).tasks.start)
    .split(" ")
    .filter((arg) => arg.startsWith("--v8-flags="));
}

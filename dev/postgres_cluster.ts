/**
 * A throwaway PostgreSQL cluster on loopback, for the tests (tests/_postgres.ts) and the bench
 * (bench/postgres.ts): initdb into a temporary directory, the server on a free loopback port
 * with its socket in that directory, stopped (and the directory removed) by `stop()`, and at
 * the latest when the process exits. As root, the cluster runs as the `postgres` user the
 * Debian package creates, since PostgreSQL refuses to run as root. Never reachable from
 * main.ts: the service only ever connects to a DATABASE_URL.
 */

/** The newest installed PostgreSQL's binaries (env `PG_BIN` overrides), or undefined. */
export const postgresBin: string | undefined = Deno.env.get("PG_BIN") ?? newestBinDir();

/** Why a cluster cannot start here, or undefined. */
export const postgresMissing: string | undefined = postgresBin === undefined
  ? "no /usr/lib/postgresql/*/bin/initdb (apt-get install postgresql)"
  : undefined;

/** How a cluster is set up. */
export interface ClusterOptions {
  /** Prefix of its temporary directory. */
  prefix: string;
  /** Server settings (`name=value`) beside port, socket directory and listen address. */
  settings: string[];
  /** A command prefix the server starts under (e.g. `taskset -c 1`); its children inherit it. */
  wrap?: string[];
  /** TLS (`ssl=on`) with this certificate, when set. */
  tls?: PostgresTlsOptions;
}

/** How a cluster speaks TLS (`ssl=on`), when it does. */
export interface PostgresTlsOptions {
  /** PEM of the server's certificate (for 127.0.0.1 and localhost) and its key. */
  certPem: string;
  keyPem: string;
  /** Only `hostssl` in pg_hba.conf: a connection over TCP without TLS is refused. */
  hostsslOnly?: boolean;
}

/** A running throwaway cluster. */
export interface PostgresCluster {
  /** `postgres://postgres@127.0.0.1:port/postgres`. */
  url: string;
  port: number;
  /** The URL of database `name` in this cluster. */
  urlOf(name: string): string;
  /** Runs SQL with psql in `database` (default `postgres`); its output. */
  psql(sql: string, database?: string): Promise<string>;
  /** `pg_dump` of a database as SQL text. */
  dump(url: string): Promise<string>;
  /** The process ids of the server: the postmaster and every process it started. */
  pids(): number[];
  /** Stops the server, keeping the data (an outage); `start()` brings it back. */
  pause(): Promise<void>;
  start(): Promise<void>;
  /** Stops the server and removes its data. */
  stop(): Promise<void>;
}

function newestBinDir(): string | undefined {
  let versions: number[];
  try {
    versions = [...Deno.readDirSync("/usr/lib/postgresql")]
      .map((entry) => Number(entry.name)).filter(Number.isFinite).sort((a, b) => b - a);
  } catch {
    return undefined;
  }
  for (const version of versions) {
    const dir = `/usr/lib/postgresql/${version}/bin`;
    try {
      Deno.statSync(`${dir}/initdb`);
      return dir;
    } catch {
      // The next version.
    }
  }
  return undefined;
}

const isRoot = Deno.uid() === 0;

/** A PostgreSQL binary's command line, as `postgres` when we are root, under `wrap`. */
function commandLine(binary: string, args: string[], wrap: string[] = []): string[] {
  const line = [...wrap, `${postgresBin}/${binary}`, ...args];
  return isRoot ? ["runuser", "-u", "postgres", "--", ...line] : line;
}

/** Runs a PostgreSQL binary; throws with its output on failure. */
async function run(binary: string, args: string[], wrap?: string[]): Promise<string> {
  const [command, ...commandArgs] = commandLine(binary, args, wrap);
  const output = await new Deno.Command(command, {
    args: commandArgs,
    stdout: "piped",
    stderr: "piped",
    stdin: "null",
  }).output();
  const text = new TextDecoder().decode(output.stdout);
  if (!output.success) {
    throw new Error(`${binary} failed: ${new TextDecoder().decode(output.stderr)}${text}`);
  }
  return text;
}

function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = listener.addr as Deno.NetAddr;
  listener.close();
  return port;
}

/** Initializes and starts a cluster; throws when PostgreSQL is missing. */
export async function startCluster(options: ClusterOptions): Promise<PostgresCluster> {
  if (postgresMissing) throw new Error(`PostgreSQL cannot run here: ${postgresMissing}`);
  const dir = await Deno.makeTempDir({ prefix: options.prefix });
  if (isRoot) {
    const uid = Number((await runText("id", ["-u", "postgres"])).trim());
    const gid = Number((await runText("id", ["-g", "postgres"])).trim());
    await Deno.chown(dir, uid, gid);
  }
  const data = `${dir}/data`;
  await run("initdb", ["-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"]);
  const tlsSettings = options.tls ? await configureTls(data, options.tls) : [];
  const port = freePort();
  const serverOptions = [
    `-p ${port}`,
    `-k ${dir}`,
    "-c listen_addresses=127.0.0.1",
    ...[...options.settings, ...tlsSettings].map((setting) => `-c ${setting}`),
  ].join(" ");
  const start = () =>
    run(
      "pg_ctl",
      ["-D", data, "-o", serverOptions, "-l", `${dir}/log`, "-w", "start"],
      options.wrap,
    );
  const stopServer = (mode: string) => run("pg_ctl", ["-D", data, "-m", mode, "-w", "stop"]);
  await start();
  let stopped = false;
  const onUnload = () => {
    if (stopped) return;
    // Last resort when a process ends without stop(): synchronous, as unload requires.
    const [command, ...args] = commandLine("pg_ctl", ["-D", data, "-m", "immediate", "stop"]);
    new Deno.Command(command, { args, stdout: "null", stderr: "null" }).outputSync();
    Deno.removeSync(dir, { recursive: true });
  };
  globalThis.addEventListener("unload", onUnload);
  const urlOf = (name: string) => `postgres://postgres@127.0.0.1:${port}/${name}`;
  const connection = ["-h", dir, "-p", String(port), "-U", "postgres"];
  return {
    url: urlOf("postgres"),
    port,
    urlOf,
    psql: (sql, database = "postgres") =>
      run("psql", [...connection, "-d", database, "-v", "ON_ERROR_STOP=1", "-qAtc", sql]),
    dump: (databaseUrl) => run("pg_dump", [...connection, new URL(databaseUrl).pathname.slice(1)]),
    pids: () => serverPids(data),
    pause: async () => void await stopServer("fast"),
    start: async () => void await start(),
    async stop() {
      if (stopped) return;
      stopped = true;
      globalThis.removeEventListener("unload", onUnload);
      try {
        await stopServer("immediate");
      } finally {
        await Deno.remove(dir, { recursive: true });
      }
    },
  };
}

/**
 * Writes the server's certificate and key into the data directory (the key readable by its
 * owner only, as PostgreSQL demands) and, for `hostsslOnly`, a pg_hba.conf that admits TCP
 * connections over TLS only; returns the server settings that turn TLS on.
 */
async function configureTls(data: string, tls: PostgresTlsOptions): Promise<string[]> {
  const cert = `${data}/server.crt`;
  const key = `${data}/server.key`;
  await Deno.writeTextFile(cert, tls.certPem);
  await Deno.writeTextFile(key, tls.keyPem, { mode: 0o600 });
  await Deno.chmod(key, 0o600);
  if (tls.hostsslOnly) {
    await Deno.writeTextFile(
      `${data}/pg_hba.conf`,
      "local all all trust\nhostssl all all 127.0.0.1/32 trust\n",
    );
  }
  if (isRoot) {
    const uid = Number((await runText("id", ["-u", "postgres"])).trim());
    const gid = Number((await runText("id", ["-g", "postgres"])).trim());
    for (const path of [cert, key, `${data}/pg_hba.conf`]) await Deno.chown(path, uid, gid);
  }
  return ["ssl=on", `ssl_cert_file=${cert}`, `ssl_key_file=${key}`];
}

/** The postmaster (first line of postmaster.pid) and its children, from /proc. */
function serverPids(data: string): number[] {
  let postmaster: number;
  try {
    postmaster = Number(Deno.readTextFileSync(`${data}/postmaster.pid`).split("\n")[0]);
  } catch {
    return [];
  }
  const pids = [postmaster];
  for (const entry of Deno.readDirSync("/proc")) {
    if (!/^\d+$/.test(entry.name)) continue;
    try {
      const stat = Deno.readTextFileSync(`/proc/${entry.name}/stat`);
      const parent = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      if (parent === postmaster) pids.push(Number(entry.name));
    } catch {
      // Gone meanwhile.
    }
  }
  return pids;
}

async function runText(command: string, args: string[]): Promise<string> {
  const output = await new Deno.Command(command, { args, stdout: "piped" }).output();
  return new TextDecoder().decode(output.stdout);
}

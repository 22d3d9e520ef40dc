/**
 * A throwaway PostgreSQL cluster for tests: initdb into a temporary directory, the server on a
 * free loopback port with its socket in that directory, stopped (and the directory removed) by
 * `stop()`, and at the latest when the test process exits. As root (CI), the cluster runs as
 * the `postgres` user the Debian package creates, since PostgreSQL refuses to run as root.
 * Where PostgreSQL is not installed the tests that need it are reported as ignored, except
 * under CI (env `CI` set), where they fail.
 *
 * Usage:
 *   Deno.test({ name, ignore: ignorePostgresTests, async fn() {
 *     const cluster = await startPostgres();
 *     try { const url = await cluster.createDatabase(); ... } finally { await cluster.stop(); }
 *   } });
 */

/** The newest installed PostgreSQL's binaries (env `PG_BIN` overrides), or undefined. */
export const postgresBin: string | undefined = Deno.env.get("PG_BIN") ?? newestBinDir();

/** Why PostgreSQL tests cannot run here, or undefined. */
export const postgresMissing: string | undefined = postgresBin === undefined
  ? "no /usr/lib/postgresql/*/bin/initdb (apt-get install postgresql)"
  : undefined;

/** The `ignore` of every PostgreSQL test: not installed, and not under CI. */
export const ignorePostgresTests: boolean = postgresMissing !== undefined && !Deno.env.get("CI");

/** A running throwaway cluster. */
export interface PostgresCluster {
  /** `postgres://postgres@127.0.0.1:port/postgres`. */
  url: string;
  port: number;
  /** A new empty database; its URL. */
  createDatabase(): Promise<string>;
  /** `pg_dump` of a database as SQL text. */
  dump(url: string): Promise<string>;
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

/** Runs a PostgreSQL binary, as `postgres` when we are root; throws with its output on failure. */
async function run(binary: string, args: string[]): Promise<string> {
  const path = `${postgresBin}/${binary}`;
  const [command, commandArgs] = isRoot
    ? ["runuser", ["-u", "postgres", "--", path, ...args]]
    : [path, args];
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

let databases = 0;

/** How a cluster speaks TLS (`ssl=on`), when it does. */
export interface PostgresTlsOptions {
  /** PEM of the server's certificate (for 127.0.0.1 and localhost) and its key. */
  certPem: string;
  keyPem: string;
  /** Only `hostssl` in pg_hba.conf: a connection over TCP without TLS is refused. */
  hostsslOnly?: boolean;
}

/** Initializes and starts a cluster; throws when PostgreSQL is missing. */
export async function startPostgres(
  options: { tls?: PostgresTlsOptions } = {},
): Promise<PostgresCluster> {
  if (postgresMissing) throw new Error(`PostgreSQL tests cannot run: ${postgresMissing}`);
  const dir = await Deno.makeTempDir({ prefix: "pg-test-" });
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
    "-c fsync=off",
    "-c synchronous_commit=off",
    "-c full_page_writes=off",
    "-c max_connections=200",
    ...tlsSettings,
  ].join(" ");
  const start = () =>
    run("pg_ctl", ["-D", data, "-o", serverOptions, "-l", `${dir}/log`, "-w", "start"]);
  const stopServer = (mode: string) => run("pg_ctl", ["-D", data, "-m", mode, "-w", "stop"]);
  await start();
  let stopped = false;
  const onUnload = () => {
    if (stopped) return;
    // Last resort when a test process ends without stop(): synchronous, as unload requires.
    const path = `${postgresBin}/pg_ctl`;
    const args = [path, "-D", data, "-m", "immediate", "stop"];
    new Deno.Command(isRoot ? "runuser" : path, {
      args: isRoot ? ["-u", "postgres", "--", ...args] : args.slice(1),
      stdout: "null",
      stderr: "null",
    }).outputSync();
    Deno.removeSync(dir, { recursive: true });
  };
  globalThis.addEventListener("unload", onUnload);
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  return {
    url,
    port,
    async createDatabase() {
      const name = `test_${Deno.pid}_${++databases}`;
      await run("psql", [
        "-h",
        dir,
        "-p",
        String(port),
        "-U",
        "postgres",
        "-qc",
        `CREATE DATABASE ${name}`,
      ]);
      return `postgres://postgres@127.0.0.1:${port}/${name}`;
    },
    dump: (databaseUrl) =>
      run("pg_dump", [
        "-h",
        dir,
        "-p",
        String(port),
        "-U",
        "postgres",
        new URL(databaseUrl).pathname.slice(1),
      ]),
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
  return ["-c ssl=on", `-c ssl_cert_file=${cert}`, `-c ssl_key_file=${key}`];
}

async function runText(command: string, args: string[]): Promise<string> {
  const output = await new Deno.Command(command, { args, stdout: "piped" }).output();
  return new TextDecoder().decode(output.stdout);
}

let shared: Promise<PostgresCluster> | undefined;

/**
 * One cluster for the whole test file, started on first use and stopped when the test process
 * exits (the `unload` handler of startPostgres): each test takes its own database in it.
 */
export function sharedPostgres(): Promise<PostgresCluster> {
  return shared ??= startPostgres();
}

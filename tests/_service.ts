/**
 * Runs the real service (`main.ts`) as a child process on a random loopback port, the way a
 * user starts it, and collects its log lines.
 */

/** A service process under test. */
export interface ServiceProcess {
  /** e.g. `http://127.0.0.1:41234` */
  url: string;
  /** Every line it printed so far (stdout and stderr). */
  logs: string[];
  /** SIGTERM, then waits for the exit; returns the exit code. */
  stop(): Promise<number>;
}

const MAIN = new URL("../main.ts", import.meta.url).pathname;

/** Starts `deno run main.ts` with `env` (PORT=0 and HOSTNAME=127.0.0.1 unless given). */
export async function spawnService(env: Record<string, string>): Promise<ServiceProcess> {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "--allow-net", "--allow-env", "--allow-read", "--allow-write", MAIN],
    env: { ...inheritedEnv(), PORT: "0", HOSTNAME: "127.0.0.1", ...env },
    clearEnv: true,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const logs: string[] = [];
  const { promise: listening, resolve, reject } = Promise.withResolvers<string>();
  const collect = async (stream: ReadableStream<Uint8Array>) => {
    let buffered = "";
    for await (const text of stream.pipeThrough(new TextDecoderStream())) {
      buffered += text;
      const lines = buffered.split("\n");
      buffered = lines.pop() ?? "";
      for (const line of lines) {
        logs.push(line);
        const url = line.includes('"listening"') ? JSON.parse(line).url : undefined;
        if (url) resolve(url);
      }
    }
    if (buffered) logs.push(buffered);
  };
  const readers = Promise.all([collect(child.stdout), collect(child.stderr)]);
  const status = child.status.then((s) => {
    reject(new Error(`service exited with ${s.code} before listening:\n${logs.join("\n")}`));
    return s;
  });
  const url = await listening;
  return {
    url,
    logs,
    async stop() {
      try {
        child.kill("SIGTERM");
      } catch {
        // already exited
      }
      const { code } = await status;
      await readers;
      return code;
    },
  };
}

/** What the child needs to find Deno's cache; nothing of the parent's configuration. */
function inheritedEnv(): Record<string, string> {
  const keep: Record<string, string> = {};
  for (const name of ["HOME", "PATH", "DENO_DIR", "XDG_CACHE_HOME", "NPM_CONFIG_REGISTRY"]) {
    const value = Deno.env.get(name);
    if (value !== undefined) keep[name] = value;
  }
  return keep;
}

/**
 * Running Node scripts that import npm `jose` by its bare name, offline: the jose that Deno
 * already cached for this project (the version deno.lock pins) is linked into a temporary
 * `node_modules`, and the script is copied next to it.
 */

import { join } from "node:path";

/** A Node process serving HTTP, started from `script` with `env`. */
export interface NodeServer {
  url: string;
  close(): Promise<void>;
}

/** The version of npm `jose` deno.lock pins. */
export async function lockedJoseVersion(): Promise<string> {
  const lock = JSON.parse(await Deno.readTextFile(new URL("../deno.lock", import.meta.url)));
  const entry = Object.keys(lock.npm ?? {}).find((key) => key.startsWith("jose@"));
  if (!entry) throw new Error("deno.lock pins no npm jose");
  return entry.slice("jose@".length);
}

/** Where Deno keeps npm `jose` at the version deno.lock pins. */
async function cachedJose(): Promise<string> {
  const info = await new Deno.Command(Deno.execPath(), { args: ["info", "--json"] }).output();
  const { npmCache } = JSON.parse(new TextDecoder().decode(info.stdout));
  return join(npmCache, "registry.npmjs.org", "jose", await lockedJoseVersion());
}

/** Starts `script` (a file that listens on `PORT`) with Node; waits until it listens. */
export async function startNodeServer(
  script: URL,
  env: Record<string, string>,
): Promise<NodeServer> {
  const dir = await Deno.makeTempDir();
  await Deno.mkdir(join(dir, "node_modules"));
  await Deno.symlink(await cachedJose(), join(dir, "node_modules", "jose"));
  const copy = join(dir, "server.mjs");
  await Deno.copyFile(script, copy);
  // The folder as printed: its package.json (what `npm install` reads) goes along.
  await Deno.copyFile(new URL("package.json", script), join(dir, "package.json")).catch((error) => {
    if (!(error instanceof Deno.errors.NotFound)) throw error;
  });
  const port = freePort();
  const child = new Deno.Command("node", {
    args: [copy],
    env: { ...env, PORT: String(port) },
    stdout: "null",
    stderr: "inherit",
  }).spawn();
  const close = async () => {
    child.kill();
    await child.status;
    await Deno.remove(dir, { recursive: true });
  };
  try {
    await waitUntilListening(port);
    return { url: `http://127.0.0.1:${port}`, close };
  } catch (error) {
    await close();
    throw error;
  }
}

/** Waits until something accepts connections on `port`. */
export async function waitUntilListening(port: number): Promise<void> {
  for (let attempt = 0; attempt < 200; attempt++) {
    try {
      (await Deno.connect({ hostname: "127.0.0.1", port })).close();
      return;
    } catch {
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
  throw new Error(`nothing listens on ${port}`);
}

/** A loopback port nothing listens on right now. */
export function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = listener.addr as Deno.NetAddr;
  listener.close();
  return port;
}

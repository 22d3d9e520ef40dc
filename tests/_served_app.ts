/**
 * The real app served over loopback HTTP, for clients that must reach it by URL (resource
 * servers checking tokens, a Node process). The app behind the URL can be replaced, which is
 * how a test restarts the service with other keys on the same port and KV.
 */

import { FakeClock, makeTestApp, type TestApp } from "./_helpers.ts";

/** A served app; `restart` swaps in one built with another environment. */
export interface ServedApp {
  url: string;
  current(): TestApp;
  restart(env: Record<string, string>): Promise<TestApp>;
  close(): Promise<void>;
}

/**
 * Serves makeTestApp apps (BASE_URL: the served URL) over one KV file. The fake clock starts at
 * the wall clock's time, for verifiers outside the test (Node, a child process) that read that.
 */
export async function serveTestApp(env: Record<string, string>): Promise<ServedApp> {
  let app: TestApp | undefined;
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    (request) => app ? app.app(request) : new Response("starting", { status: 503 }),
  );
  const url = `http://127.0.0.1:${server.addr.port}`;
  const dir = await Deno.makeTempDir();
  const apps: TestApp[] = [];
  const start = async (more: Record<string, string>) => {
    const previous = app;
    app = await makeTestApp({
      env: { BASE_URL: url, ...more },
      kvPath: `${dir}/kv`,
      clock: previous?.clock ?? new FakeClock(Date.now()),
      upstream: previous?.upstream,
    });
    apps.push(app);
    return app;
  };
  await start(env);
  return {
    url,
    current: () => app as TestApp,
    restart: start,
    async close() {
      await server.shutdown();
      for (const each of apps) each.close();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

/**
 * Launches the system Chromium for browser tests through playwright-core (which never
 * downloads a browser of its own). Where Chromium is not installed the browser tests are
 * reported as ignored, except under CI (env `CI` set), where a missing browser is a broken
 * machine and the tests fail loudly.
 *
 * Usage:
 *   Deno.test({ name, ignore: ignoreBrowserTests, async fn() {
 *     const browser = await launchBrowser();
 *     try { ... } finally { await browser.close(); }
 *   } });
 *
 * Needs --allow-read --allow-env --allow-run --allow-write --allow-net --allow-sys.
 */

import { type Browser, chromium, type Page } from "playwright-core";
import { type ServiceWithGitLab, spawnWithGitLab } from "./_service.ts";

/** The browser: env `CHROMIUM_PATH`, else where the Debian `chromium` package installs it. */
export const CHROMIUM_PATH = Deno.env.get("CHROMIUM_PATH") ?? "/usr/bin/chromium";

/** Flags for a quiet, headless, offline-friendly Chromium inside a container. */
export const CHROMIUM_ARGS: readonly string[] = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

/** Whether a file exists at `path`. */
function exists(path: string): boolean {
  try {
    Deno.statSync(path);
    return true;
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return false;
    throw error;
  }
}

/** Why browser tests cannot run here, or undefined when Chromium is installed. */
export const chromiumMissing: string | undefined = exists(CHROMIUM_PATH)
  ? undefined
  : `${CHROMIUM_PATH} not found (apt-get install chromium)`;

/** The `ignore` of every browser test: no Chromium, and not under CI. */
export const ignoreBrowserTests: boolean = chromiumMissing !== undefined && !Deno.env.get("CI");

/** A launched Chromium; throws when none is installed (a test that is not ignored must fail). */
export async function launchBrowser(): Promise<Browser> {
  if (chromiumMissing) throw new Error(`browser tests cannot run: ${chromiumMissing}`);
  return await chromium.launch({ executablePath: CHROMIUM_PATH, args: [...CHROMIUM_ARGS] });
}

/** A client's page on loopback, where the browser lands after sign-in. */
export interface CallbackServer {
  /** e.g. `http://127.0.0.1:40123` */
  origin: string;
  /** `origin` + the path given, e.g. `http://127.0.0.1:40123/callback` */
  url: string;
  close(): Promise<void>;
}

/** Serves a small HTML page on every path of a random loopback port. */
export function startCallbackServer(path = "/callback"): CallbackServer {
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    () =>
      new Response("<!doctype html><title>client</title><p>callback reached</p>", {
        headers: { "Content-Type": "text/html" },
      }),
  );
  const origin = `http://127.0.0.1:${server.addr.port}`;
  return { origin, url: `${origin}${path}`, close: () => server.shutdown() };
}

/** A browser, the service (a child process) aimed at a simulated GitLab, and a client's page. */
export interface BrowserRig extends ServiceWithGitLab {
  browser: Browser;
  /** A client's redirect target on loopback. */
  callback: string;
}

/** Starts a rig: GitLab application `browser-app`, the service configured with `env` on top. */
export async function startBrowserRig(env: Record<string, string> = {}): Promise<BrowserRig> {
  const browser = await launchBrowser();
  const started = await spawnWithGitLab("browser-app", env);
  const client = startCallbackServer();
  return {
    ...started,
    browser,
    callback: client.url,
    async close() {
      await browser.close();
      await started.close();
      await client.close();
    },
  };
}

/**
 * A browser test: ignored without Chromium, else runs `body` on a new page of a fresh rig
 * (the service configured with `env`), closed whatever happens.
 */
export function browserRigTest(
  name: string,
  body: (r: BrowserRig, page: Page) => Promise<void>,
  env: Record<string, string> = {},
): void {
  Deno.test({
    name,
    ignore: ignoreBrowserTests,
    sanitizeResources: false,
    sanitizeOps: false,
    async fn() {
      const r = await startBrowserRig(env);
      try {
        await body(r, await r.browser.newPage());
      } finally {
        await r.close();
      }
    },
  });
}

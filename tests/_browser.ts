/**
 * Launches the system Chromium for browser tests through playwright-core (which never
 * downloads a browser of its own). Where Chromium is not installed a test skips, except
 * under CI (env `CI` set), where a missing browser is a broken machine and fails loudly.
 *
 * Usage:
 *   const browser = await launchBrowserOrSkip(t);
 *   if (!browser) return;
 *   try { ... } finally { await browser.close(); }
 *
 * Needs --allow-read --allow-env --allow-run --allow-write --allow-net --allow-sys.
 */

import { type Browser, chromium } from "playwright-core";

/** Where the Debian `chromium` package installs the browser. */
export const CHROMIUM_PATH = "/usr/bin/chromium";

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

/** A launched Chromium, or `{skip: reason}` when none is installed and `CI` is not set. */
export async function launchBrowser(): Promise<Browser | { skip: string }> {
  try {
    await Deno.stat(CHROMIUM_PATH);
  } catch (error) {
    if (!(error instanceof Deno.errors.NotFound)) throw error;
    const reason = `${CHROMIUM_PATH} not found (apt-get install chromium)`;
    if (Deno.env.get("CI")) throw new Error(`browser tests cannot run under CI: ${reason}`);
    return { skip: reason };
  }
  return await chromium.launch({ executablePath: CHROMIUM_PATH, args: [...CHROMIUM_ARGS] });
}

/** A launched Chromium, or `undefined` after printing why test `t` skips (never under CI). */
export async function launchBrowserOrSkip(t: Deno.TestContext): Promise<Browser | undefined> {
  const browser = await launchBrowser();
  if (!("skip" in browser)) return browser;
  // deno-lint-ignore no-console -- the reason a test did not run must be visible.
  console.log(`skipping ${t.name}: ${browser.skip}`);
  return undefined;
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

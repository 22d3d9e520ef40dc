/**
 * Launches the system Chromium for browser tests through playwright-core (which never
 * downloads a browser of its own). Where Chromium is not installed a test skips, except
 * under CI (env `CI` set), where a missing browser is a broken machine and fails loudly.
 *
 * Usage:
 *   const browser = await launchBrowser();
 *   if ("skip" in browser) { t.ignore ...; return; }
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

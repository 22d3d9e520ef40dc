/**
 * Dev tool for the device page (`templates/device.html` and its script `templates/device.js`):
 * serves it with a fake `/oauth/poll`, drives it in the system Chromium and writes screenshots
 * to /tmp.
 *
 *   deno run -A dev/page_preview.ts           run the checks; screenshots: /tmp/device-page-*.png
 *   deno run -A dev/page_preview.ts --serve   only serve, and print URLs to open by hand
 *
 * `GET /authorize?scenario=NAME` renders a page whose fake poll answers:
 *   success      pending, pending, then complete with redirect_uri → /callback?keep=1
 *   failed       a non-JSON 502, then {status: failed, error: access_denied}
 *   bad-redirect complete with redirect_uri `javascript:alert(document.domain)`
 *   no-redirect  complete without redirect_uri
 *   pending      pending forever (add `&expires_in=3` to watch the countdown run out)
 * Optional: `client_name=…`, `expires_in=…`.
 *
 * Not a test: the end-to-end browser tests live in tests/ (browser_test.ts and others).
 */

// deno-lint-ignore-file no-console -- a command-line tool reports on the console

import type { Browser, BrowserContextOptions, Page } from "playwright-core";
import { loadTemplates } from "../src/pages/mod.ts";
import { chromiumMissing, ignoreBrowserTests, launchBrowser } from "../tests/_browser.ts";

const SHOTS = "/tmp/device-page";
const USER_CODE = "WDJB-MJHT";
const CODE = "code-4f8a9c";
/** A state and flow state that break naive encoding. */
const STATE = `st&te="x"</script><script>alert(1)</script> +/=`;
const SCENARIOS = ["success", "failed", "bad-redirect", "no-redirect", "pending"] as const;
type Scenario = (typeof SCENARIOS)[number];

interface Flow {
  scenario: Scenario;
  redirectUri?: string;
  /** performance.now() of each poll. */
  polls: number[];
  renderedAt: number;
}

const templates = loadTemplates();
const flows = new Map<string, Flow>();
let flowCounter = 0;

const server = Deno.serve(
  { hostname: "127.0.0.1", port: 0, onListen: () => {} },
  (request) => handle(request),
);
const origin = `http://127.0.0.1:${server.addr.port}`;

function handle(request: Request): Response {
  const url = new URL(request.url);
  if (url.pathname === "/authorize") return authorize(url);
  if (url.pathname === "/oauth/poll") return poll(url);
  if (url.pathname === "/callback") {
    return new Response(
      `<!DOCTYPE html><title>Callback</title><link rel="icon" href="data:,"><p>Callback reached`,
      {
        headers: { "Content-Type": "text/html; charset=utf-8" },
      },
    );
  }
  return new Response("not found", { status: 404 });
}

function authorize(url: URL): Response {
  const scenario = (url.searchParams.get("scenario") ?? "pending") as Scenario;
  if (!SCENARIOS.includes(scenario)) return new Response("unknown scenario", { status: 400 });
  const flowState = `flow ${++flowCounter} a+b/c=d&e</script>`;
  const redirectUri = scenario === "bad-redirect"
    ? "javascript:alert(document.domain)"
    : scenario === "no-redirect"
    ? undefined
    : `${origin}/callback?keep=1`;
  flows.set(flowState, { scenario, redirectUri, polls: [], renderedAt: performance.now() });
  const page = templates.renderDevicePage({
    userCode: USER_CODE,
    verificationUrl: `https://gitlab.com/oauth/device?user_code=${USER_CODE}`,
    expiresInSeconds: Number(url.searchParams.get("expires_in") ?? 899),
    flowState,
    pollUrl: `${origin}/oauth/poll`,
    redirectUri,
    clientId: "mcp-inspector",
    clientName: url.searchParams.get("client_name") ?? undefined,
    issuer: origin,
    upstream: { displayName: "GitLab", scopes: "api" },
  });
  return new Response(page.html, {
    headers: {
      "Content-Type": "text/html; charset=utf-8",
      "Content-Security-Policy": page.contentSecurityPolicy,
      "Cache-Control": "no-store",
    },
  });
}

function poll(url: URL): Response {
  const flow = flows.get(url.searchParams.get("flow_state") ?? "");
  if (!flow) return Response.json({ status: "expired", error: "Flow not found" }, { status: 400 });
  flow.polls.push(performance.now());
  const n = flow.polls.length;
  const complete = () =>
    Response.json({
      status: "complete",
      code: CODE,
      state: STATE,
      ...(flow.redirectUri ? { redirect_uri: flow.redirectUri } : {}),
    });
  switch (flow.scenario) {
    case "success":
      return n < 3 ? Response.json({ status: "pending" }) : complete();
    case "failed":
      return n < 2
        ? new Response("<html>Bad Gateway</html>", { status: 502 })
        : Response.json({ status: "failed", error: "access_denied" });
    case "bad-redirect":
    case "no-redirect":
      return complete();
    case "pending":
      return Response.json({ status: "pending" });
  }
}

// ---- checks ----

let failures = 0;
async function check(name: string, fn: () => Promise<void>): Promise<void> {
  try {
    await fn();
    console.log(`ok      ${name}`);
  } catch (error) {
    failures++;
    console.log(`FAILED  ${name}\n        ${error instanceof Error ? error.message : error}`);
  }
}

function expect(condition: unknown, message: string): asserts condition {
  if (!condition) throw new Error(message);
}

const PHONE: BrowserContextOptions = {
  viewport: { width: 390, height: 844 },
  deviceScaleFactor: 2,
  isMobile: true,
  hasTouch: true,
};
const DESKTOP: BrowserContextOptions = { viewport: { width: 1280, height: 800 } };

/** Opens a scenario in a fresh context; collects console errors (CSP violations show there). */
async function open(
  browser: Browser,
  query: string,
  options: BrowserContextOptions = DESKTOP,
): Promise<{ page: Page; flow: Flow; problems: string[]; close: () => Promise<void> }> {
  const context = await browser.newContext(options);
  const page = await context.newPage();
  const problems: string[] = [];
  page.on("console", (m) => m.type() === "error" && problems.push(m.text()));
  page.on("pageerror", (e) => problems.push(String(e)));
  page.on("dialog", (d) => {
    problems.push(`dialog: ${d.message()}`);
    d.dismiss();
  });
  await page.goto(`${origin}/authorize?${query}`);
  const data = JSON.parse(await page.locator("#flow-data").textContent() ?? "{}");
  const flow = flows.get(data.flowState);
  expect(flow, "flow not registered");
  return { page, flow, problems, close: () => context.close() };
}

const text = (page: Page, selector: string) => page.locator(selector).textContent();
const isHidden = async (page: Page, selector: string) =>
  (await page.locator(selector).getAttribute("hidden")) !== null;

async function runChecks(browser: Browser): Promise<void> {
  await Promise.all([
    check("countdown ticks once a second and shows m:ss", async () => {
      const { page, problems, close } = await open(browser, "scenario=pending&expires_in=125");
      const seconds = async () => {
        const shown = (await text(page, "#countdown")) ?? "";
        expect(/^\d+:[0-5]\d$/.test(shown), `countdown shows "${shown}"`);
        const [m, s] = shown.split(":").map(Number);
        return m * 60 + s;
      };
      const startedAt = performance.now();
      const first = await seconds();
      expect(first <= 125 && first >= 120, `initial countdown ${first} s`);
      await page.waitForTimeout(3000);
      const later = await seconds();
      const elapsed = (performance.now() - startedAt) / 1000;
      expect(
        first - later >= Math.floor(elapsed) - 1 && first - later <= Math.ceil(elapsed) + 1,
        `countdown went ${first} → ${later} in ${elapsed.toFixed(1)} s`,
      );
      expect(problems.length === 0, problems.join("; "));
      await close();
    }),

    check("at zero the timer hides and an expiry message shows", async () => {
      const { page, close } = await open(browser, "scenario=pending&expires_in=2");
      await page.waitForTimeout(2600);
      expect(await isHidden(page, "#countdown"), "#countdown not hidden");
      const status = await text(page, "#status");
      expect(/expired/i.test(status ?? ""), `status: ${status}`);
      await close();
    }),

    check("success: polls every 5 s, then redirects with code, state and iss", async () => {
      const { page, flow, problems, close } = await open(browser, "scenario=success");
      await page.waitForURL(/\/callback/, { timeout: 25_000 });
      const landed = new URL(page.url());
      expect(landed.origin === origin && landed.pathname === "/callback", landed.href);
      expect(landed.searchParams.get("keep") === "1", "existing query parameter lost");
      expect(landed.searchParams.get("code") === CODE, `code ${landed.searchParams.get("code")}`);
      expect(
        landed.searchParams.get("state") === STATE,
        `state ${landed.searchParams.get("state")}`,
      );
      expect(landed.searchParams.get("iss") === origin, `iss ${landed.searchParams.get("iss")}`);
      expect(flow.polls.length === 3, `${flow.polls.length} polls`);
      const gaps = flow.polls.map((t, i) => t - (i === 0 ? flow.renderedAt : flow.polls[i - 1]));
      expect(gaps.every((g) => g > 4800 && g < 7000), `poll gaps ${gaps.map(Math.round)}`);
      expect(problems.length === 0, problems.join("; "));
      await close();
    }),

    check("success: shows the returning message for about a second first", async () => {
      const { page, flow, close } = await open(browser, "scenario=success");
      await page.locator("#status", { hasText: "returning to the application" }).waitFor({
        timeout: 20_000,
      });
      const shownAt = performance.now();
      expect(
        (await text(page, "#status")) === "Signed in — returning to the application…",
        "wrong message",
      );
      await page.waitForURL(/\/callback/, { timeout: 3000 });
      const delay = performance.now() - flow.polls[2];
      expect(delay > 900 && delay < 2000, `redirect ${Math.round(delay)} ms after completion`);
      expect(performance.now() - shownAt < 1500, "message shown too long");
      await close();
    }),

    check("failed: keeps polling past a 502, then shows the error and stops", async () => {
      const { page, flow, problems, close } = await open(browser, "scenario=failed", PHONE);
      await page.locator("#status", { hasText: "Authentication failed" }).waitFor({
        timeout: 15_000,
      });
      expect(
        (await text(page, "#status")) === "Authentication failed: access_denied",
        `status: ${await text(page, "#status")}`,
      );
      expect(await isHidden(page, "#countdown"), "countdown still shown");
      await page.screenshot({ path: `${SHOTS}-phone-failed.png` });
      await page.waitForTimeout(5600);
      expect(flow.polls.length === 2, `${flow.polls.length} polls: polling did not stop`);
      // The 502 is the only console error expected.
      expect(problems.every((p) => p.includes("502")), problems.join("; "));
      await close();
    }),

    check("a javascript: redirect_uri is refused", async () => {
      const { page, problems, close } = await open(browser, "scenario=bad-redirect");
      await page.locator("#status", { hasText: "Authentication failed" }).waitFor({
        timeout: 10_000,
      });
      expect(
        (await text(page, "#status")) === "Authentication failed: invalid redirect_uri",
        `status: ${await text(page, "#status")}`,
      );
      await page.waitForTimeout(1500);
      expect(new URL(page.url()).pathname === "/authorize", `navigated to ${page.url()}`);
      expect(problems.length === 0, problems.join("; "));
      const client = await text(page, "#client");
      expect(
        client?.includes("return to: an address this page will not open (javascript:)"),
        `client line: ${client}`,
      );
      await close();
    }),

    check("no redirect_uri: tells the user to close the tab", async () => {
      const { page, close } = await open(browser, "scenario=no-redirect", PHONE);
      await page.locator("#status", { hasText: "Signed in" }).waitFor({ timeout: 10_000 });
      const status = await text(page, "#status");
      expect(/close this tab/.test(status ?? ""), `status: ${status}`);
      const client = await text(page, "#client");
      expect(!client?.includes("return to"), "return line shown without redirect_uri");
      await page.screenshot({ path: `${SHOTS}-phone-success.png` });
      await close();
    }),

    check("copy button writes the code to the clipboard", async () => {
      const { page, close } = await open(browser, "scenario=pending");
      await page.context().grantPermissions(["clipboard-read", "clipboard-write"], { origin });
      await page.bringToFront(); // the clipboard API wants a focused document
      await page.click("#copy-button");
      await page.locator("#copy-label", { hasText: "Copied" }).waitFor({ timeout: 2000 });
      const copied = await page.evaluate<string>("navigator.clipboard.readText()");
      expect(copied === USER_CODE, `clipboard holds ${copied}`);
      await close();
    }),

    check("copy falls back to selecting the code without a clipboard API", async () => {
      const context = await browser.newContext(DESKTOP);
      await context.addInitScript(
        'Object.defineProperty(navigator, "clipboard", { value: undefined })',
      );
      const page = await context.newPage();
      await page.goto(`${origin}/authorize?scenario=pending`);
      await page.click("#copy-button");
      const selected = await page.evaluate<string>("getSelection().toString().trim()");
      expect(selected === USER_CODE, `selection is ${selected}`);
      expect((await text(page, "#copy-label")) === "Selected", "no feedback");
      await context.close();
    }),

    check("link, steps and client line", async () => {
      const { page, close } = await open(browser, "scenario=pending&client_name=Acme Assistant");
      const link = page.locator("#verify-link");
      expect(
        (await link.getAttribute("href")) ===
          `https://gitlab.com/oauth/device?user_code=${USER_CODE}`,
        "href",
      );
      expect((await link.getAttribute("target")) === "_blank", "target");
      expect((await page.locator("#steps > li").count()) === 5, "five steps");
      const client = (await text(page, "#client"))?.replace(/\s+/g, " ").trim();
      expect(
        client === "Acme Assistant wants to sign you in After sign-in you will return to: " +
            new URL(origin).origin,
        `client: ${client}`,
      );
      await close();
    }),
  ]);

  // Screenshots of the waiting page.
  for (
    const [name, options, query] of [
      ["phone", PHONE, "client_name=Acme Assistant"],
      ["phone-dark", { ...PHONE, colorScheme: "dark" }, "client_name=Acme Assistant"],
      ["desktop", DESKTOP, ""],
      ["desktop-dark", { ...DESKTOP, colorScheme: "dark" }, ""],
    ] as const
  ) {
    const { page, close } = await open(browser, `scenario=pending&${query}`, options);
    await page.screenshot({ path: `${SHOTS}-${name}.png` });
    await page.screenshot({ path: `${SHOTS}-${name}-full.png`, fullPage: true });
    await close();
  }
}

if (Deno.args.includes("--serve")) {
  console.log(`Serving on ${origin}`);
  for (const s of SCENARIOS) console.log(`  ${origin}/authorize?scenario=${s}`);
} else if (ignoreBrowserTests) {
  console.log(`skipped: ${chromiumMissing}`);
} else {
  const browser = await launchBrowser();
  try {
    await runChecks(browser);
  } finally {
    await browser.close();
    await server.shutdown();
  }
  console.log(failures === 0 ? `all checks passed; screenshots: ${SHOTS}-*.png` : "");
  if (failures > 0) Deno.exit(1);
}

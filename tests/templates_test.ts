import assert from "node:assert/strict";
import {
  createTemplates,
  type DevicePageValues,
  escapeHtml,
  jsonForScript,
  loadTemplates,
  PAGE_TIMINGS,
  type TemplateSources,
} from "../src/pages/mod.ts";
import deviceHtml from "../templates/device.html" with { type: "text" };
import deviceJs from "../templates/device.js" with { type: "text" };
import homeHtml from "../templates/home.html" with { type: "text" };

const BASE: DevicePageValues = {
  userCode: "ABCD-1234",
  verificationUrl: "https://gitlab.example/oauth/device?user_code=ABCD-1234",
  expiresInSeconds: 900,
  flowState: "flow-state-value",
  pollUrl: "https://auth.example:8443/oauth/poll",
  redirectUri: "https://app.example/callback?x=1",
  clientId: "client-123",
  issuer: "https://auth.example:8443",
  upstream: { displayName: "GitLab", scopes: "api" },
};

/** The parsed content of the page's single JSON data block. */
function flowData(html: string): Record<string, unknown> {
  const blocks = [
    ...html.matchAll(/<script type="application\/json" id="flow-data"[^>]*>([\s\S]*?)<\/script>/g),
  ];
  assert.equal(blocks.length, 1);
  return JSON.parse(blocks[0][1]);
}

/** The markup between the opening tag with `id` and the next closing `</tag>`. */
function elementText(html: string, tag: string, id: string): string {
  const match = html.match(new RegExp(`<${tag}\\b[^>]*\\bid="${id}"[^>]*>([\\s\\S]*?)</${tag}>`));
  assert.ok(match, `#${id} not found`);
  return match[1];
}

Deno.test("escapeHtml", async (t) => {
  await t.step("escapes the five significant characters", () => {
    assert.equal(
      escapeHtml(`<a href="x" title='y'>&</a>`),
      "&lt;a href=&quot;x&quot; title=&#39;y&#39;&gt;&amp;&lt;/a&gt;",
    );
  });
  await t.step("leaves other text alone", () => {
    assert.equal(escapeHtml("ABCD-1234 ü ✓"), "ABCD-1234 ü ✓");
  });
});

Deno.test("jsonForScript", async (t) => {
  const hostile = { s: "</script><script>alert(1)</script>&\u2028\u2029'\"" };
  const json = jsonForScript(hostile);

  await t.step("contains none of < > & U+2028 U+2029", () => {
    assert.doesNotMatch(json, /[<>&\u2028\u2029]/);
    assert.ok(json.includes("\\u003c/script\\u003e"));
    assert.ok(json.includes("\\u0026"));
    assert.ok(json.includes("\\u2028\\u2029"));
  });
  await t.step("parses back to the original value", () => {
    assert.deepEqual(JSON.parse(json), hostile);
  });
  await t.step("rejects values without a JSON form", () => {
    assert.throws(() => jsonForScript(undefined), TypeError);
  });
});

Deno.test("renderDevicePage", async (t) => {
  const templates = loadTemplates();

  await t.step("escapes hostile values in markup and in the data block", () => {
    const xssRedirect = `https://app.example/cb?a="><script>alert(1)</script>`;
    const clientName = `<img src=x onerror="alert(2)">Evil & Co 'quoted'`;
    const flowState = `</script><script>alert(3)</script>"'&\u2028`;
    const userCode = `<b>CODE</b>`;
    const { html } = templates.renderDevicePage({
      ...BASE,
      userCode,
      redirectUri: xssRedirect,
      clientName,
      flowState,
    });
    for (const payload of ["<script>alert", "<img", 'onerror="alert', "<b>CODE"]) {
      assert.ok(!html.includes(payload), `raw payload ${payload} in page`);
    }
    assert.equal(html.match(/<script\b/g)?.length, 2, "exactly the data block and the page script");
    assert.ok(html.includes(escapeHtml(clientName)));
    assert.ok(html.includes(escapeHtml(userCode)));

    const data = flowData(html);
    assert.equal(data.flowState, flowState);
    assert.equal(data.pollUrl, BASE.pollUrl);
    assert.equal(data.issuer, BASE.issuer);
    assert.equal(data.expiresInSeconds, 900);
  });

  await t.step("an unparseable redirect_uri is shown escaped, whole", () => {
    const redirectUri = `"><script>alert(4)</script>`;
    const { html } = templates.renderDevicePage({ ...BASE, redirectUri });
    assert.ok(!html.includes("<script>alert(4)"));
    assert.ok(elementText(html, "div", "client").includes(escapeHtml(redirectUri)));
  });

  await t.step("the data block carries the timings of spec §8", () => {
    const data = flowData(templates.renderDevicePage(BASE).html);
    assert.equal(data.pollIntervalMs, 5000);
    assert.equal(data.countdownTickMs, 1000);
    assert.equal(data.redirectDelayMs, 1000);
    assert.equal(data.pollTimeoutMs, PAGE_TIMINGS.pollTimeoutMs);
  });

  await t.step("issuer is left out of the data block when not given", () => {
    const data = flowData(templates.renderDevicePage({ ...BASE, issuer: undefined }).html);
    assert.ok(!("issuer" in data));
  });

  await t.step("the link goes to verificationUrl in a new tab", () => {
    const { html } = templates.renderDevicePage(BASE);
    const link = html.match(/<a\b[^>]*\bid="verify-link"[^>]*>/)?.[0];
    assert.ok(link);
    assert.ok(link.includes(`href="${escapeHtml(BASE.verificationUrl)}"`));
    assert.ok(link.includes(`target="_blank"`));
    assert.ok(link.includes(`rel="noopener noreferrer"`));
  });

  await t.step("the user code is shown", () => {
    const { html } = templates.renderDevicePage(BASE);
    assert.equal(elementText(html, "p", "user-code"), "ABCD-1234");
  });

  await t.step("shows the client name, else the client id, and the return host", () => {
    const named = elementText(
      templates.renderDevicePage({ ...BASE, clientName: "Acme Tool" }).html,
      "div",
      "client",
    );
    assert.ok(named.includes("Acme Tool"));
    assert.ok(!named.includes("client-123"));
    assert.match(named, /wants to sign you in/);
    assert.match(
      named,
      /After sign-in you will return to: <strong><bdi>https:\/\/app\.example<\/bdi>/,
    );

    const unnamed = elementText(templates.renderDevicePage(BASE).html, "div", "client");
    assert.ok(unnamed.includes("client-123"));
  });

  await t.step("the page says where the code goes: scheme and host, or an app", () => {
    const shown = (redirectUri: string) =>
      elementText(templates.renderDevicePage({ ...BASE, redirectUri }).html, "div", "client")
        .match(/return to: <strong><bdi>([^<]*)<\/bdi>/)?.[1];
    assert.equal(shown("https://claude.ai/api/mcp/auth_callback"), "https://claude.ai");
    assert.equal(shown("http://127.0.0.1:33418/callback"), "http://127.0.0.1:33418");
    assert.equal(shown("http://[::1]:8080/cb"), "http://[::1]:8080");
    assert.equal(
      shown("cursor://anysphere.cursor-mcp/oauth/callback"),
      "an app on this device (cursor://)",
    );
    assert.equal(shown("vscode://vscode.mcp/callback"), "an app on this device (vscode://)");
    assert.equal(shown("ms-word:ofe|u|https://x"), "an app on this device (ms-word:)");
    assert.equal(
      shown("com.example.app:/oauth2redirect"),
      "an app on this device (com.example.app:)",
    );
    assert.equal(
      shown("javascript:alert(1)"),
      "an address this page will not open (javascript:)",
    );
  });

  await t.step("omits the return line without a redirect_uri", () => {
    const client = elementText(
      templates.renderDevicePage({ ...BASE, redirectUri: undefined }).html,
      "div",
      "client",
    );
    assert.ok(!client.includes("return to"));
  });

  await t.step("the CSP nonce matches every script and style, and changes per render", () => {
    const first = templates.renderDevicePage(BASE);
    const second = templates.renderDevicePage(BASE);
    const nonceOf = (csp: string) => csp.match(/script-src 'nonce-([^']+)'/)?.[1];
    const nonce = nonceOf(first.contentSecurityPolicy);
    assert.ok(nonce && nonce.length >= 16);
    assert.ok(first.contentSecurityPolicy.includes(`style-src 'nonce-${nonce}'`));
    const tags = [...first.html.matchAll(/<(?:script|style)\b[^>]*>/g)].map((m) => m[0]);
    assert.equal(tags.length, 3);
    for (const tag of tags) assert.ok(tag.includes(`nonce="${nonce}"`), tag);
    assert.notEqual(nonceOf(second.contentSecurityPolicy), nonce);
  });

  await t.step("the CSP is strict and lets the page reach the poll origin only", () => {
    const csp = templates.renderDevicePage(BASE).contentSecurityPolicy;
    const directives = new Map(
      csp.split(";").map((d) => d.trim().split(/\s+/)).map(([k, ...v]) => [k, v.join(" ")]),
    );
    assert.equal(directives.get("default-src"), "'none'");
    assert.equal(directives.get("connect-src"), "https://auth.example:8443");
    assert.equal(directives.get("img-src"), "data:");
    assert.equal(directives.get("base-uri"), "'none'");
    assert.equal(directives.get("form-action"), "'none'");
    assert.equal(directives.get("frame-ancestors"), "'none'");
  });

  await t.step("five numbered steps", () => {
    const { html } = templates.renderDevicePage(BASE);
    const steps = html.match(/<ol\b[^>]*\bid="steps"[^>]*>([\s\S]*?)<\/ol>/)?.[1];
    assert.ok(steps);
    assert.equal(steps.match(/<li\b/g)?.length, 5);
  });

  await t.step("the countdown starts at expires_in as m:ss", () => {
    const { html } = templates.renderDevicePage({ ...BASE, expiresInSeconds: 599 });
    assert.equal(elementText(html, "time", "countdown"), "9:59");
  });

  await t.step("the status region is a polite live region", () => {
    const { html } = templates.renderDevicePage(BASE);
    const tag = html.match(/<[a-z]+\b[^>]*\bid="status"[^>]*>/)?.[0];
    assert.ok(tag?.includes(`role="status"`));
    assert.ok(tag?.includes(`aria-live="polite"`));
  });

  await t.step("is self-contained", () => {
    const { html } = templates.renderDevicePage(BASE);
    assert.doesNotMatch(html, /<link\b[^>]*rel="stylesheet"/);
    assert.doesNotMatch(html, /<script\b[^>]*\bsrc=/);
    assert.doesNotMatch(html, /@import|@font-face|url\(/);
    assert.doesNotMatch(html, /\{\{|\}\}/, "no placeholder left");
  });

  await t.step("rejects a verification URL that is not http(s)", () => {
    assert.throws(
      () => templates.renderDevicePage({ ...BASE, verificationUrl: "javascript:alert(1)" }),
      TypeError,
    );
  });
});

Deno.test("createTemplates checks the templates it is given", async (t) => {
  const good: TemplateSources = { deviceHtml, deviceJs, homeHtml };
  const withPage = (html: string) => () => createTemplates({ ...good, deviceHtml: html });
  const withScript = (js: string) => () => createTemplates({ ...good, deviceJs: js });

  await t.step("builds a renderer from given sources", () => {
    const templates = createTemplates(good);
    assert.ok(templates.renderDevicePage(BASE).html.includes("ABCD-1234"));
    assert.equal(templates.homePage.html, homeHtml);
  });

  await t.step("inlines the script into the nonce'd script element", () => {
    const { html } = createTemplates({ ...good, deviceJs: "void 0;\n" })
      .renderDevicePage(BASE);
    assert.match(html, /<script nonce="[^"]+">void 0;\n<\/script>/);
  });

  await t.step("throws when a placeholder is missing", () => {
    assert.throws(withPage(deviceHtml.replaceAll(/\{\{\s*userCode\s*\}\}/g, "CODE")), /userCode/);
  });

  await t.step("throws on an unknown placeholder", () => {
    assert.throws(withPage(deviceHtml.replace("</main>", "{{secret}}</main>")), /secret/);
  });

  await t.step("throws when a value would be inserted raw", () => {
    assert.throws(
      withPage(deviceHtml.replace(/\{\{\s*userCode\s*\}\}/, "{{{userCode}}}")),
      /userCode/,
    );
  });

  await t.step("throws when a script lacks the nonce", () => {
    assert.throws(
      withPage(
        deviceHtml.replace(
          `<script type="application/json" id="flow-data" nonce="{{nonce}}">`,
          `<script type="application/json" id="flow-data">`,
        ),
      ),
      /nonce/,
    );
    assert.throws(withPage(deviceHtml.replace(`<script nonce="{{nonce}}">`, "<script>")), /nonce/);
  });

  await t.step("throws unless the script is included once, as a whole script element", () => {
    const element = `<script nonce="{{nonce}}">{{> device.js}}</script>`;
    assert.ok(deviceHtml.includes(element));
    assert.throws(withPage(deviceHtml.replace(element, "")), /device\.js/);
    assert.throws(withPage(deviceHtml.replace("</main>", "{{> device.js}}</main>")), /device\.js/);
    assert.throws(
      withPage(
        deviceHtml.replace(element, `<script nonce="{{nonce}}">1; {{> device.js}}</script>`),
      ),
      /device\.js/,
    );
  });

  await t.step("throws when the script would end or confuse its element", () => {
    assert.throws(withScript(`${deviceJs}\n// "</script>"\n`), /<\/script/);
    assert.throws(withScript(`${deviceJs}\n// "</SCRIPT >"\n`), /<\/script/);
    assert.throws(withScript(`${deviceJs}\n// <!-- <script>\n`), /<!--/);
  });

  await t.step("throws when the script holds placeholder syntax", () => {
    assert.throws(withScript(`${deviceJs}\n// {{nonce}}\n`), /placeholder/);
  });
});

Deno.test("every page renders whole: nested sections open and close, no template marker is left", () => {
  const templates = loadTemplates();
  const consent = {
    clientId: "client-123",
    redirectUri: "http://127.0.0.1:33418/callback",
    signInId: "sign-in-id",
    csrfToken: "csrf-token",
    actionUrl: "https://auth.example/oauth/consent",
    upstream: { displayName: "GitLab", url: new URL("https://gitlab.example"), scopes: "api" },
  };
  const pages = {
    "device page, registered name": templates.renderDevicePage({ ...BASE, clientName: "App" }),
    "device page, verified": templates.renderDevicePage({
      ...BASE,
      clientName: "App",
      clientVerifiedHost: "app.example",
    }),
    "consent page, no name": templates.renderConsentPage(consent),
    "consent page, registered name": templates.renderConsentPage({ ...consent, clientName: "App" }),
    "consent page, verified": templates.renderConsentPage({
      ...consent,
      clientName: "App",
      clientVerifiedHost: "app.example",
    }),
    "notice page": templates.renderNoticePage({ title: "Sign-in failed", message: "Gone." }),
  };
  for (const [name, { html }] of Object.entries(pages)) {
    assert.doesNotMatch(html, /\{\{|\}\}/, name);
  }
  const client = (name: keyof typeof pages) => elementText(pages[name].html, "dd", "client");
  assert.match(client("consent page, no name"), /^<code><bdi>client-123<\/bdi><\/code>$/);
  assert.match(client("consent page, registered name"), /App.*not verified/);
  assert.doesNotMatch(client("consent page, verified"), /not verified/);
  assert.match(client("consent page, verified"), /published by <strong><bdi>app\.example/);
});

Deno.test("createTemplates refuses a section that is not closed", () => {
  const good: TemplateSources = { deviceHtml, deviceJs, homeHtml };
  assert.throws(
    () =>
      createTemplates({
        ...good,
        deviceHtml: deviceHtml.replace("</main>", "{{#userCode}}</main>"),
      }),
    /not closed/,
  );
});

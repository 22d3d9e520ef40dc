/**
 * The HTML page `GET /authorize` answers, rendered from `templates/device.html` with values
 * escaped by default, and the strict Content-Security-Policy that goes with each rendering.
 *
 * Template syntax (mustache-like; blanks inside the braces are allowed, as `deno fmt` adds
 * them): `{{name}}` is HTML-escaped, `{{{name}}}` is inserted raw (only values built
 * here as script-safe JSON may be), `{{#name}}…{{/name}}` is kept when the value is non-empty
 * and `{{^name}}…{{/name}}` when it is empty. HTML comments are dropped at load, and
 * `{{> device.js}}` is replaced by `templates/device.js`, the page's script.
 *
 * The templates are imported as text, so they are part of the module graph: `deno compile` and
 * Deno Deploy embed them, and nothing is read from disk at start-up.
 *
 * @see spec §4.1 and §8, RFC 9207 (the `iss` the page adds to the redirect)
 */

import deviceHtml from "../templates/device.html" with { type: "text" };
import deviceJs from "../templates/device.js" with { type: "text" };
import homeHtml from "../templates/home.html" with { type: "text" };
import signInHtml from "../templates/sign_in.html" with { type: "text" };
import { UNSAFE_REDIRECT_SCHEMES } from "./clients/uri_schemes.ts";

/** What the device page shows and what its script needs. */
export interface DevicePageValues {
  userCode: string;
  /** Where the "Open GitLab" button goes, already chosen: `verification_uri_complete` or plain. */
  verificationUrl: string;
  /** Upstream `expires_in`: the page's countdown starts here. */
  expiresInSeconds: number;
  flowState: string;
  /** Absolute URL of `{base}/oauth/poll`. */
  pollUrl: string;
  /** The authorization request's `redirect_uri`; its host is shown to the user. */
  redirectUri?: string;
  clientId: string;
  /** Shown instead of the client id when known. */
  clientName?: string;
  /**
   * The host of a metadata document client id, shown as verified; without it a client name
   * (from `/register`) is shown as unverified.
   */
  clientVerifiedHost?: string;
  /** When set, the page adds `iss` to the redirect (RFC 9207). */
  issuer?: string;
}

/** A rendered page and the Content-Security-Policy header it must be served with. */
export interface RenderedPage {
  html: string;
  contentSecurityPolicy: string;
}

/** The texts the renderer is built from: the files of `templates/`, or test variants. */
export interface TemplateSources {
  /** The device page, with `{{> device.js}}` as the whole content of its nonce'd script. */
  deviceHtml: string;
  /** The device page's script, inlined where device.html says `{{> device.js}}`. */
  deviceJs: string;
  /** The static page at `/`, served as is. */
  homeHtml: string;
  /**
   * The pages of the redirect sign-in: the consent form, or a notice (title and message);
   * default `templates/sign_in.html`.
   */
  signInHtml?: string;
}

/** What the consent page of the redirect sign-in (GITLAB_SIGN_IN=redirect) shows and posts. */
export interface ConsentPageValues {
  clientId: string;
  /**
   * The client's name, shown instead of the client id when known: marked unverified unless
   * `clientVerifiedHost` vouches for it.
   */
  clientName?: string;
  /** The host of a metadata document client id, shown as verified. */
  clientVerifiedHost?: string;
  /** Where the browser returns; its scheme and host are shown. */
  redirectUri: string;
  /** The upstream scopes asked for, space-separated. */
  scopes: string;
  /** The pending sign-in the form continues. */
  signInId: string;
  csrfToken: string;
  /** Absolute URL the form posts to. */
  actionUrl: string;
  /** The upstream's origin, where "Continue" leads (allowed by the page's `form-action`). */
  upstreamOrigin: string;
}

/** A page that only tells something: a failed or refused sign-in. */
export interface NoticePageValues {
  title: string;
  message: string;
}

/** Renders the service's HTML pages; rendering does no I/O. */
export interface Templates {
  /** The device-flow page of spec §4.1. Throws TypeError on a non-http(s) URL or bad expiry. */
  renderDevicePage(values: DevicePageValues): RenderedPage;
  /** The static page at `/` (metadata's `service_documentation`); it interpolates nothing. */
  homePage: RenderedPage;
  /** The consent page of the redirect sign-in. Throws TypeError on a non-http(s) URL. */
  renderConsentPage(values: ConsentPageValues): RenderedPage;
  /** A notice page (no script). */
  renderNoticePage(values: NoticePageValues): RenderedPage;
}

/** The page's timings in milliseconds (spec §8), handed to its script in the data block. */
export const PAGE_TIMINGS = {
  pollIntervalMs: 5000,
  countdownTickMs: 1000,
  redirectDelayMs: 1000,
  /** A poll request still unanswered after this long is abandoned and the next one scheduled. */
  pollTimeoutMs: 30_000,
} as const;

/** Every placeholder device.html must use, and the only ones it may use. */
const DEVICE_PLACEHOLDERS = {
  escaped: [
    "nonce",
    "userCode",
    "verificationUrl",
    "clientId",
    "clientName",
    "verifiedHost",
    "unverifiedName",
    "returnHost",
    "expiresIn",
  ],
  raw: ["flowDataJson"],
} as const;

type DeviceSlots = Record<
  (typeof DEVICE_PLACEHOLDERS.escaped)[number] | (typeof DEVICE_PLACEHOLDERS.raw)[number],
  string
>;

/** Every placeholder sign_in.html must use, and the only ones it may use. */
const SIGN_IN_PLACEHOLDERS = {
  escaped: [
    "nonce",
    "title",
    "message",
    "clientId",
    "clientName",
    "verifiedHost",
    "unverifiedName",
    "returnHost",
    "scopes",
    "signInId",
    "csrfToken",
    "actionUrl",
  ],
  raw: [],
} as const;

/** A template's placeholders: HTML-escaped ones and raw ones. */
interface Placeholders {
  escaped: readonly string[];
  raw: readonly string[];
}

type Slots = Record<string, string>;

const SECTION = /\{\{\s*([#^])\s*(\w+)\s*\}\}([\s\S]*?)\{\{\s*\/\s*\2\s*\}\}/g;
const PLACEHOLDER = /\{\{\{\s*(\w+)\s*\}\}\}|\{\{\s*(\w+)\s*\}\}/g;
const NONCE_ATTRIBUTE = /\snonce="\{\{\s*nonce\s*\}\}"/;
const FLOW_DATA_SCRIPT =
  /<script type="application\/json" id="flow-data"[^>]*>\{\{\{\s*flowDataJson\s*\}\}\}<\/script>/;
const COMMENT = /<!--[\s\S]*?-->/g;
const SCRIPT_INCLUDE = /\{\{>\s*device\.js\s*\}\}/g;
const SCRIPT_INCLUDE_ELEMENT =
  /<script nonce="\{\{\s*nonce\s*\}\}">\{\{>\s*device\.js\s*\}\}<\/script>/;
/** What would end, or change the parsing of, the script element the script is inlined into. */
const UNSAFE_IN_SCRIPT = /<\/script|<!--/i;

/** The renderer for the repository's `templates/`, which are embedded in the module graph. */
export function loadTemplates(): Templates {
  return createTemplates({ deviceHtml, deviceJs, homeHtml });
}

/**
 * Checks the template sources and returns a renderer; a broken template throws here, at load,
 * rather than when a page is rendered.
 */
export function createTemplates(sources: TemplateSources): Templates {
  const device = compile(
    inlineScript(sources.deviceHtml.replace(COMMENT, ""), sources.deviceJs),
    "device.html",
    DEVICE_PLACEHOLDERS,
  );
  const signIn = compile(
    (sources.signInHtml ?? signInHtml).replace(COMMENT, ""),
    "sign_in.html",
    SIGN_IN_PLACEHOLDERS,
  );
  return {
    homePage: {
      html: sources.homeHtml,
      contentSecurityPolicy:
        "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; " +
        "frame-ancestors 'none'",
    },
    renderDevicePage(values) {
      const nonce = newNonce();
      return {
        html: device(deviceSlots(values, nonce)),
        contentSecurityPolicy: contentSecurityPolicy(nonce, new URL(values.pollUrl).origin),
      };
    },
    renderConsentPage(values) {
      const nonce = newNonce();
      const upstream = new URL(httpUrl(values.upstreamOrigin, "upstreamOrigin"));
      const formTargets = [
        new URL(httpUrl(values.actionUrl, "actionUrl")).origin,
        upstream.origin,
        // Chromium holds every redirect after "Continue" to form-action, and GitLab may send the
        // browser on to a sign-in provider of its own (SAML, OpenID Connect): any origin of
        // GitLab's scheme may follow.
        upstream.protocol,
        returnSource(values.redirectUri),
      ];
      return {
        html: signIn({
          nonce,
          title: "Sign in with GitLab",
          message: "",
          clientId: values.clientId,
          clientName: values.clientName ?? "",
          ...clientIdentity(values.clientName, values.clientVerifiedHost),
          returnHost: returnTarget(values.redirectUri),
          scopes: values.scopes,
          signInId: values.signInId,
          csrfToken: values.csrfToken,
          actionUrl: values.actionUrl,
        }),
        contentSecurityPolicy: formPagePolicy(nonce, formTargets),
      };
    },
    renderNoticePage(values) {
      const nonce = newNonce();
      return {
        html: signIn({
          nonce,
          ...values,
          clientId: "",
          clientName: "",
          verifiedHost: "",
          unverifiedName: "",
          returnHost: "",
          scopes: "",
          signInId: "",
          csrfToken: "",
          actionUrl: "",
        }),
        contentSecurityPolicy: formPagePolicy(nonce, []),
      };
    },
  };
}

function newNonce(): string {
  return crypto.getRandomValues(new Uint8Array(18)).toBase64();
}

/**
 * The CSP source a form may lead to when the browser returns to `redirectUri` (after Cancel):
 * the origin of a web address, the scheme of an app's. Chromium applies `form-action` to the
 * redirects that follow a form's submission too. A CSP host source cannot name an IPv6 literal
 * (Chromium drops `http://[::1]:8080` as invalid, blocking the return), so the scheme stands in.
 */
function returnSource(redirectUri: string): string {
  const url = new URL(redirectUri);
  const web = url.protocol === "https:" || url.protocol === "http:";
  return web && !url.hostname.startsWith("[") ? url.origin : url.protocol;
}

/** No script at all; styles by nonce; forms only to `formTargets`. */
function formPagePolicy(nonce: string, formTargets: string[]): string {
  return [
    "default-src 'none'",
    `style-src 'nonce-${nonce}'`,
    "img-src data:",
    "base-uri 'none'",
    `form-action ${formTargets.length > 0 ? formTargets.join(" ") : "'none'"}`,
    "frame-ancestors 'none'",
  ].join("; ");
}

/** Escapes `& < > " '` so a string is inert in HTML text and quoted attribute values. */
export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => HTML_ESCAPES[c]);
}

const HTML_ESCAPES: Record<string, string> = {
  "&": "&amp;",
  "<": "&lt;",
  ">": "&gt;",
  '"': "&quot;",
  "'": "&#39;",
};

/** JSON that is safe inside a `<script>` element: `< > &` U+2028 U+2029 become `\uXXXX`. */
export function jsonForScript(value: unknown): string {
  const json = JSON.stringify(value);
  if (json === undefined) throw new TypeError("value cannot be represented as JSON");
  return json.replace(
    /[<>&\u2028\u2029]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
}

function deviceSlots(values: DevicePageValues, nonce: string): DeviceSlots {
  const verificationUrl = httpUrl(values.verificationUrl, "verificationUrl");
  httpUrl(values.pollUrl, "pollUrl");
  const expiresIn = values.expiresInSeconds;
  if (!Number.isFinite(expiresIn) || expiresIn < 0) {
    throw new TypeError(`expiresInSeconds must be a non-negative number, got ${expiresIn}`);
  }
  const seconds = Math.floor(expiresIn);
  const flowData = {
    flowState: values.flowState,
    pollUrl: values.pollUrl,
    expiresInSeconds: seconds,
    ...(values.issuer ? { issuer: values.issuer } : {}),
    ...PAGE_TIMINGS,
  };
  return {
    nonce,
    userCode: values.userCode,
    verificationUrl,
    clientId: values.clientId,
    clientName: values.clientName ?? "",
    ...clientIdentity(values.clientName, values.clientVerifiedHost),
    returnHost: values.redirectUri ? returnTarget(values.redirectUri) : "",
    expiresIn: `${Math.floor(seconds / 60)}:${String(seconds % 60).padStart(2, "0")}`,
    flowDataJson: jsonForScript(flowData),
  };
}

/**
 * What the user is told they return to: scheme and host of a web address
 * (`https://claude.ai`, `http://127.0.0.1:33418`); for any other scheme, that an app on this
 * device will get the code (`cursor://`), never a bare word that reads like a host.
 */
export function returnTarget(redirectUri: string): string {
  let url: URL;
  try {
    url = new URL(redirectUri);
  } catch {
    return redirectUri;
  }
  if (url.protocol === "https:" || url.protocol === "http:") return `${url.protocol}//${url.host}`;
  const scheme = redirectUri.slice(url.protocol.length).startsWith("//")
    ? `${url.protocol}//`
    : url.protocol;
  return UNSAFE_REDIRECT_SCHEMES.includes(url.protocol)
    ? `an address this page will not open (${scheme})`
    : `an app on this device (${scheme})`;
}

function httpUrl(raw: string, name: string): string {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new TypeError(`${name} is not an absolute URL`);
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") {
    throw new TypeError(`${name} must be an http or https URL`);
  }
  return raw;
}

function contentSecurityPolicy(nonce: string, pollOrigin: string): string {
  return [
    "default-src 'none'",
    `script-src 'nonce-${nonce}'`,
    `style-src 'nonce-${nonce}'`,
    `connect-src ${pollOrigin}`,
    "img-src data:",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join("; ");
}

/**
 * Puts the page's script where the page says `{{> device.js}}`. The script becomes part of the
 * template, so it must neither close its element early nor hold placeholder syntax.
 */
function inlineScript(html: string, script: string): string {
  if (UNSAFE_IN_SCRIPT.test(script)) {
    throw new Error("device.js: contains </script or <!--, which would break its script element");
  }
  if (script.includes("{{")) throw new Error("device.js: {{ would be read as a placeholder");
  if (html.match(SCRIPT_INCLUDE)?.length !== 1 || !SCRIPT_INCLUDE_ELEMENT.test(html)) {
    throw new Error(
      `device.html: {{> device.js}} must appear once, as the whole content of <script nonce="{{nonce}}">`,
    );
  }
  return html.replace(SCRIPT_INCLUDE, () => script);
}

/**
 * Checks a template against the placeholders it must use and returns its render function:
 * a template missing one, or using an unknown one, or with a script or style element without
 * the nonce, is a programming error reported at load.
 */
function compile(
  template: string,
  name: string,
  placeholders: Placeholders,
): (slots: Slots) => string {
  const escaped = new Set<string>(placeholders.escaped);
  const raw = new Set<string>(placeholders.raw);
  const unfolded = unfoldSections(template);
  if (/\{\{\s*[#^/]/.test(unfolded.text)) throw new Error(`${name}: a section is not closed`);
  const seen = new Set<string>(unfolded.names);
  for (const [, rawName, escapedName] of unfolded.text.matchAll(PLACEHOLDER)) {
    if (rawName !== undefined && !raw.has(rawName)) {
      throw new Error(`${name}: {{{${rawName}}}} is not a raw placeholder`);
    }
    if (escapedName !== undefined && !escaped.has(escapedName)) {
      throw new Error(`${name}: unknown placeholder {{${escapedName}}}`);
    }
    seen.add(rawName ?? escapedName);
  }
  for (const needed of [...escaped, ...raw]) {
    if (!seen.has(needed)) throw new Error(`${name}: missing placeholder for "${needed}"`);
  }
  for (const [tag] of template.matchAll(/<(?:script|style)\b[^>]*>/gi)) {
    if (!NONCE_ATTRIBUTE.test(tag)) throw new Error(`${name}: ${tag} lacks the nonce`);
  }
  if (raw.has("flowDataJson") && !FLOW_DATA_SCRIPT.test(template)) {
    throw new Error(`${name}: {{{flowDataJson}}} must be the whole #flow-data script`);
  }

  return (slots) =>
    renderSections(template, slots)
      .replace(
        PLACEHOLDER,
        (_, rawName: string | undefined, escapedName: string) =>
          rawName !== undefined ? slots[rawName] : escapeHtml(slots[escapedName]),
      );
}

/** Who vouches for a client's name: the host of its metadata document, or nobody. */
function clientIdentity(
  clientName: string | undefined,
  verifiedHost: string | undefined,
): { verifiedHost: string; unverifiedName: string } {
  return {
    verifiedHost: verifiedHost ?? "",
    unverifiedName: clientName && !verifiedHost ? "unverified" : "",
  };
}

/** The names of every section, nested ones too, and the text with each replaced by its body. */
function unfoldSections(template: string): { names: Set<string>; text: string } {
  const names = new Set<string>();
  let text = template;
  for (let previous = ""; text !== previous;) {
    previous = text;
    text = text.replace(SECTION, (_, _kind: string, key: string, body: string) => {
      names.add(key);
      return body;
    });
  }
  return { names, text };
}

/**
 * Keeps or drops each section by its slot (`{{#x}}` when non-empty, `{{^x}}` when empty), outer
 * sections first, until none is left; slot values are not inserted yet, so they cannot open one.
 */
function renderSections(template: string, slots: Slots): string {
  let text = template;
  for (let previous = ""; text !== previous;) {
    previous = text;
    text = text.replace(
      SECTION,
      (_, kind: string, key: string, body: string) =>
        (slots[key] !== "") === (kind === "#") ? body : "",
    );
  }
  return text;
}

/**
 * The HTML page `GET /authorize` answers, rendered from `templates/device.html` with values
 * escaped by default, and the strict Content-Security-Policy that goes with each rendering.
 *
 * Template syntax (mustache-like; blanks inside the braces are allowed, as `deno fmt` adds
 * them): `{{name}}` is HTML-escaped, `{{{name}}}` is inserted raw (only values built
 * here as script-safe JSON may be), `{{#name}}…{{/name}}` is kept when the value is non-empty
 * and `{{^name}}…{{/name}}` when it is empty. HTML comments are dropped at load.
 *
 * @see spec §4.1 and §8, RFC 9207 (the `iss` the page adds to the redirect)
 */

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
  /** When set, the page adds `iss` to the redirect (RFC 9207). */
  issuer?: string;
}

/** A rendered page and the Content-Security-Policy header it must be served with. */
export interface RenderedPage {
  html: string;
  contentSecurityPolicy: string;
}

/** Renders the service's HTML pages; rendering does no I/O. */
export interface Templates {
  /** The device-flow page of spec §4.1. Throws TypeError on a non-http(s) URL or bad expiry. */
  renderDevicePage(values: DevicePageValues): RenderedPage;
  /** The static page at `/` (metadata's `service_documentation`); it interpolates nothing. */
  homePage: RenderedPage;
}

/** The page's timings in milliseconds (spec §8), handed to its script in the data block. */
export const PAGE_TIMINGS = {
  pollIntervalMs: 5000,
  countdownTickMs: 1000,
  redirectDelayMs: 1000,
  /** A poll request still unanswered after this long is abandoned and the next one scheduled. */
  pollTimeoutMs: 30_000,
} as const;

const DEFAULT_DIR = new URL("../templates/", import.meta.url);

/** Every placeholder device.html must use, and the only ones it may use. */
const DEVICE_PLACEHOLDERS = {
  escaped: [
    "nonce",
    "userCode",
    "verificationUrl",
    "clientId",
    "clientName",
    "returnHost",
    "expiresIn",
  ],
  raw: ["flowDataJson"],
} as const;

type DeviceSlots = Record<
  (typeof DEVICE_PLACEHOLDERS.escaped)[number] | (typeof DEVICE_PLACEHOLDERS.raw)[number],
  string
>;

const SECTION = /\{\{\s*([#^])\s*(\w+)\s*\}\}([\s\S]*?)\{\{\s*\/\s*\2\s*\}\}/g;
const PLACEHOLDER = /\{\{\{\s*(\w+)\s*\}\}\}|\{\{\s*(\w+)\s*\}\}/g;
const NONCE_ATTRIBUTE = /\snonce="\{\{\s*nonce\s*\}\}"/;
const FLOW_DATA_SCRIPT =
  /<script type="application\/json" id="flow-data"[^>]*>\{\{\{\s*flowDataJson\s*\}\}\}<\/script>/;
const COMMENT = /<!--[\s\S]*?-->/g;

/** Reads the templates once (default: the repository's `templates/`) and returns a renderer. */
export async function loadTemplates(dir: URL = DEFAULT_DIR): Promise<Templates> {
  const file = new URL("device.html", dir);
  const device = compile(await Deno.readTextFile(file), file.href);
  const home = await Deno.readTextFile(new URL("home.html", dir));
  return {
    homePage: {
      html: home,
      contentSecurityPolicy:
        "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; " +
        "frame-ancestors 'none'",
    },
    renderDevicePage(values) {
      const nonce = crypto.getRandomValues(new Uint8Array(18)).toBase64();
      return {
        html: device(deviceSlots(values, nonce)),
        contentSecurityPolicy: contentSecurityPolicy(nonce, new URL(values.pollUrl).origin),
      };
    },
  };
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
    returnHost: values.redirectUri ? returnHost(values.redirectUri) : "",
    expiresIn: `${Math.floor(seconds / 60)}:${String(seconds % 60).padStart(2, "0")}`,
    flowDataJson: jsonForScript(flowData),
  };
}

/** What the user is told they return to: the host, or for a host-less URL its scheme. */
function returnHost(redirectUri: string): string {
  try {
    const url = new URL(redirectUri);
    return url.host || url.protocol;
  } catch {
    return redirectUri;
  }
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
 * Checks a template against the placeholders it must use and returns its render function:
 * a template missing one, or using an unknown one, or with a script or style element without
 * the nonce, is a programming error reported at load.
 */
function compile(source: string, name: string): (slots: DeviceSlots) => string {
  const template = source.replace(COMMENT, "");
  const escaped = new Set<string>(DEVICE_PLACEHOLDERS.escaped);
  const raw = new Set<string>(DEVICE_PLACEHOLDERS.raw);
  const seen = new Set<string>();
  for (const match of template.matchAll(SECTION)) seen.add(match[2]);
  for (const [, rawName, escapedName] of template.replaceAll(SECTION, "$3").matchAll(PLACEHOLDER)) {
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
  if (!FLOW_DATA_SCRIPT.test(template)) {
    throw new Error(`${name}: {{{flowDataJson}}} must be the whole #flow-data script`);
  }

  return (slots) =>
    template
      .replace(SECTION, (_, kind: string, key: keyof DeviceSlots, body: string) =>
        (slots[key] !== "") === (kind === "#") ? body : "")
      .replace(
        PLACEHOLDER,
        (_, rawName: keyof DeviceSlots | undefined, escapedName: keyof DeviceSlots) =>
          rawName !== undefined ? slots[rawName] : escapeHtml(slots[escapedName]),
      );
}

/**
 * The device page `GET /authorize` answers (spec §4.1): the user code, the upstream's
 * verification link, the countdown, and the script that polls and returns to the client.
 * `templates/device.js` is inlined where `templates/device.html` says `{{> device.js}}`.
 *
 * @see spec §4.1 and §8, RFC 9207 (the `iss` the page adds to the redirect)
 */

import type { UpstreamProfile } from "../upstream/types.ts";
import { UNSAFE_REDIRECT_SCHEMES } from "../clients/uri_schemes.ts";
import { clientReturnUrl, isFollowableRedirect } from "../clients/return_url.ts";
import { type ClientSlots, clientSlots, returnTarget, type ShownClient } from "./client.ts";
import { compile, httpUrl, jsonForScript, type Render, withoutComments } from "./engine.ts";
import { scopeWords } from "./scopes.ts";

/** What the device page shows and what its script needs. */
export interface DevicePageValues extends ShownClient {
  userCode: string;
  /** Where the "Open GitLab" button goes, already chosen: `verification_uri_complete` or plain. */
  verificationUrl: string;
  /** Upstream `expires_in`: the page's countdown starts here. */
  expiresInSeconds: number;
  flowState: string;
  /** Absolute URL of `{base}/oauth/poll`. */
  pollUrl: string;
  /**
   * The redirect URI `/authorize` validated and stored: its host is shown to the user, and a
   * failed sign-in offers to return there with `error=access_denied`.
   */
  redirectUri?: string;
  /** The authorization request's `state`, for that return. */
  state?: string;
  /** When set, the page adds `iss` to the redirect (RFC 9207). */
  issuer?: string;
  /** How the upstream presents itself: its name and the scopes every sign-in asks for. */
  upstream: Pick<UpstreamProfile, "displayName" | "scopes" | "scopeWords">;
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
    "unknownClient",
    "returnHost",
    "expiresIn",
    "upstreamName",
    "scopeWords",
    "scopes",
    "deniedReturnUrl",
  ],
  raw: ["flowDataJson"],
} as const;

type DeviceSlots =
  & Record<
    (typeof DEVICE_PLACEHOLDERS.escaped)[number] | (typeof DEVICE_PLACEHOLDERS.raw)[number],
    string
  >
  & ClientSlots;

const SCRIPT_INCLUDE = /\{\{>\s*device\.js\s*\}\}/g;
const SCRIPT_INCLUDE_ELEMENT =
  /<script nonce="\{\{\s*nonce\s*\}\}">\{\{>\s*device\.js\s*\}\}<\/script>/;
/** What would end, or change the parsing of, the script element the script is inlined into. */
const UNSAFE_IN_SCRIPT = /<\/script|<!--/i;

/** Checks device.html and device.js and returns the page's renderer (slots: `deviceSlots`). */
export function compileDevicePage(html: string, script: string): Render {
  return compile(inlineScript(withoutComments(html), script), "device.html", DEVICE_PLACEHOLDERS);
}

/** The slots of one rendering. Throws TypeError on a non-http(s) URL or a bad expiry. */
export function deviceSlots(values: DevicePageValues, nonce: string): DeviceSlots {
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
    blockedSchemes: UNSAFE_REDIRECT_SCHEMES,
    ...PAGE_TIMINGS,
  };
  return {
    nonce,
    userCode: values.userCode,
    verificationUrl,
    ...clientSlots(values),
    returnHost: values.redirectUri ? returnTarget(values.redirectUri) : "",
    expiresIn: `${Math.floor(seconds / 60)}:${String(seconds % 60).padStart(2, "0")}`,
    upstreamName: values.upstream.displayName,
    scopeWords: scopeWords(values.upstream.scopes, values.upstream.scopeWords),
    scopes: values.upstream.scopes,
    deniedReturnUrl: deniedReturnUrl(values),
    flowDataJson: jsonForScript(flowData),
  };
}

/**
 * Where "Return to the application" leads after a failed sign-in: the stored redirect URI with
 * `error=access_denied`, `state` and `iss` (RFC 6749 §4.1.2.1), as the redirect sign-in's
 * Cancel does; empty when there is none the page may open.
 */
function deniedReturnUrl(values: DevicePageValues): string {
  const { redirectUri, state, issuer } = values;
  if (!redirectUri || !isFollowableRedirect(redirectUri)) return "";
  return clientReturnUrl(redirectUri, { error: "access_denied" }, state ?? "", issuer).href;
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

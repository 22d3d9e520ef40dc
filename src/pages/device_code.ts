/**
 * The pages of `/device`, the user's side of our device authorization endpoint (RFC 8628 §3.3),
 * from `templates/device_code.html`: where the user enters the code, and what a code asks for
 * (the application, the access, a warning) before the user signs in. No script at all.
 */

import type { UpstreamProfile } from "../upstream/types.ts";
import { clientSlots, type ShownClient } from "./client.ts";
import { formPagePolicy } from "./csp.ts";
import { compile, httpUrl, type Render, withoutComments } from "./engine.ts";
import { scopeWords } from "./scopes.ts";
import type { RenderedPage } from "./sign_in.ts";

/** The page to enter a user code. */
export interface CodeEntryValues {
  /** Absolute URL of `/device`, where the form goes (GET, `user_code`). */
  entryUrl: string;
  /** Why the user is asked again (a code that is not one), or nothing. */
  message?: string;
}

/** What a user code asks for. */
export interface CodeRequestValues extends ShownClient {
  /** The code as the user entered it (not shown after the upstream sign-in). */
  userCode?: string;
  /** The scopes asked, in words. */
  access: string;
  /** The MCP server the tokens will be for. */
  resource: string;
  upstream: UpstreamProfile;
  /** Where the form posts (`/device`), and what it carries. */
  actionUrl: string;
  deviceId: string;
  csrfToken: string;
  /** After the upstream sign-in: the user's name, and the form is Approve / Deny. */
  signedInAs?: string;
}

const PLACEHOLDERS = {
  escaped: ["nonce", "title"],
  optional: [
    "entryUrl",
    "message",
    "userCode",
    "clientId",
    "clientName",
    "verifiedHost",
    "unverifiedName",
    "unknownClient",
    "access",
    "resource",
    "upstreamName",
    "scopeWords",
    "signedInAs",
    "actionUrl",
    "deviceId",
    "csrfToken",
  ],
  raw: [],
} as const;

type Slots = Record<
  (typeof PLACEHOLDERS.escaped)[number] | (typeof PLACEHOLDERS.optional)[number],
  string
>;

const EMPTY: Omit<Slots, "nonce" | "title"> = {
  entryUrl: "",
  message: "",
  userCode: "",
  clientId: "",
  clientName: "",
  verifiedHost: "",
  unverifiedName: "",
  unknownClient: "",
  access: "",
  resource: "",
  upstreamName: "",
  scopeWords: "",
  signedInAs: "",
  actionUrl: "",
  deviceId: "",
  csrfToken: "",
};

/** The renderers of `/device`'s pages. */
export interface DeviceCodePages {
  entry(values: CodeEntryValues, nonce: string): RenderedPage;
  request(values: CodeRequestValues, nonce: string): RenderedPage;
}

/** Checks device_code.html and returns its renderers. */
export function compileDeviceCodePages(html: string): DeviceCodePages {
  const render: Render = compile(withoutComments(html), "device_code.html", PLACEHOLDERS);
  return {
    entry: (values, nonce) => ({
      html: render({
        ...EMPTY,
        nonce,
        title: "Sign in a device",
        entryUrl: httpUrl(values.entryUrl, "entryUrl"),
        message: values.message ?? "",
      }),
      contentSecurityPolicy: formPagePolicy(nonce, [new URL(values.entryUrl).origin]),
    }),
    request: (values, nonce) => ({
      html: render({
        ...EMPTY,
        nonce,
        title: "Sign in a device",
        userCode: values.userCode ?? "",
        ...clientSlots(values),
        access: values.access,
        resource: values.resource,
        upstreamName: values.upstream.displayName,
        scopeWords: scopeWords(values.upstream.scopes, values.upstream.scopeWords),
        signedInAs: values.signedInAs ?? "",
        actionUrl: httpUrl(values.actionUrl, "actionUrl"),
        deviceId: values.deviceId,
        csrfToken: values.csrfToken,
      }),
      contentSecurityPolicy: requestPolicy(values, nonce),
    }),
  };
}

/**
 * Forms go to `/device`, and on to the upstream ("Continue" answers a redirect there, which
 * Chromium holds to form-action too, as any single sign-on the upstream passes the browser to).
 */
function requestPolicy(values: CodeRequestValues, nonce: string): string {
  const upstream = new URL(httpUrl(values.upstream.url.href, "upstream.url"));
  return formPagePolicy(nonce, [
    new URL(values.actionUrl).origin,
    upstream.origin,
    upstream.protocol,
  ]);
}

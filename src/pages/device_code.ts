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
  userCode: string;
  /** The scopes asked, in words. */
  access: string;
  /** The MCP server the tokens will be for. */
  resource: string;
  upstream: UpstreamProfile;
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
        userCode: values.userCode,
        ...clientSlots(values),
        access: values.access,
        resource: values.resource,
        upstreamName: values.upstream.displayName,
        scopeWords: scopeWords(values.upstream.scopes, values.upstream.scopeWords),
      }),
      contentSecurityPolicy: formPagePolicy(nonce, []),
    }),
  };
}

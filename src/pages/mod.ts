/**
 * The service's HTML pages: the device page (spec §4.1), the redirect sign-in's consent and
 * notice pages, and the static home page, each with the Content-Security-Policy it must be
 * served with. Rendering does no I/O.
 *
 * The templates are imported as text, so they are part of the module graph: `deno compile` and
 * Deno Deploy embed them, and nothing is read from disk at start-up.
 */

import deviceHtml from "../../templates/device.html" with { type: "text" };
import deviceJs from "../../templates/device.js" with { type: "text" };
import homeHtml from "../../templates/home.html" with { type: "text" };
import signInHtml from "../../templates/sign_in.html" with { type: "text" };
import deviceCodeHtml from "../../templates/device_code.html" with { type: "text" };
import {
  type CodeEntryValues,
  type CodeRequestValues,
  compileDeviceCodePages,
} from "./device_code.ts";
import { devicePagePolicy, HOME_PAGE_POLICY } from "./csp.ts";
import { compileDevicePage, type DevicePageValues, deviceSlots } from "./device.ts";
import { newNonce } from "./engine.ts";
import {
  compileSignInPages,
  type ConsentPageValues,
  type NoticePageValues,
  type RenderedPage,
} from "./sign_in.ts";

export { escapeHtml, jsonForScript } from "./engine.ts";
export { type DevicePageValues, PAGE_TIMINGS } from "./device.ts";
export { returnTarget } from "./client.ts";
export type { ConsentPageValues, NoticePageValues, RenderedPage } from "./sign_in.ts";
export type { CodeEntryValues, CodeRequestValues } from "./device_code.ts";

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
  /** `/device`: the form to enter a user code (no script). */
  renderCodeEntryPage(values: CodeEntryValues): RenderedPage;
  /** `/device`: what a user code asks for (no script). */
  renderCodeRequestPage(values: CodeRequestValues): RenderedPage;
}

/** The renderer for the repository's `templates/`, which are embedded in the module graph. */
export function loadTemplates(): Templates {
  return createTemplates({ deviceHtml, deviceJs, homeHtml });
}

/**
 * Checks the template sources and returns a renderer; a broken template throws here, at load,
 * rather than when a page is rendered.
 */
export function createTemplates(sources: TemplateSources): Templates {
  const device = compileDevicePage(sources.deviceHtml, sources.deviceJs);
  const signIn = compileSignInPages(sources.signInHtml ?? signInHtml);
  const deviceCode = compileDeviceCodePages(deviceCodeHtml);
  return {
    homePage: { html: sources.homeHtml, contentSecurityPolicy: HOME_PAGE_POLICY },
    renderDevicePage(values) {
      const nonce = newNonce();
      return {
        html: device(deviceSlots(values, nonce)),
        contentSecurityPolicy: devicePagePolicy(nonce, new URL(values.pollUrl).origin),
      };
    },
    renderConsentPage: (values) => signIn.consent(values, newNonce()),
    renderNoticePage: (values) => signIn.notice(values, newNonce()),
    renderCodeEntryPage: (values) => deviceCode.entry(values, newNonce()),
    renderCodeRequestPage: (values) => deviceCode.request(values, newNonce()),
  };
}

/**
 * The one place that says what an http(s) URL is: configuration, the library's options, client
 * registration and upstream answers all check with these, so a scheme such as `javascript:` or
 * `ftp:` is refused everywhere alike.
 */

/** The schemes a browser or fetch may be sent to. */
const WEB_PROTOCOLS: readonly string[] = ["https:", "http:"];

/** `text` as a URL, or undefined when it is not one. */
export function parseUrl(text: string): URL | undefined {
  try {
    return new URL(text);
  } catch {
    return undefined;
  }
}

/** Whether `url` is http: or https:. */
export function isWebUrl(url: URL): boolean {
  return WEB_PROTOCOLS.includes(url.protocol);
}

/** `text` as an http(s) URL, or undefined when it is no URL or another scheme. */
export function parseWebUrl(text: string): URL | undefined {
  const url = parseUrl(text);
  return url && isWebUrl(url) ? url : undefined;
}

/**
 * GitLab's ID-token signing keys (`{GITLAB_URL}/oauth/discovery/keys`), cached. A `kid` not in
 * the cache fetches them again, unless any fetch happened in the last minute: a rotated key works
 * within a minute, and tokens naming made-up kids cannot make the service hammer GitLab. Keys
 * older than ten minutes are fetched again before use, so a key GitLab withdrew (rotated after a
 * leak, say) stops being trusted; while GitLab cannot answer, the keys it last published serve.
 */

import type { Clock } from "../clock.ts";
import { readBody } from "../upstream/oauth_parse.ts";

/** At most one fetch of the keys per this long, whatever the kids asked for. */
export const KEYS_REFETCH_MS = 60_000;
/** Keys fetched longer ago than this are fetched again before a token is checked with them. */
export const KEYS_MAX_AGE_MS = 10 * 60_000;
/** The most keys kept from one answer. */
const MAX_KEYS = 50;

/** A public key GitLab published, as JWK. */
export type PublishedKey = JsonWebKey & { kid: string };

/** Thrown when GitLab's keys could not be read (unreachable, not a JWKS). */
export class GitLabKeysUnavailable extends Error {
  override name = "GitLabKeysUnavailable";
}

/** The cache of GitLab's keys. */
export interface GitLabKeys {
  /** The key `kid` names, fetching the keys when due; undefined when GitLab publishes none. */
  keyFor(kid: string): Promise<PublishedKey | undefined>;
}

/** What the cache uses. */
export interface GitLabKeysDeps {
  /** GITLAB_URL. */
  gitlabUrl: URL;
  clock: Clock;
  timeoutMs: number;
  /** Reaches GitLab (a test hands in its fake GitLab). */
  fetch?: typeof fetch;
}

/** An empty cache, filled on first use. */
export function createGitLabKeys(deps: GitLabKeysDeps): GitLabKeys {
  const url = `${deps.gitlabUrl.href.replace(/\/+$/, "")}/oauth/discovery/keys`;
  const fetching = deps.fetch ?? fetch;
  let keys = new Map<string, PublishedKey>();
  /** When a fetch last started (the refetch limit), and when `keys` were last read. */
  let fetchedAt: number | undefined;
  let keysAt: number | undefined;
  let inFlight: Promise<void> | undefined;

  async function refresh(): Promise<void> {
    fetchedAt = deps.clock.now();
    let response: Response;
    try {
      response = await fetching(url, {
        headers: { Accept: "application/json" },
        // The keys are GitLab's at its URL: a redirect elsewhere would let another host sign.
        redirect: "manual",
        signal: AbortSignal.timeout(deps.timeoutMs),
      });
    } catch (error) {
      throw new GitLabKeysUnavailable(error instanceof Error ? error.name : "unreachable");
    }
    if (response.status !== 200) {
      await response.body?.cancel();
      throw new GitLabKeysUnavailable(`status ${response.status}`);
    }
    let text: string;
    try {
      // Bounded as every GitLab answer is (MAX_UPSTREAM_BODY_BYTES).
      text = await readBody(response);
    } catch (error) {
      throw new GitLabKeysUnavailable(error instanceof Error ? error.message : "unreadable");
    }
    keys = parseKeys(text);
    keysAt = deps.clock.now();
  }

  return {
    async keyFor(kid) {
      const now = deps.clock.now();
      const known = keys.get(kid);
      if (known && keysAt !== undefined && now - keysAt < KEYS_MAX_AGE_MS) return known;
      const due = fetchedAt === undefined || now - fetchedAt >= KEYS_REFETCH_MS;
      if (due && inFlight === undefined) {
        inFlight = refresh().finally(() => inFlight = undefined);
      }
      try {
        if (inFlight) await inFlight;
      } catch (error) {
        // GitLab did not answer: a key it published serves on; an unknown kid cannot be checked.
        if (!known) throw error;
      }
      return keys.get(kid);
    },
  };
}

/** The RSA keys of a JWKS document, by kid. */
function parseKeys(text: string): Map<string, PublishedKey> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new GitLabKeysUnavailable("not JSON");
  }
  const list = (parsed as { keys?: unknown })?.keys;
  if (!Array.isArray(list)) throw new GitLabKeysUnavailable("no keys");
  const found = new Map<string, PublishedKey>();
  for (const key of list.slice(0, MAX_KEYS)) {
    if (typeof key !== "object" || key === null) continue;
    const { kid, kty } = key as Record<string, unknown>;
    if (typeof kid === "string" && kty === "RSA") found.set(kid, key as PublishedKey);
  }
  return found;
}

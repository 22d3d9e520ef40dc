/** Requests the cases make to the running service before measuring: flows and access tokens. */

/** An access token from the service at `baseUrl`, by refreshing the file's first token. */
export async function accessTokenFor(
  baseUrl: string,
  refreshTokens: string,
): Promise<string | undefined> {
  const file = await Deno.open(refreshTokens);
  const first = (await new Response(file.readable).text()).split("\n", 1)[0];
  const r = await fetch(`${baseUrl}/token`, {
    method: "POST",
    body: new URLSearchParams({ grant_type: "refresh_token", refresh_token: first }),
  });
  const body = await r.json().catch(() => ({}));
  return typeof body.access_token === "string" ? body.access_token : undefined;
}

/**
 * `count` access tokens, each of another session: refreshes the file's tokens from line `from`
 * on, 16 at a time. Throws when a refresh fails.
 */
export async function accessTokensFor(
  baseUrl: string,
  refreshTokens: string,
  from: number,
  count: number,
): Promise<string[]> {
  const lines = (await Deno.readTextFile(refreshTokens)).split("\n").filter(Boolean)
    .slice(from, from + count);
  if (lines.length < count) throw new Error(`${refreshTokens} holds fewer than ${from + count}`);
  const tokens: string[] = [];
  let next = 0;
  const worker = async () => {
    while (next < lines.length) {
      const refreshToken = lines[next++];
      const r = await fetch(`${baseUrl}/token`, {
        method: "POST",
        body: new URLSearchParams({ grant_type: "refresh_token", refresh_token: refreshToken }),
      });
      const body = await r.json().catch(() => ({}));
      if (typeof body.access_token !== "string") throw new Error(`refresh answered ${r.status}`);
      tokens.push(body.access_token);
    }
  };
  await Promise.all(Array.from({ length: FLOW_WORKERS }, worker));
  return tokens;
}

const FLOW_WORKERS = 16;
const FLOWS_MAX_MS = 120_000;

/**
 * Makes up to `count` flows through the service's /authorize (as many as 2 minutes allow) for
 * `clientId`; returns their flow states.
 */
export async function createFlows(
  baseUrl: string,
  clientId: string,
  count: number,
): Promise<string[]> {
  const states: string[] = [];
  const deadline = Date.now() + FLOWS_MAX_MS;
  let next = 0;
  const query = new URLSearchParams({
    response_type: "code",
    client_id: clientId,
    redirect_uri: "http://127.0.0.1:9/cb",
    code_challenge: "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
    code_challenge_method: "S256",
  });
  const worker = async () => {
    while (next < count && Date.now() < deadline) {
      // A state of its own: an identical request would show the same flow again.
      query.set("state", `flow-${next++}`);
      const response = await fetch(`${baseUrl}/authorize?${query}`);
      const html = await response.text();
      const state = html.match(/"flowState":"([^"]+)"/)?.[1];
      if (response.status !== 200 || !state) {
        throw new Error(`/authorize answered ${response.status} without a flow state`);
      }
      states.push(state);
    }
  };
  await Promise.all(Array.from({ length: FLOW_WORKERS }, worker));
  return states;
}

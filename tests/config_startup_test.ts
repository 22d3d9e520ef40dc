/**
 * Start-up as an operator meets it: `deno run main.ts start` with one wrong variable stops before
 * listening, with exit code 1 and one line naming the variable (never a stack trace).
 */

import assert from "node:assert/strict";
import { TEST_SECRET } from "./_helpers.ts";
import { spawnService } from "./_service.ts";

/** The lines of a start-up that must be refused (warnings left out); fails if it listens. */
async function refusedStartup(env: Record<string, string>): Promise<string[]> {
  const configured = { GITLAB_CLIENT_ID: "app", JWT_SECRET: TEST_SECRET, KV_PATH: ":memory:" };
  let service: Awaited<ReturnType<typeof spawnService>>;
  try {
    service = await spawnService({ ...configured, ...env });
  } catch (error) {
    const [, ...logs] = String((error as Error).message).split("\n");
    return logs.filter((line) => line.trim() !== "" && !line.includes('"warn"'));
  }
  await service.stop();
  assert.fail(`the service started with ${JSON.stringify(env)}`);
}

function assertOneLineNaming(lines: string[], variable: string): string {
  assert.equal(lines.length, 1, lines.join("\n"));
  assert.match(lines[0], new RegExp(`configuration error: ${variable}: `));
  assert.doesNotMatch(lines[0], /\bat \S+:\d+/, "no stack trace");
  return lines[0];
}

Deno.test("a rate limit whose window overflows the store's expiry stops start-up (it answered every /token 500)", async () => {
  const lines = await refusedStartup({ RATE_LIMIT_TOKEN: "1/99999999999999999999" });
  assert.match(assertOneLineNaming(lines, "RATE_LIMIT_TOKEN"), /seconds 1 to 31536000/);
});

Deno.test("an allow-list of commas alone stops start-up: it admitted every account", async () => {
  const lines = await refusedStartup({ ALLOWED_GITLAB_GROUPS: " , " });
  assert.match(assertOneLineNaming(lines, "ALLOWED_GITLAB_GROUPS"), /lists no group/);
});

Deno.test("BASE_URL with a bare # stops start-up: it was the issuer, # and all", async () => {
  const lines = await refusedStartup({ BASE_URL: "https://auth.example/#" });
  assert.match(assertOneLineNaming(lines, "BASE_URL"), /must not have a query or fragment/);
});

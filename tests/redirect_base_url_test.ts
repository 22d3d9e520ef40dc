/**
 * Issue 22 §1.5: the redirect sign-in requires BASE_URL. Without it GitLab's callback URL would
 * follow the request's `Host`; start-up stops instead, with one line naming BASE_URL.
 */

import assert from "node:assert/strict";
import { ConfigError, loadConfig } from "../src/app/config.ts";

Deno.test("config: GITLAB_SIGN_IN=redirect without BASE_URL is a ConfigError naming BASE_URL", () => {
  let caught: unknown;
  try {
    loadConfig({ GITLAB_SIGN_IN: "redirect" });
  } catch (error) {
    caught = error;
  }
  assert.ok(caught instanceof ConfigError, String(caught));
  assert.equal(caught.variable, "BASE_URL");
  assert.match(caught.message, /GITLAB_SIGN_IN=redirect/);
  assert.equal(
    loadConfig({ GITLAB_SIGN_IN: "redirect", BASE_URL: "https://auth.example" }).upstream.signIn,
    "redirect",
  );
  assert.equal(loadConfig({}).baseUrl, undefined, "the device flow still runs without it");
});

Deno.test("start-up: redirect sign-in without BASE_URL stops with one line naming BASE_URL", async () => {
  const output = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--allow-all", new URL("../main.ts", import.meta.url).pathname, "start"],
    env: { GITLAB_SIGN_IN: "redirect", KV_PATH: ":memory:", PORT: "0", HOST: "127.0.0.1" },
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(30_000),
  }).output();
  assert.equal(output.code, 1);
  const lines = new TextDecoder().decode(output.stdout).trim().split("\n");
  assert.equal(lines.length, 1, lines.join("\n"));
  assert.match(lines[0], /BASE_URL/);
  assert.match(lines[0], /GITLAB_SIGN_IN=redirect/);
});

/**
 * GitLab's key set is read like every other GitLab answer: at most the upstream body limit. A
 * hostile or broken GitLab that streams an endless body gets its answer refused, the stream
 * cancelled, and the CI grant's check fails closed instead of holding the memory (or hanging).
 */

import assert from "node:assert/strict";
import { createGitLabKeys, GitLabKeysUnavailable } from "../src/machine/gitlab_keys.ts";
import { FakeClock } from "./_helpers.ts";

Deno.test("GitLab keys: an endless body is refused once past the limit, and cancelled", async () => {
  let cancelled = false;
  const endless = new ReadableStream<Uint8Array>({
    pull(controller) {
      controller.enqueue(new Uint8Array(64 * 1024).fill(0x20));
    },
    cancel() {
      cancelled = true;
    },
  });
  const keys = createGitLabKeys({
    gitlabUrl: new URL("https://gitlab.example"),
    clock: new FakeClock(),
    timeoutMs: 60_000,
    fetch: () => Promise.resolve(new Response(endless, { status: 200 })),
  });
  await assert.rejects(keys.keyFor("any"), GitLabKeysUnavailable);
  assert.ok(cancelled, "the rest of the body is not read");
});

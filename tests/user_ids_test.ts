/**
 * User ids are text everywhere (issue 34 §5): a provider's user API may name its users by number
 * (GitLab, GitHub) or by string (a UUID, a name); the reader keeps either as text, and refuses
 * what no provider sends.
 */

import assert from "node:assert/strict";
import { userApiReader } from "../src/upstream/oauth_provider.ts";
import { UpstreamError } from "../src/upstream/types.ts";

const read = userApiReader({ id: "id", username: "login" });
const answer = (body: unknown) => Response.json(body);

Deno.test("user ids: a number and a string are both kept as text", async () => {
  assert.deepEqual(await read(answer({ id: 4242, login: "ada" })), { id: "4242", username: "ada" });
  const uuid = "0b8f3c1e-2a4d-4e5f-9a7b-1c2d3e4f5a6b";
  assert.deepEqual(await read(answer({ id: uuid, login: "grace" })), {
    id: uuid,
    username: "grace",
  });
});

Deno.test("user ids: what no provider sends is malformed", async () => {
  for (const id of ["", " ", "a b", "x".repeat(256), 1.5, -0.5, { n: 1 }, null, true]) {
    await assert.rejects(
      () => read(answer({ id, login: "ada" })),
      (error: unknown) => error instanceof UpstreamError && error.code === "malformed",
      JSON.stringify(id),
    );
  }
});

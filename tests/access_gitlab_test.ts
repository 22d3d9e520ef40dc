/**
 * Who may sign in, end to end: the service as a process, GitLab's members/all API as the
 * simulated GitLab answers it (inherited memberships from parent groups included), a listed
 * subgroup with a minimum role, over real HTTP.
 */

import assert from "node:assert/strict";
import { authorizeOverHttp, pollOverHttp, signInOverHttp, spawnWithGitLab } from "./_service.ts";
import { GITLAB_ROLES } from "../src/upstream/gitlab.ts";

Deno.test("access over HTTP: a maintainer of the parent group signs in to a listed subgroup; a guest is refused", async () => {
  const { gitlab, service, close } = await spawnWithGitLab("gitlab-app-id", {
    ALLOWED_GITLAB_GROUPS: "acme/platform:developer",
  });
  try {
    gitlab.users.push({ id: 7, username: "mallory", name: "Mallory" });
    gitlab.addGroup("acme/platform");
    // ada is a member of the parent only; mallory a guest of the subgroup itself.
    gitlab.setMembership("acme", 4242, GITLAB_ROLES.maintainer);
    gitlab.setMembership("acme/platform", 7, GITLAB_ROLES.guest);

    const tokens = await signInOverHttp(service.url, gitlab);
    assert.equal(typeof tokens.access_token, "string");
    assert.deepEqual(gitlab.memberLookups, [{ group: "acme/platform", userId: 4242 }]);
    const revokedBefore = gitlab.revokedTokens.size;

    const { flowState } = await authorizeOverHttp(service.url, {});
    gitlab.approve(gitlab.lastUserCode()!, 7);
    const refused = await pollOverHttp(service.url, flowState);
    assert.equal(refused.status, 200);
    assert.equal(refused.body.status, "failed");
    assert.match(refused.body.error, /GitLab account @mallory is not allowed/);
    assert.equal(gitlab.revokedTokens.size, revokedBefore + 1, "mallory's token is revoked");
    assert.ok(
      service.logs.some((line) =>
        line.includes('"warn"') && line.includes("mallory") &&
        line.includes("acme/platform: guest, needs developer")
      ),
      service.logs.join("\n"),
    );
  } finally {
    await close();
  }
});

Deno.test("simulated GitLab: members/all answers inherited memberships, 404 for others", async () => {
  const { gitlab, close } = await spawnWithGitLab("gitlab-app-id", {});
  try {
    gitlab.setMembership("acme", 4242, 30);
    gitlab.setMembership("acme/platform/tools", 4242, 40);
    gitlab.addGroup("other");
    const { accessToken } = gitlab.issueTokens();
    const member = (group: string) =>
      fetch(
        new URL(`/api/v4/groups/${encodeURIComponent(group)}/members/all/4242`, gitlab.url),
        { headers: { Authorization: `Bearer ${accessToken}` } },
      ).then(async (response) => ({ status: response.status, body: await response.json() }));
    // issueTokens' scope is read_user: GitLab needs read_api or api for this.
    assert.equal((await member("acme")).status, 403);
    gitlab.addGroup("acme/platform");
    assert.equal(gitlab.memberAccessLevel("acme/platform/tools", 4242), 40);
    assert.equal(gitlab.memberAccessLevel("acme/platform", 4242), 30);
    assert.equal(gitlab.memberAccessLevel("other", 4242), null);
    assert.equal(gitlab.memberAccessLevel("nowhere", 4242), undefined);
    gitlab.setMembership("acme", 4242, null);
    assert.equal(gitlab.memberAccessLevel("acme/platform", 4242), null);
    assert.deepEqual(gitlab.memberLookups, [{ group: "acme", userId: 4242 }]);
  } finally {
    await close();
  }
});

/**
 * What counts as membership and who a list names (issue 33 §1.5, §1.9): Minimal Access (5) is
 * no membership unless a rule names `minimal_access`; `id:<n>` names an account by its GitLab
 * user id, which a rename or a new holder of the name does not change.
 */

import assert from "node:assert/strict";
import { type CallPolicy, decideCall, parseCallPolicy } from "../src/access/call_policy.ts";
import { makeTestApp, poll, startFlow, type TestApp } from "./_helpers.ts";

async function withApp(env: Record<string, string>, fn: (t: TestApp) => Promise<void>) {
  const t = await makeTestApp({ env });
  try {
    await fn(t);
  } finally {
    t.close();
  }
}

async function deviceSignIn(t: TestApp): Promise<{ status: string; error?: string }> {
  const flowState = await startFlow(t);
  t.upstream.approve();
  return await (await poll(t, flowState)).json();
}

Deno.test("membership: Minimal Access is refused by a role-less ALLOWED_GITLAB_GROUPS; Guest signs in", async () => {
  await withApp({ ALLOWED_GITLAB_GROUPS: "team" }, async (t) => {
    t.upstream.groupLevels = { team: 5 };
    const body = await deviceSignIn(t);
    assert.equal(body.status, "failed", JSON.stringify(body));
    assert.match(body.error!, /@ada/);
  });
  await withApp({ ALLOWED_GITLAB_GROUPS: "team" }, async (t) => {
    t.upstream.groupLevels = { team: 10 };
    assert.equal((await deviceSignIn(t)).status, "complete");
  });
  await withApp({ ALLOWED_GITLAB_GROUPS: "team:minimal_access" }, async (t) => {
    t.upstream.groupLevels = { team: 5 };
    assert.equal((await deviceSignIn(t)).status, "complete");
  });
});

function callerIn(levels: Record<string, number>) {
  return {
    username: "ada",
    userId: "4242",
    listedGroups: [],
    access: {
      checkedAt: 0,
      groupLevels: levels,
      admittingGroups: [],
      listedUser: false,
      groupsAsked: ["team"],
    },
  };
}

function effect(policy: CallPolicy, levels: Record<string, number>): string {
  return decideCall(policy, callerIn(levels), "tools", "deploy").effect;
}

Deno.test("membership: a role-less policy group rule does not count Minimal Access, unless it names it", () => {
  const roleLess = parseCallPolicy(JSON.stringify({
    default: "deny",
    rules: [{ tools: ["deploy"], allow: { groups: ["team"] } }],
  }));
  assert.equal(effect(roleLess, { team: 5 }), "deny");
  assert.equal(effect(roleLess, { team: 10 }), "allow");
  const named = parseCallPolicy(JSON.stringify({
    default: "deny",
    rules: [{ tools: ["deploy"], allow: { groups: ["team:minimal_access"] } }],
  }));
  assert.equal(effect(named, { team: 5 }), "allow");
});

Deno.test("accounts: ALLOWED_GITLAB_USERS=id:<n> admits the account with that id, whatever its name", async () => {
  // The fake GitLab signs in @ada, user id 4242.
  await withApp({ ALLOWED_GITLAB_USERS: "id:04242" }, async (t) => {
    assert.equal((await deviceSignIn(t)).status, "complete");
  });
  // A listed id that is not hers refuses @ada though nothing else is listed by name.
  await withApp({ ALLOWED_GITLAB_USERS: "id:7, grace" }, async (t) => {
    assert.equal((await deviceSignIn(t)).status, "failed");
  });
});

Deno.test("accounts: a policy's users name accounts by id:<n>; a new holder of the name is not them", () => {
  const policy = parseCallPolicy(JSON.stringify({
    default: "deny",
    rules: [{ tools: ["deploy"], allow: { users: ["id:4242"] } }],
  }));
  assert.equal(decideCall(policy, callerIn({}), "tools", "deploy").effect, "allow");
  const impostor = { ...callerIn({}), userId: "99" };
  assert.equal(decideCall(policy, impostor, "tools", "deploy").effect, "deny");
});

Deno.test("accounts: an id that is not a number is refused naming the variable", async () => {
  for (const value of ["id:", "id:ada", "id:-3", "id:1:2"]) {
    await assert.rejects(
      () => makeTestApp({ env: { ALLOWED_GITLAB_USERS: value } }),
      (error: Error) => error.message.includes("ALLOWED_GITLAB_USERS"),
      value,
    );
  }
});

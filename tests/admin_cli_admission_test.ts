/**
 * Issue 23 §1: the operator's CLI shows, per session, what admitted it (the listed groups with
 * the role the user had, the user list, or nothing for a session from before the lists), and
 * `sessions list --group <full path>` lists only the sessions a group admitted. The sessions are
 * signed in through the real app (the fake GitLab answering memberships) on a KV file, then
 * listed by the CLI in its own process.
 */

import assert from "node:assert/strict";
import { runStoreCommand } from "../src/admin/commands.ts";
import { silentLogger } from "../src/logger.ts";
import { recordsOf, sessionKey } from "../src/store/keys.ts";
import type { SessionRecord } from "../src/store/records.ts";
import {
  exchange,
  FakeClock,
  issueCode,
  makeTestApp,
  TEST_SECRET,
  type TestApp,
} from "./_helpers.ts";
import { type Json, runAdminCli } from "./_service.ts";

const LISTS = {
  ALLOWED_GITLAB_GROUPS: "acme, Acme/Platform:developer",
  ALLOWED_GITLAB_USERS: "grace",
};

/** Signs `user` in through the app, GitLab answering `groupLevels`; the code redeemed. */
async function signIn(
  t: TestApp,
  user: { id: number; username: string },
  groupLevels: Record<string, number> = {},
): Promise<void> {
  t.clock.advance(1_000);
  t.upstream.user = user;
  t.upstream.groupLevels = groupLevels;
  const exchanged = await exchange(t, await issueCode(t));
  assert.equal(exchanged.status, 200, await exchanged.clone().text());
  await exchanged.body?.cancel();
}

/** Runs `fn` with a KV file holding sessions admitted each way, and the CLI on it. */
async function withAdmittedSessions(
  fn: (admin: (args: string[]) => ReturnType<typeof runAdminCli>, kvPath: string) => Promise<void>,
): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "admin-admission-" });
  const kvPath = `${dir}/kv.sqlite3`;
  const clock = new FakeClock(Date.now());
  try {
    // Signed in while anyone was admitted: no `access` on the record.
    const before = await makeTestApp({ kvPath, clock });
    try {
      await signIn(before, { id: 4242, username: "ada" });
    } finally {
      before.close();
    }
    const t = await makeTestApp({ kvPath, clock, env: LISTS });
    try {
      await signIn(t, { id: 1, username: "bob" }, { "Acme/Platform": 40 });
      await signIn(t, { id: 2, username: "carol" }, { acme: 10, "Acme/Platform": 30 });
      await signIn(t, { id: 77, username: "grace" }, { "Acme/Platform": 20 });
      await signIn(t, { id: 77, username: "grace" }, { acme: 20 });
    } finally {
      t.close();
    }
    await fn((args) => runAdminCli(args, { KV_PATH: kvPath, JWT_SECRET: TEST_SECRET }), kvPath);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

function jsonLines(text: string): Json[] {
  return text.trim().split("\n").filter((line) => line !== "").map((line) => JSON.parse(line));
}

Deno.test("admin: sessions list shows what admitted each session, in the table and --json", () =>
  withAdmittedSessions(async (admin) => {
    const listed = await admin(["sessions", "list", "--json"]);
    assert.equal(listed.code, 0, listed.stderr);
    assert.deepEqual(
      jsonLines(listed.stdout).map(({ username, admittedBy }) => ({ username, admittedBy })),
      [
        { username: "ada", admittedBy: null },
        {
          username: "bob",
          admittedBy: {
            groups: [{ path: "Acme/Platform", role: "maintainer", accessLevel: 40 }],
            userList: false,
          },
        },
        {
          username: "carol",
          admittedBy: {
            groups: [
              { path: "acme", role: "guest", accessLevel: 10 },
              { path: "Acme/Platform", role: "developer", accessLevel: 30 },
            ],
            userList: false,
          },
        },
        // A reporter of Acme/Platform: not admitted by it (developer at least), by the list.
        { username: "grace", admittedBy: { groups: [], userList: true } },
        {
          username: "grace",
          admittedBy: {
            groups: [{ path: "acme", role: "reporter", accessLevel: 20 }],
            userList: true,
          },
        },
      ],
    );

    const table = await admin(["sessions", "list"]);
    assert.equal(table.code, 0, table.stderr);
    const lines = table.stdout.trim().split("\n");
    assert.match(lines[0], /^SESSION +USER +CLIENT +ADMITTED BY +CREATED/);
    const cells = lines.slice(1, -1).map((line) => line.split(/ {2,}/));
    assert.deepEqual(cells.map((row) => [row[1], row[3]]), [
      ["ada (4242)", "—"],
      ["bob (1)", "Acme/Platform (maintainer)"],
      ["carol (2)", "acme (guest), Acme/Platform (developer)"],
      ["grace (77)", "user list"],
      ["grace (77)", "acme (reporter), user list"],
    ]);
    assert.equal(lines.at(-1), "5 session(s)");
  }));

Deno.test("admin: sessions list --group lists the sessions that group admitted (full path, any case), with the user selectors", () =>
  withAdmittedSessions(async (admin) => {
    const usernames = async (args: string[]) => {
      const run = await admin(["sessions", "list", ...args, "--json"]);
      assert.equal(run.code, 0, `${args.join(" ")}: ${run.stderr}`);
      return jsonLines(run.stdout).map((session) => session.username);
    };
    assert.deepEqual(await usernames(["--group", "acme/platform"]), ["bob", "carol"]);
    assert.deepEqual(await usernames(["--group=ACME/PLATFORM"]), ["bob", "carol"]);
    // A member it did not admit (grace, a reporter) is not listed; nor are subgroups of `acme`.
    assert.deepEqual(await usernames(["--group", "acme"]), ["carol", "grace"]);
    assert.deepEqual(await usernames(["--group", "acme", "--user", "grace"]), ["grace"]);
    assert.deepEqual(await usernames(["--group", "acme/platform", "--username", "grace"]), []);
    assert.deepEqual(await usernames(["--group", "acme", "--user-id", "2"]), ["carol"]);
    assert.deepEqual(await usernames(["--group", "Acme/Plat"]), []);
    assert.deepEqual(await usernames(["--group", "user list"]), []);

    const table = await admin(["sessions", "list", "--group", "acme/platform"]);
    assert.equal(table.code, 0, table.stderr);
    assert.match(table.stdout, /2 session\(s\)\n$/);

    for (
      const args of [["sessions", "list", "--group"], ["sessions", "revoke", "--group", "acme"]]
    ) {
      const refused = await admin(args);
      assert.equal(refused.code, 2, `${args.join(" ")}: ${refused.stderr}`);
      assert.match(refused.stderr, /^usage: admin sessions list \[<user>\] \[--group <group>\]/m);
    }
  }));

Deno.test("admin: a group path in a session record is escaped like every other cell", () =>
  withAdmittedSessions(async (_admin, kvPath) => {
    const kv = await Deno.openKv(kvPath);
    const t = await makeTestApp({ kvPath, clock: new FakeClock(Date.now()), env: LISTS });
    try {
      const [stored] = (await recordsOf<SessionRecord>(kv, "session"))
        .filter((entry) => entry.value.access?.admittingGroups.length === 1);
      const hostile = "acme\u202e\x1b[2Jmoc\u200b";
      const access = stored.value.access!;
      const tampered = {
        ...access,
        admittingGroups: [hostile],
        groupLevels: { [hostile]: 30 },
      };
      await kv.set(sessionKey(stored.value.id), { ...stored.value, access: tampered });
      for (const json of [false, true]) {
        const lines: string[] = [];
        const deps = {
          store: t.store,
          logger: silentLogger,
          print: (line: string) => lines.push(line),
          kvFileSize: () => Promise.resolve(0),
        };
        assert.equal(await runStoreCommand({ name: "sessions list", json }, deps), 0);
        const output = lines.join("\n");
        assert.ok(!/[\p{Cc}\p{Cf}]/u.test(output.replaceAll("\n", "")), JSON.stringify(output));
        assert.ok(output.includes("acme\\u202e\\u001b[2Jmoc\\u200b"), output);
        if (json) {
          const paths = lines.flatMap((line) =>
            JSON.parse(line).admittedBy?.groups.map((g: Json) => g.path) ?? []
          );
          assert.ok(paths.includes(hostile), "the JSON parses back to the stored path");
        }
      }
    } finally {
      t.close();
      kv.close();
    }
  }));

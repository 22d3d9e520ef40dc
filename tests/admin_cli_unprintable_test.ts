/**
 * Issue 22 §1.15: format characters (U+202E right-to-left override, U+200B zero width space, the
 * bidi isolates) and C1 controls never reach the operator's terminal raw, neither in the tables
 * nor in `--json` lines; the JSON still parses back to the registered value.
 */

import assert from "node:assert/strict";
import { runStoreCommand } from "../src/admin/commands.ts";
import { silentLogger } from "../src/logger.ts";
import { exchange, issueCode, TEST_BASE, TEST_REDIRECT, withApp } from "./_helpers.ts";

const UNPRINTABLE = /[\p{Cc}\p{Cf}\u2028\u2029]/u;

Deno.test("admin: tables and --json escape format characters and C1 controls", () =>
  withApp(async (t) => {
    const hostile = "Trusted\u202Egnp.exe\u200B\u2066x\u2069\u0085\u009b1m\u2028\u{E0041}";
    const registered = await t.app(
      new Request(`${TEST_BASE}/register`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ client_name: hostile, redirect_uris: [TEST_REDIRECT] }),
      }),
    );
    assert.equal(registered.status, 201, await registered.clone().text());
    assert.equal((await exchange(t, await issueCode(t, { client_id: hostile }))).status, 200);

    for (const name of ["clients list", "sessions list"] as const) {
      for (const json of [false, true]) {
        const lines: string[] = [];
        const deps = {
          store: t.store,
          logger: silentLogger,
          print: (line: string) => lines.push(line),
          kvFileSize: () => Promise.resolve(0),
        };
        assert.equal(await runStoreCommand({ name, json }, deps), 0);
        const output = lines.join("\n");
        assert.ok(
          lines.every((line) => !UNPRINTABLE.test(line)),
          `${name} json=${json}: ${JSON.stringify(output)}`,
        );
        assert.ok(output.includes("Trusted\\u202egnp.exe\\u200b"), `${name} json=${json}`);
        if (json) {
          const values = lines.map((line) => JSON.parse(line));
          const field = name === "clients list" ? "name" : "clientId";
          assert.ok(values.some((v) => v[field] === hostile), `${name}: the value parses back`);
        }
      }
    }
  }));

/**
 * Machine clients on both stores (a Deno KV file, PostgreSQL), with two instances of the app on
 * one store as two service processes would be: an assertion presented to both at once is
 * accepted once, a secret is checked against the hash either instance reads, and a client
 * deleted through one is refused by both.
 */

import assert from "node:assert/strict";
import { assertError, FakeClock, makeTestAppOn, type TestApp, token } from "./_helpers.ts";
import {
  addClient,
  assertion,
  assertionForm,
  basic,
  clientKeyPair,
  writeAccessFile,
} from "./_machine_clients.ts";
import { STORE_KINDS } from "./_stores.ts";
import type { StoreDatabase } from "../src/store/mod.ts";

for (const kind of STORE_KINDS) {
  Deno.test({
    name:
      `client credentials [${kind.name}]: two instances accept an assertion once and refuse a deleted client`,
    ignore: kind.ignore,
    sanitizeResources: false,
    sanitizeOps: false,
    async fn() {
      const shared = await kind.create();
      const handles = [await shared.open(), await shared.open()];
      const apps: TestApp<StoreDatabase>[] = [];
      try {
        const env = {
          MACHINE_ACCESS_FILE: await writeAccessFile([
            { client_id: "robot", servers: ["default"] },
            { client_id: "vault", servers: ["default"] },
          ]),
        };
        const clock = new FakeClock(Date.now());
        for (const handle of handles) {
          apps.push(await makeTestAppOn(handle.database, { env, clock }));
        }
        const [one, two] = apps;
        const key = await clientKeyPair("ES256");
        await addClient(one.store, { id: "robot", jwks: { keys: [key.jwk] } });
        const { client_secret = "" } = await addClient(two.store, { id: "vault", secret: true });

        for (let round = 0; round < 3; round++) {
          const signed = await assertion(key, "robot", clock.now());
          const answers = await Promise.all(
            [one, two, one, two].map((app) => token(app, assertionForm(signed))),
          );
          const statuses = answers.map((answer) => answer.status).sort();
          await Promise.all(answers.map((answer) => answer.body?.cancel()));
          assert.deepEqual(statuses, [200, 401, 401, 401], `round ${round}`);
        }
        const grant = { grant_type: "client_credentials" };
        for (const app of apps) {
          const answer = await token(app, grant, { headers: basic("vault", client_secret) });
          assert.equal(answer.status, 200, await answer.text());
        }

        assert.equal(await one.store.deleteMachineClient("vault"), true);
        assert.equal(await two.store.deleteMachineClient("vault"), false, "deleted once");
        for (const app of apps) {
          await assertError(
            await token(app, grant, { headers: basic("vault", client_secret) }),
            401,
            "invalid_client",
          );
        }
      } finally {
        for (const app of apps) app.close();
        for (const handle of handles) await handle.close();
        await shared.dispose();
      }
    },
  });
}

/**
 * A device code past its `expires_in` answers `expired_token` (RFC 8628 §3.5) on PostgreSQL too,
 * over real HTTP. PostgreSQL never returns a row past its expiry by the database's clock, which
 * the test moves forward with the app's clock (its `kv_now()` redefined on a fresh database):
 * a record kept only until the code's expiry was gone by the first poll after it, which then
 * answered `invalid_grant` for an unknown code.
 */

import assert from "node:assert/strict";
import { DEVICE_CODE_GRANT_TYPE } from "../src/http/grant_types.ts";
import { openDatabase } from "../src/store/open.ts";
import { connect } from "../src/store/postgres/connect.ts";
import { FakeClock, makeTestAppOn } from "./_helpers.ts";
import { ignorePostgresTests, sharedPostgres } from "./_postgres.ts";

Deno.test({
  name: "postgres device expiry: a poll past expires_in answers expired_token, then invalid_grant",
  ignore: ignorePostgresTests,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const url = await (await sharedPostgres()).createDatabase();
    const database = await openDatabase({ databaseUrl: url, databasePoolSize: 2 });
    const admin = connect({ url, poolSize: 1 });
    const clock = new FakeClock(Date.now());
    const app = await makeTestAppOn(database.database, { clock });
    const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, app.app);
    const base = `http://127.0.0.1:${server.addr.port}`;
    /** The app's clock and the database's, `ms` later. */
    const advance = async (ms: number) => {
      clock.advance(ms);
      const offset = clock.now() - Date.now();
      await admin.unsafe(`CREATE OR REPLACE FUNCTION kv_now() RETURNS bigint LANGUAGE sql VOLATILE
        AS $$ SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint + ${offset} $$`);
    };
    try {
      const registered = await (await fetch(`${base}/register`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ client_name: "agent", grant_types: [DEVICE_CODE_GRANT_TYPE] }),
      })).json();
      const started = await (await fetch(`${base}/device_authorization`, {
        method: "POST",
        body: new URLSearchParams({ client_id: registered.client_id }),
      })).json();
      const poll = async () => {
        const response = await fetch(`${base}/token`, {
          method: "POST",
          body: new URLSearchParams({
            grant_type: DEVICE_CODE_GRANT_TYPE,
            device_code: started.device_code,
            client_id: registered.client_id,
          }),
        });
        return (await response.json()).error;
      };
      assert.equal(await poll(), "authorization_pending");
      await advance(started.expires_in * 1000 + started.interval * 1000);
      assert.equal(await poll(), "expired_token", "the first poll past expires_in");
      await advance(started.interval * 1000);
      assert.equal(await poll(), "invalid_grant", "then the code is gone");
    } finally {
      await server.shutdown();
      app.close();
      await admin.end();
      await database.close();
    }
  },
});

/**
 * The PostgreSQL schema, as versioned migrations applied in order at start-up (and by
 * `admin migrate`). A migration once released is never edited: a change is a new entry.
 * They live in code rather than .sql files so that the compiled executable carries them and
 * start-up reads no file.
 */

/** One step of the schema. */
export interface Migration {
  version: number;
  name: string;
  sql: string;
}

export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: "kv",
    sql: `
      -- One row per Deno KV entry: key is the order-preserving encoding of the key tuple
      -- (key_codec.ts), value its V8 serialization, versionstamp 20 hex digits as Deno's.
      CREATE TABLE kv (
        key bytea PRIMARY KEY,
        value bytea NOT NULL,
        versionstamp text NOT NULL,
        expires_at bigint
      );
      CREATE INDEX kv_expires_at ON kv (expires_at) WHERE expires_at IS NOT NULL;
      CREATE SEQUENCE kv_versionstamp;

      -- The database's clock in milliseconds: one clock for every process on every machine.
      CREATE FUNCTION kv_now() RETURNS bigint LANGUAGE sql VOLATILE AS
        $$ SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint $$;

      -- One atomic write in one statement: locks every touched key (hashes sorted by the
      -- caller, so two writes never wait on each other in a cycle), compares the checked
      -- versionstamps (an absent or expired entry has none), then deletes and upserts with one
      -- new versionstamp. NULL: a check failed and nothing was written. Keys and values come
      -- as hex text: arrays of text travel through every driver unchanged.
      CREATE FUNCTION kv_commit(
        lock_ids bigint[],
        check_keys text[], check_stamps text[],
        delete_keys text[],
        set_keys text[], set_values text[], set_expire_in bigint[]
      ) RETURNS text LANGUAGE plpgsql AS $$
      DECLARE
        now_ms bigint := kv_now();
        stamp text;
      BEGIN
        PERFORM pg_advisory_xact_lock(id) FROM unnest(lock_ids) AS id;
        IF EXISTS (
          SELECT 1 FROM unnest(check_keys, check_stamps) AS c(key, stamp)
          LEFT JOIN kv ON kv.key = decode(c.key, 'hex') AND (kv.expires_at IS NULL OR kv.expires_at > now_ms)
          WHERE kv.versionstamp IS DISTINCT FROM c.stamp
        ) THEN
          RETURN NULL;
        END IF;
        stamp := lpad(to_hex(nextval('kv_versionstamp')), 20, '0');
        DELETE FROM kv WHERE key IN (SELECT decode(k, 'hex') FROM unnest(delete_keys) AS k);
        INSERT INTO kv (key, value, versionstamp, expires_at)
          SELECT decode(m.key, 'hex'), decode(m.value, 'hex'), stamp, now_ms + m.expire_in
          FROM unnest(set_keys, set_values, set_expire_in) AS m(key, value, expire_in)
        ON CONFLICT (key) DO UPDATE SET value = excluded.value,
          versionstamp = excluded.versionstamp, expires_at = excluded.expires_at;
        RETURN stamp;
      END $$;
    `,
  },
];

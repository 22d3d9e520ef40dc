/**
 * The store's connection pool, replaced when it is wedged. A database that stops answering
 * without closing its connections (a network partition, a frozen host) leaves every connection
 * waiting for an answer the kernel may keep waiting for for a quarter of an hour; the driver then
 * queues every later statement behind them, and the process would not recover when the
 * database is reachable again. PostgreSQL ends any statement at `statement_timeout`, so a pool
 * in which a statement has waited longer than that (and the connect timeout) while no statement
 * at all has finished is not slow but cut off: a fresh pool takes its place at once, and the old
 * one is ended, which fails what still waited on it (the requests gave up long before: the
 * database deadline, ../deadline.ts).
 */

import { connect, type PostgresOptions, type Sql } from "./connect.ts";

/** How often the pool looks for a wedge. */
const CHECK_INTERVAL_MS = 1_000;
/** Beyond the server's and the driver's own limits, before a pool is called wedged. */
const MARGIN_MS = 1_000;

/** A pool that replaces itself when wedged. */
export interface Pool {
  /** Runs `statement` on the current pool, counted for the wedge check. */
  run<T>(statement: (sql: Sql) => Promise<T>): Promise<T>;
  /** Ends the pool (and stops checking); `timeoutSeconds` as the driver's `end`. */
  end(timeoutSeconds: number): Promise<void>;
}

/** Connects as `options` say (no statement is sent yet). */
export function createPool(
  options: PostgresOptions & { statementTimeoutMs: number; connectTimeoutSeconds: number },
  now: () => number = () => performance.now(),
): Pool {
  let sql: Sql = connect(options);
  const started = new Map<symbol, number>();
  let lastFinished = now();
  const wedgedAfterMs = options.statementTimeoutMs + options.connectTimeoutSeconds * 1000 +
    MARGIN_MS;

  function wedged(at: number): boolean {
    if (at - lastFinished < wedgedAfterMs) return false;
    for (const since of started.values()) if (at - since >= wedgedAfterMs) return true;
    return false;
  }

  const timer = setInterval(() => {
    if (!wedged(now())) return;
    const old = sql;
    sql = connect(options);
    started.clear();
    lastFinished = now();
    // Fails what still waits on the old connections (CONNECTION_DESTROYED: unavailable).
    old.end({ timeout: 0 }).catch(() => {});
  }, CHECK_INTERVAL_MS);
  Deno.unrefTimer(timer);

  return {
    async run(statement) {
      const id = Symbol();
      started.set(id, now());
      try {
        return await statement(sql);
      } finally {
        if (started.delete(id)) lastFinished = now();
      }
    },
    end(timeoutSeconds) {
      clearInterval(timer);
      return sql.end({ timeout: timeoutSeconds });
    },
  };
}

/**
 * All persistent state, in Deno KV. `src/store/` is the only place that knows the keys
 * (`keys.ts` lists them with their values and lifetimes); each record kind has its module,
 * and every read and write goes through `io.ts` (group read, group commit, lock retries).
 *
 * There is no refresh-token index: a refresh token names its session (session_tokens.ts) and
 * the session keeps the token's hash, so a refresh reads and writes one key (and, the first time
 * in a day, moves the session's idle index entry: idle_sessions.ts). Every key touched costs
 * SQLite a page or two, which is what grows with the number of sessions.
 *
 * Every single-use or rotating transition is one atomic commit guarded by the versionstamps it
 * read.
 *
 * Every operation is bounded by the database deadline (deadline.ts): a request that runs through
 * `withDeadline` waits for the database at most DATABASE_TIMEOUT_MS in all, and is then
 * answered StoreUnavailableError.
 */

import type { Clock } from "../clock.ts";
import type { SecretBox } from "../secret_box.ts";
import type { StoreDatabase } from "./backend.ts";
import { type ClientDocumentStore, createClientDocumentStore } from "./client_documents.ts";
import { type ClientStore, createClientStore } from "./clients.ts";
import { type CodeStore, createCodeStore } from "./codes.ts";
import {
  createDeviceAuthorizationStore,
  type DeviceAuthorizationStore,
} from "./device_authorizations.ts";
import { createFlowStore, type FlowStore } from "./flows.ts";
import { createIdleSessionStore, type IdleSessionStore } from "./idle_sessions.ts";
import { createStoreIo } from "./io.ts";
import { createStoreDeadline } from "./deadline.ts";
import { type AssertionIdStore, createAssertionIdStore } from "./assertion_ids.ts";
import { createMachineClientStore, type MachineClientStore } from "./machine_clients.ts";
import { leaseKey } from "./keys.ts";
import { createLeaseStore, type LeaseStore } from "./leases.ts";
import { createLimitStore, type LimitStore } from "./limits.ts";
import { createMcpSessionStore, type McpSessionStore } from "./mcp_sessions.ts";
import { createPollBudgetStore, type PollBudgetStore } from "./poll_budget.ts";
import { createOperatorStore, type OperatorStore } from "./operators.ts";
import { createOperatorCountStore, type OperatorCountStore } from "./operator_counts.ts";
import { createRepeatStore, type RepeatStore } from "./repeats.ts";
import { createSessionRecords, type SessionStore } from "./sessions.ts";
import { createUnredeemedStore, type UnredeemedStore } from "./unredeemed.ts";
import { createSignInStore, type SignInStore } from "./sign_ins.ts";
import { createUpstreamPauseStore, type UpstreamPauseStore } from "./upstream_pause.ts";

export type { Versioned } from "./io.ts";
export { DEFAULT_DATABASE_TIMEOUT_MS } from "./deadline.ts";
export { type KvBackend, type StoreDatabase, StoreUnavailableError } from "./backend.ts";
export type { CodeAndSession } from "./codes.ts";
export type { FlowCompletion } from "./flows.ts";
export type { Lease } from "./leases.ts";
export type { RefreshGrace, TakenGrace } from "./sessions.ts";
export type { RecordCounts, SessionFilter } from "./operators.ts";
export type { RepeatRecord } from "./repeats.ts";
export type { MachineClientCredential, MachineClientRecord } from "./machine_clients.ts";
export type { BudgetCut, PollBudgetState, PollDecision } from "./poll_budget.ts";

/** The service's storage operations. */
export interface Store
  extends
    FlowStore,
    SignInStore,
    CodeStore,
    DeviceAuthorizationStore,
    SessionStore,
    ClientStore,
    ClientDocumentStore,
    MachineClientStore,
    AssertionIdStore,
    LimitStore,
    LeaseStore,
    McpSessionStore,
    OperatorStore,
    OperatorCountStore,
    UpstreamPauseStore,
    PollBudgetStore,
    RepeatStore,
    UnredeemedStore,
    IdleSessionStore {
  /**
   * Health checks: throws when the database cannot be read; `replaced` when its KV file is no
   * longer at KV_PATH (deleted, or another file moved there); `read_only` when it refuses writes
   * (a PostgreSQL standby or `default_transaction_read_only`; a KV file whose storage refused
   * the last write and still does).
   */
  ping(): Promise<"ok" | "read_only" | "replaced">;
  /**
   * Runs one request's `work`: all the store operations it awaits share one budget of
   * database time (`timeoutMs`), past which they throw StoreUnavailableError.
   */
  withDeadline<T>(work: () => Promise<T>): Promise<T>;
}

/** How a store is built beyond its database, clock and secrets. */
export interface StoreOptions {
  /** Told each KV commit's duration in milliseconds. */
  observeCommit?: (ms: number) => void;
  /** Database time one request may wait for, in all (DATABASE_TIMEOUT_MS); 5000 by default. */
  timeoutMs?: number;
}

/**
 * Builds the store over an open database (Deno KV or PostgreSQL), a clock, and the box that
 * seals secrets at rest.
 */
export function createStore(
  kv: StoreDatabase,
  clock: Clock,
  secrets: SecretBox,
  options: StoreOptions = {},
): Store {
  const deadline = createStoreDeadline(options.timeoutMs);
  const io = createStoreIo(kv, clock, deadline, options.observeCommit);
  const sessions = createSessionRecords(io, secrets);
  const { liveSessionOf: _l, fromStored: _f, writeRotated: _w, ...sessionStore } = sessions;
  return {
    ...createFlowStore(io, secrets),
    ...createSignInStore(io, secrets),
    ...createCodeStore(io, sessions),
    ...createDeviceAuthorizationStore(io, sessions),
    ...sessionStore,
    ...createClientStore(io),
    ...createClientDocumentStore(io),
    ...createMachineClientStore(io),
    ...createAssertionIdStore(io),
    ...createLimitStore(io),
    ...createLeaseStore(io),
    ...createMcpSessionStore(io, sessions),
    ...createOperatorStore(io),
    ...createOperatorCountStore(io),
    ...createUpstreamPauseStore(io),
    ...createPollBudgetStore(io),
    ...createRepeatStore(io, secrets),
    ...createUnredeemedStore(io),
    ...createIdleSessionStore(io),
    async ping() {
      await io.read(leaseKey("health", "ping"));
      if (await io.replaced()) return "replaced";
      return await io.writable(leaseKey("health", "ping")) ? "ok" : "read_only";
    },
    withDeadline: (work) => deadline.run(work),
  };
}

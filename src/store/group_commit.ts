/**
 * Group commit. A file-backed Deno KV spends most of a commit on the SQLite transaction itself,
 * and runs one at a time; so atomic writes that arrive while a commit is in flight wait, and
 * then go together in the next one. Each write keeps its own outcome:
 *
 * - writes that touch a common key (checked or mutated) never share a commit, and keep their
 *   order, so every check means what it meant alone;
 * - when a shared commit fails (a check, or a limit of KV), its writes are committed again one
 *   by one, so only a write whose own check fails reports `ok: false`.
 *
 * A write's promise resolves only after the commit that holds it is durable, as before.
 */

import { type Caller, type Callers, createSerialBatches } from "./serial_batches.ts";

/** What one atomic write checks and changes. */
export interface PlannedWrite {
  /** Versionstamps that must still hold (null: the key must be absent). */
  checks: Deno.AtomicCheck[];
  /** Sets and deletes, applied all together or not at all. */
  mutations: Deno.KvMutation[];
}

/** `{ ok: true, versionstamp }`, or `{ ok: false }` when a check failed. */
export type CommitOutcome = Deno.KvCommitResult | Deno.KvCommitError;

/** Commits one planned write (merged or not) as a single KV atomic operation. */
export type ExecuteWrite = (write: PlannedWrite) => Promise<CommitOutcome>;

/** How much one shared commit may hold. Deno KV allows 100 checks and 1,000 mutations. */
export interface GroupLimits {
  writes: number;
  checks: number;
  mutations: number;
}

const DEFAULT_LIMITS: GroupLimits = { writes: 64, checks: 100, mutations: 1000 };

/** Builds a write fluently, like `kv.atomic()`, and submits it to a group commit. */
export class AtomicWrite implements PlannedWrite {
  readonly checks: Deno.AtomicCheck[] = [];
  readonly mutations: Deno.KvMutation[] = [];

  constructor(private readonly submit: (write: PlannedWrite) => Promise<CommitOutcome>) {}

  check(...checks: Deno.AtomicCheck[]): this {
    this.checks.push(...checks);
    return this;
  }

  set(key: Deno.KvKey, value: unknown, options?: { expireIn?: number }): this {
    const mutation: Deno.KvMutation = { type: "set", key, value };
    if (options?.expireIn !== undefined) mutation.expireIn = options.expireIn;
    this.mutations.push(mutation);
    return this;
  }

  delete(key: Deno.KvKey): this {
    this.mutations.push({ type: "delete", key });
    return this;
  }

  commit(): Promise<CommitOutcome> {
    return this.submit(this);
  }
}

interface Pending {
  write: PlannedWrite;
  /** Gives up when the writer did: a write not yet sent is then withdrawn, never applied. */
  caller?: Caller;
  keys: string[];
  resolve(outcome: CommitOutcome): void;
  reject(error: unknown): void;
}

/** Returns `submit`, which commits a write together with whatever else is waiting. */
export function createGroupCommit(
  execute: ExecuteWrite,
  limits: GroupLimits = DEFAULT_LIMITS,
): (write: PlannedWrite, caller?: Caller) => Promise<CommitOutcome> {
  const enqueue = createSerialBatches(takeGroup, commitGroup, CALLERS);

  /** The next writes to commit together, in arrival order, none sharing a key. */
  function takeGroup(queue: Pending[]): Pending[] {
    const group: Pending[] = [];
    const taken = new Set<string>();
    const waiting = new Set<string>();
    let checks = 0;
    let mutations = 0;
    for (let i = 0; i < queue.length && group.length < limits.writes;) {
      const pending = queue[i];
      const { write, keys } = pending;
      const fits = checks + write.checks.length <= limits.checks &&
        mutations + write.mutations.length <= limits.mutations;
      if (group.length > 0 && !fits) break;
      if (keys.some((key) => taken.has(key) || waiting.has(key))) {
        // It waits for the next group; so does anything after it on the same keys.
        for (const key of keys) waiting.add(key);
        i++;
        continue;
      }
      queue.splice(i, 1);
      group.push(pending);
      for (const key of keys) taken.add(key);
      checks += write.checks.length;
      mutations += write.mutations.length;
    }
    return group;
  }

  async function commitGroup(group: Pending[]): Promise<void> {
    if (group.length === 1) return await commitAlone(group[0]);
    const merged: PlannedWrite = {
      checks: group.flatMap((pending) => pending.write.checks),
      mutations: group.flatMap((pending) => pending.write.mutations),
    };
    let outcome: CommitOutcome | null = null;
    try {
      outcome = await execute(merged);
    } catch {
      // Retried one by one below, where each write meets its own error.
    }
    if (outcome?.ok) {
      for (const pending of group) pending.resolve(outcome);
      return;
    }
    await Promise.all(group.map(commitAlone));
  }

  async function commitAlone(pending: Pending): Promise<void> {
    try {
      pending.resolve(await execute(pending.write));
    } catch (error) {
      pending.reject(error);
    }
  }

  return (write, caller) =>
    new Promise<CommitOutcome>((resolve, reject) => {
      enqueue({ write, caller, keys: keysOf(write), resolve, reject });
    });
}

function keysOf(write: PlannedWrite): string[] {
  return [...write.checks, ...write.mutations].map(({ key }) => keyId(key));
}

/** Equal keys give equal ids; an accidental collision only delays a write to the next group. */
function keyId(key: Deno.KvKey): string {
  return key.map((part) => `${typeof part}:${String(part)}`).join("\u0000");
}

/** Each item's caller, and how a withdrawn one is told. */
const CALLERS: Callers<Pending> = {
  callerOf: (pending) => pending.caller,
  reject: (pending, reason) => pending.reject(reason),
};

import assert from "node:assert/strict";
import { AtomicWrite, createGroupCommit, type PlannedWrite } from "../src/store/group_commit.ts";

/** A group commit over a real in-memory KV that records what each transaction held. */
async function recordingGroupCommit(limits?: Parameters<typeof createGroupCommit>[1]) {
  const kv = await Deno.openKv(":memory:");
  const transactions: PlannedWrite[] = [];
  /** While set, every transaction waits for it before it reaches KV. */
  const held: { until?: Promise<void> } = {};
  const submit = createGroupCommit(async (write) => {
    transactions.push(write);
    await held.until;
    return await kv.atomic().check(...write.checks).mutate(...write.mutations).commit();
  }, limits);
  const atomic = () => new AtomicWrite(submit);
  return { kv, transactions, atomic, held, [Symbol.dispose]: () => kv.close() };
}

/** Resolves once `condition` holds, checking on every turn of the event loop. */
async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((resolve) => setTimeout(resolve, 0));
}

/** A write that creates `key` only if it does not exist yet. */
function createOnce(atomic: () => AtomicWrite, key: Deno.KvKey, value: unknown) {
  return atomic().check({ key, versionstamp: null }).set(key, value).commit();
}

Deno.test("group commit: a write with nothing in flight commits at once, alone", async () => {
  using t = await recordingGroupCommit();
  const outcome = await createOnce(t.atomic, ["a"], 1);
  assert.equal(outcome.ok, true);
  assert.equal(t.transactions.length, 1);
  assert.equal((await t.kv.get(["a"])).value, 1);
});

Deno.test("group commit: writes submitted in one turn of the event loop share one commit", async () => {
  using t = await recordingGroupCommit();
  const outcomes = await Promise.all(
    Array.from({ length: 20 }, (_, i) => createOnce(t.atomic, ["k", i], i)),
  );
  assert.ok(outcomes.every((outcome) => outcome.ok));
  assert.deepEqual(t.transactions.map((write) => write.mutations.length), [20]);
  const stored = await Array.fromAsync(t.kv.list<number>({ prefix: ["k"] }));
  assert.deepEqual(stored.map((entry) => entry.value), Array.from({ length: 20 }, (_, i) => i));
});

Deno.test("group commit: writes arriving during a commit share the next one", async () => {
  using t = await recordingGroupCommit();
  const { promise, resolve } = Promise.withResolvers<void>();
  t.held.until = promise;
  const first = createOnce(t.atomic, ["k", 0], 0);
  await until(() => t.transactions.length === 1);
  const rest = Array.from({ length: 19 }, (_, i) => createOnce(t.atomic, ["k", i + 1], i + 1));
  resolve();
  const outcomes = await Promise.all([first, ...rest]);
  assert.ok(outcomes.every((outcome) => outcome.ok));
  // The first goes alone; the 19 that queued behind it go together.
  assert.deepEqual(t.transactions.map((write) => write.mutations.length), [1, 19]);
  const stored = await Array.fromAsync(t.kv.list<number>({ prefix: ["k"] }));
  assert.deepEqual(stored.map((entry) => entry.value), Array.from({ length: 20 }, (_, i) => i));
});

Deno.test("group commit: writes on one key never share a commit, so exactly one wins", async () => {
  using t = await recordingGroupCommit();
  const outcomes = await Promise.all(
    Array.from({ length: 10 }, (_, i) => createOnce(t.atomic, ["contested"], i)),
  );
  assert.equal(outcomes.filter((outcome) => outcome.ok).length, 1);
  assert.equal((await t.kv.get(["contested"])).value, 0);
  for (const write of t.transactions) assert.ok(write.mutations.length <= 1);
});

Deno.test("group commit: a failed check in a shared commit fails only its own write", async () => {
  using t = await recordingGroupCommit();
  await t.kv.set(["taken"], "before");
  const first = createOnce(t.atomic, ["first"], 1); // in flight while the others queue
  const queued = [
    createOnce(t.atomic, ["x"], 1),
    createOnce(t.atomic, ["taken"], "after"),
    createOnce(t.atomic, ["y"], 2),
  ];
  const outcomes = await Promise.all([first, ...queued]);
  assert.deepEqual(outcomes.map((outcome) => outcome.ok), [true, true, false, true]);
  assert.equal((await t.kv.get(["taken"])).value, "before");
  assert.equal((await t.kv.get(["x"])).value, 1);
  assert.equal((await t.kv.get(["y"])).value, 2);
});

Deno.test("group commit: a write on a waiting write's key does not overtake it", async () => {
  using t = await recordingGroupCommit();
  const inFlight = createOnce(t.atomic, ["first"], 1);
  // Queued behind it: b waits for a (both write ["a"]); c, which shares only ["shared"] with
  // b, must then wait for b too, or b would overwrite the later value c wrote.
  const a = t.atomic().set(["a"], "a").commit();
  const b = t.atomic().set(["a"], "b").set(["shared"], "b").commit();
  const c = t.atomic().set(["shared"], "c").commit();
  await Promise.all([inFlight, a, b, c]);
  assert.equal((await t.kv.get(["a"])).value, "b");
  assert.equal((await t.kv.get(["shared"])).value, "c");
});

Deno.test("group commit: a shared commit holds at most KV's limit of checks", async () => {
  using t = await recordingGroupCommit({ writes: 1000, checks: 100, mutations: 1000 });
  const outcomes = await Promise.all(
    Array.from({ length: 250 }, (_, i) => createOnce(t.atomic, ["n", i], i)),
  );
  assert.ok(outcomes.every((outcome) => outcome.ok));
  assert.ok(t.transactions.every((write) => write.checks.length <= 100));
  assert.equal(t.transactions.reduce((sum, write) => sum + write.checks.length, 0), 250);
});

Deno.test("group commit: an error refusing one write reaches its caller only", async () => {
  using t = await recordingGroupCommit();
  const tooLarge = "x".repeat(70_000); // over KV's 64 KiB value limit
  const first = createOnce(t.atomic, ["first"], 1);
  const good = createOnce(t.atomic, ["good"], 1);
  const bad = assert.rejects(createOnce(t.atomic, ["bad"], tooLarge), /too large/i);
  assert.equal((await first).ok, true);
  assert.equal((await good).ok, true);
  await bad;
  assert.equal((await t.kv.get(["bad"])).versionstamp, null);
});

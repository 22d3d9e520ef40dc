import assert from "node:assert/strict";
import { createGroupRead, type ReadMany } from "../src/store/group_read.ts";

/** A group read over a real in-memory KV holding ["k", 0…29] = i, recording every getMany. */
async function recordingGroupRead(wrap?: (read: ReadMany) => ReadMany, maxKeys?: number) {
  const kv = await Deno.openKv(":memory:");
  for (let i = 0; i < 30; i++) await kv.set(["k", i], i);
  const calls: Deno.KvKey[][] = [];
  const base: ReadMany = (keys) => {
    calls.push(keys);
    return kv.getMany(keys);
  };
  const read = createGroupRead(wrap ? wrap(base) : base, maxKeys);
  return { read, calls, [Symbol.dispose]: () => kv.close() };
}

const values = (entries: Deno.KvEntryMaybe<unknown>[]) => entries.map((entry) => entry.value);

Deno.test("group read: a read with nothing in flight goes at once, alone", async () => {
  using t = await recordingGroupRead();
  assert.deepEqual(values(await t.read([["k", 1], ["k", 2]])), [1, 2]);
  assert.deepEqual(t.calls, [[["k", 1], ["k", 2]]]);
});

Deno.test("group read: reads of one turn share a getMany, up to its limit, each gets its own", async () => {
  using t = await recordingGroupRead();
  const reads = Array.from({ length: 9 }, (_, i) => t.read([["k", 2 * i], ["k", 2 * i + 1]]));
  const results = await Promise.all(reads);
  results.forEach((entries, i) => assert.deepEqual(values(entries), [2 * i, 2 * i + 1]));
  // At most 10 keys (5 reads of 2) per getMany.
  assert.deepEqual(t.calls.map((keys) => keys.length), [10, 8]);
});

Deno.test("group read: reads arriving during a read share the next one", async () => {
  const { promise: held, resolve: release } = Promise.withResolvers<void>();
  let started = 0;
  using t = await recordingGroupRead((read) => async (keys) => {
    started++;
    await held;
    return await read(keys);
  });
  const first = t.read([["k", 0]]);
  while (started === 0) await new Promise((resolve) => setTimeout(resolve, 0));
  const rest = [1, 2, 3].map((i) => t.read([["k", i]]));
  release();
  const results = await Promise.all([first, ...rest]);
  results.forEach((entries, i) => assert.deepEqual(values(entries), [i]));
  assert.deepEqual(t.calls.map((keys) => keys.length), [1, 3]);
});

Deno.test("group read: absent keys and repeated keys answer like getMany", async () => {
  using t = await recordingGroupRead();
  const [first, second, third] = await Promise.all([
    t.read([["k", 0]]),
    t.read([["missing"], ["k", 3]]),
    t.read([["k", 3]]),
  ]);
  assert.deepEqual(values(first), [0]);
  assert.deepEqual(values(second), [null, 3]);
  assert.equal(second[0].versionstamp, null);
  assert.deepEqual(values(third), [3]);
});

Deno.test("group read: a read larger than the limit goes alone", async () => {
  using t = await recordingGroupRead(undefined, 4);
  const small = t.read([["k", 0]]);
  const large = t.read([["k", 1], ["k", 2], ["k", 3], ["k", 4], ["k", 5]]);
  const after = t.read([["k", 6]]);
  assert.deepEqual(values(await large), [1, 2, 3, 4, 5]);
  assert.deepEqual(values(await small), [0]);
  assert.deepEqual(values(await after), [6]);
  assert.deepEqual(t.calls.map((keys) => keys.length), [1, 5, 1]);
});

Deno.test("group read: an error in a merged read reaches only the caller it belongs to", async () => {
  const failOnPoison = (read: ReadMany): ReadMany => (keys) =>
    keys.some((key) => key[0] === "poison")
      ? Promise.reject(new Error("cannot read poison"))
      : read(keys);
  using t = await recordingGroupRead(failOnPoison);
  const first = t.read([["k", 0]]);
  const good = t.read([["k", 1]]);
  const bad = assert.rejects(t.read([["poison"]]), /cannot read poison/);
  const alsoGood = t.read([["k", 2]]);
  assert.deepEqual(values(await first), [0]);
  assert.deepEqual(values(await good), [1]);
  assert.deepEqual(values(await alsoGood), [2]);
  await bad;
});

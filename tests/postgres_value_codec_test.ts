/**
 * The PostgreSQL store's value encoding (src/store/postgres/value_codec.ts) writes exactly the
 * bytes node:v8 `serialize` writes, so rows stored before it (by node:v8) and after it read the
 * same, and what it does not write itself it leaves to node:v8.
 */

import assert from "node:assert/strict";
import { deserialize, serialize } from "node:v8";
import { decodeValue, encodeValue } from "../src/store/postgres/value_codec.ts";

const hex = (bytes: Uint8Array) =>
  Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");

function assertSameBytes(value: unknown): void {
  assert.equal(hex(encodeValue(value)), hex(serialize(value)), `bytes of ${String(value)}`);
  assert.deepEqual(deserialize(encodeValue(value)), value);
  assertReadsAsNodeV8(value);
}

/** decodeValue reads node:v8's bytes of `value` as node:v8 reads them. */
function assertReadsAsNodeV8(value: unknown): void {
  const bytes = serialize(value);
  const read = decodeValue(bytes);
  assert.deepEqual(read, deserialize(bytes));
  if (typeof read === "number") assert.ok(Object.is(read, deserialize(bytes)), String(value));
}

Deno.test("value codec: records as the store writes them, byte for byte as node:v8", () => {
  const now = Date.now();
  assertSameBytes({
    id: crypto.randomUUID(),
    clientId: "bench-client",
    sealedTokens: "v1.Zm9vYmFy".repeat(20),
    user: { id: 100_001, username: "bench-user-1", name: "Zoë Ünïcode 😀 名前" },
    scopes: ["api", "read_user"],
    expiresAt: now + 86_400_000,
    updatedAt: now,
    mcpTokenExpiry: null,
    revoked: false,
    note: undefined,
    nested: [[], {}, [1, [2, { three: "3" }]]],
  });
});

Deno.test("value codec: scalars at V8's edges", () => {
  for (
    const value of [
      null,
      undefined,
      true,
      false,
      0,
      -1,
      63,
      64,
      -65,
      2 ** 31 - 1,
      2 ** 31,
      -(2 ** 31),
      -(2 ** 31) - 1,
      Number.MAX_SAFE_INTEGER,
      1.5,
      -0,
      NaN,
      -Infinity,
      "",
      "latin-1 é ÿ",
      "two-byte €",
      "surrogates 😀",
      "x".repeat(70_000),
    ]
  ) assertSameBytes(value);
});

Deno.test("value codec: two-byte strings at every alignment get V8's padding", () => {
  for (let n = 0; n < 8; n++) {
    assertSameBytes({ ["k".repeat(n)]: "€".repeat(n + 1), list: ["é".repeat(n), "名"] });
  }
});

Deno.test("value codec: what is not plain data is left to node:v8", () => {
  const shared = { a: 1 };
  for (
    const value of [
      new Date(0),
      new Uint8Array([1, 2, 3]),
      new Map([[1, 2]]),
      10n,
      { "1": "integer-like key", a: 2 },
      [1, , 3],
      { twice: shared, again: shared },
      Object.assign(Object.create(null), { bare: true }),
    ]
  ) {
    assert.equal(hex(encodeValue(value)), hex(serialize(value)));
    assertReadsAsNodeV8(value);
  }
});

Deno.test("value codec: a __proto__ key reads as an own property, as node:v8 reads it", () => {
  const bytes = serialize(JSON.parse('{"__proto__": {"polluted": true}, "a": 1}'));
  const read = decodeValue(bytes) as Record<string, unknown>;
  assert.deepEqual(read, deserialize(bytes));
  assert.equal(Object.getPrototypeOf(read), Object.prototype);
  assert.equal(({} as Record<string, unknown>).polluted, undefined);
});

Deno.test("value codec: truncated or foreign bytes are node:v8's to judge", () => {
  const bytes = serialize({ a: "text", b: [1, 2] });
  for (let end = 0; end < bytes.length; end++) {
    const part = bytes.subarray(0, end);
    let expected: unknown, actual: unknown;
    try {
      expected = deserialize(part);
    } catch (error) {
      expected = error instanceof Error ? error.constructor : error;
    }
    try {
      actual = decodeValue(part);
    } catch (error) {
      actual = error instanceof Error ? error.constructor : error;
    }
    assert.deepEqual(actual, expected, `first ${end} bytes`);
  }
});

/**
 * The PostgreSQL store's key encoding (src/store/postgres/key_codec.ts) against Deno KV itself,
 * on thousands of seeded random key tuples made of the awkward parts: strings and bytes holding
 * 0x00 and 0xFF (the separator and its escape), astral and non-ASCII characters, empty and long
 * parts, -0, infinities, bigints past 64 bits, booleans. Two keys get the same bytes exactly
 * when Deno KV holds them as one key (it reads a lone surrogate as U+FFFD, and so do we), the
 * bytes sort in Deno KV's list order, and every key decodes back to itself.
 */

import assert from "node:assert/strict";
import { decodeKey, encodeKey } from "../src/store/postgres/key_codec.ts";

/** A small seeded generator (mulberry32): the same keys on every run. */
function random(seed: number): (n: number) => number {
  return (n) => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return Math.floor((((t ^ (t >>> 14)) >>> 0) / 4294967296) * n);
  };
}

const CHARS = [
  "\u0000",
  "\u0001",
  "\u00ff",
  "A",
  "é",
  "\u{10ffff}",
  "\u{1f600}",
  "\ud800",
  "\ufffd",
];
const BYTES = [0x00, 0x01, 0x7f, 0x80, 0xfe, 0xff];
const NUMBERS = [0, -0, 1, -1, 1.5, -1e300, 1e300, Infinity, -Infinity, 2 ** 53, -(2 ** 31)];
const BIGINTS = [0n, 1n, -1n, 255n, 256n, -256n, 2n ** 64n, -(2n ** 64n), 10n ** 40n];

function keyOf(pick: (n: number) => number): Deno.KvKey {
  const part = (): Deno.KvKeyPart => {
    switch (pick(6)) {
      case 0:
        return Array.from({ length: pick(5) }, () => CHARS[pick(CHARS.length)]).join("");
      case 1:
        return Uint8Array.from({ length: pick(5) }, () => BYTES[pick(BYTES.length)]);
      case 2:
        return NUMBERS[pick(NUMBERS.length)];
      case 3:
        return BIGINTS[pick(BIGINTS.length)];
      case 4:
        return pick(2) === 1;
      default:
        return "x".repeat(pick(3) * 300); // Deno KV takes keys up to 2,048 bytes
    }
  };
  return Array.from({ length: 1 + pick(3) }, part);
}

const hex = (bytes: Uint8Array) =>
  Array.from(bytes, (byte) => byte.toString(16).padStart(2, "0")).join("");

Deno.test("postgres key codec: keys collide exactly where Deno KV's do, and sort as Deno KV lists them", async () => {
  const pick = random(38);
  const kv = await Deno.openKv(":memory:");
  try {
    const encodings = new Set<string>();
    for (let i = 0; i < 3000; i++) {
      const key = keyOf(pick);
      const bytes = encodeKey(key);
      const again = encodeKey(decodeKey(bytes));
      assert.equal(hex(again), hex(bytes), `${Deno.inspect(key)} does not decode to itself`);
      encodings.add(hex(bytes));
      await kv.set(["k", ...key], hex(bytes));
    }
    const listed = await Array.fromAsync(kv.list<string>({ prefix: ["k"] }), (e) => e.value);
    assert.equal(encodings.size, listed.length, "as many distinct keys as Deno KV holds");
    assert.deepEqual(listed, [...encodings].sort(), "byte order is Deno KV's order");
  } finally {
    kv.close();
  }
});

/**
 * Deno KV key tuples as bytes whose byte order (PostgreSQL compares `bytea` like memcmp) is
 * Deno KV's key order, so that prefix and range lists are index range scans. Each part is a
 * type byte then its encoding, after the tuple layer Deno KV itself uses:
 *
 * - Uint8Array 0x01 and string 0x02 (UTF-8): the bytes with 0x00 written 0x00 0xFF, then 0x00;
 * - bigint: 0x1f (negative) or 0x20, the magnitude's length and big-endian bytes (the negative
 *   ones inverted, so that larger magnitudes sort first);
 * - number 0x21: the IEEE 754 bits, sign bit flipped for positives, all bits for negatives
 *   (-0 included);
 * - false 0x26, true 0x27.
 */

const BYTES = 0x01;
const STRING = 0x02;
const NEGATIVE_BIGINT = 0x1f;
const BIGINT = 0x20;
const NUMBER = 0x21;
const FALSE = 0x26;
const TRUE = 0x27;

const utf8 = new TextEncoder();
const fromUtf8 = new TextDecoder("utf-8", { fatal: true });

/** The bytes of `key`. */
export function encodeKey(key: Deno.KvKey): Uint8Array {
  const out: number[] = [];
  for (const part of key) encodePart(part, out);
  return Uint8Array.from(out);
}

/** The key tuple `encodeKey` made `bytes` from. */
export function decodeKey(bytes: Uint8Array): Deno.KvKey {
  const parts: Deno.KvKeyPart[] = [];
  let at = 0;
  while (at < bytes.length) {
    const [part, next] = decodePart(bytes, at);
    parts.push(part);
    at = next;
  }
  return parts;
}

/** The first byte string after every key that starts with `prefix` plus at least one part. */
export function prefixEnd(prefix: Uint8Array): Uint8Array {
  const end = new Uint8Array(prefix.length + 1);
  end.set(prefix);
  end[prefix.length] = 0xff;
  return end;
}

/** The first key strictly inside `prefix` (the prefix itself excluded, as Deno KV does). */
export function prefixStart(prefix: Uint8Array): Uint8Array {
  const start = new Uint8Array(prefix.length + 1);
  start.set(prefix);
  return start;
}

function encodePart(part: Deno.KvKeyPart, out: number[]): void {
  if (part instanceof Uint8Array) return escaped(BYTES, part, out);
  switch (typeof part) {
    case "string":
      return escaped(STRING, utf8.encode(part), out);
    case "number":
      return encodeNumber(part, out);
    case "bigint":
      return encodeBigint(part, out);
    case "boolean":
      out.push(part ? TRUE : FALSE);
      return;
  }
  throw new TypeError(`unsupported key part: ${typeof part}`);
}

function escaped(type: number, bytes: Uint8Array, out: number[]): void {
  out.push(type);
  for (const byte of bytes) {
    out.push(byte);
    if (byte === 0) out.push(0xff);
  }
  out.push(0);
}

function encodeNumber(value: number, out: number[]): void {
  const bytes = new Uint8Array(8);
  // -0 keeps its sign bit: a key of its own just before 0, as in Deno KV.
  new DataView(bytes.buffer).setFloat64(0, value);
  if (bytes[0] & 0x80) {
    for (let i = 0; i < 8; i++) bytes[i] ^= 0xff;
  } else {
    bytes[0] ^= 0x80;
  }
  out.push(NUMBER, ...bytes);
}

function encodeBigint(value: bigint, out: number[]): void {
  const negative = value < 0n;
  let magnitude = negative ? -value : value;
  const bytes: number[] = [];
  while (magnitude > 0n) {
    bytes.unshift(Number(magnitude & 0xffn));
    magnitude >>= 8n;
  }
  if (bytes.length > 255) throw new TypeError("bigint key part too large");
  if (negative) out.push(NEGATIVE_BIGINT, 255 - bytes.length, ...bytes.map((b) => 255 - b));
  else out.push(BIGINT, bytes.length, ...bytes);
}

function decodePart(bytes: Uint8Array, at: number): [Deno.KvKeyPart, number] {
  const type = bytes[at];
  switch (type) {
    case BYTES:
    case STRING: {
      const [raw, next] = unescaped(bytes, at + 1);
      return [type === BYTES ? raw : fromUtf8.decode(raw), next];
    }
    case NUMBER: {
      // A copy: a Node Buffer's slice is a view, and this flips bits in place.
      const raw = new Uint8Array(bytes.subarray(at + 1, at + 9));
      if (raw[0] & 0x80) raw[0] ^= 0x80;
      else for (let i = 0; i < 8; i++) raw[i] ^= 0xff;
      return [new DataView(raw.buffer).getFloat64(0), at + 9];
    }
    case BIGINT:
    case NEGATIVE_BIGINT: {
      const negative = type === NEGATIVE_BIGINT;
      const length = negative ? 255 - bytes[at + 1] : bytes[at + 1];
      let magnitude = 0n;
      for (let i = 0; i < length; i++) {
        const byte = bytes[at + 2 + i];
        magnitude = (magnitude << 8n) | BigInt(negative ? 255 - byte : byte);
      }
      return [negative ? -magnitude : magnitude, at + 2 + length];
    }
    case FALSE:
      return [false, at + 1];
    case TRUE:
      return [true, at + 1];
  }
  throw new TypeError(`not an encoded key (type byte ${type})`);
}

function unescaped(bytes: Uint8Array, at: number): [Uint8Array, number] {
  const out: number[] = [];
  for (let i = at; i < bytes.length; i++) {
    if (bytes[i] !== 0) {
      out.push(bytes[i]);
    } else if (bytes[i + 1] === 0xff) {
      out.push(0);
      i++;
    } else {
      return [Uint8Array.from(out), i + 1];
    }
  }
  throw new TypeError("not an encoded key (unterminated part)");
}

/**
 * The PostgreSQL store's value encoding: V8's serialization format (what Deno KV stores and
 * node:v8 `deserialize` reads), written in JavaScript for the plain data the records are made
 * of (objects, arrays, strings, numbers, booleans, null, undefined), and by node:v8 `serialize`
 * for anything else.
 *
 * Why not node:v8 `serialize` for everything: in Deno 2.9 every call leaves native memory
 * behind (about 1.5 KiB, never returned; 300,000 calls grow a process by some 450 MiB), and
 * every commit serializes its values. The bytes are the ones node:v8 writes for the same data
 * (tests/postgres_value_codec_test.ts), so rows written before and after read the same.
 * Reading is the same in reverse: the plain subset in JavaScript (node:v8 `deserialize` holds
 * on to tens of MiB under load), anything else by node:v8.
 */

import { deserialize, serialize } from "node:v8";

/** V8's serialization tags and format version (v8/src/objects/value-serializer.cc). */
const VERSION_TAG = 0xff;
const FORMAT_VERSION = 15;
const PADDING = 0x00;
const NULL = 0x30; // '0'
const UNDEFINED = 0x5f; // '_'
const TRUE = 0x54; // 'T'
const FALSE = 0x46; // 'F'
const INT32 = 0x49; // 'I'
const DOUBLE = 0x4e; // 'N'
const ONE_BYTE_STRING = 0x22; // '"'
const TWO_BYTE_STRING = 0x63; // 'c'
const BEGIN_OBJECT = 0x6f; // 'o'
const END_OBJECT = 0x7b; // '{'
const BEGIN_DENSE_ARRAY = 0x41; // 'A'
const END_DENSE_ARRAY = 0x24; // '$'
const UTF8_STRING = 0x53; // 'S'

/** V8 writes integers in this range as Smis ('I'), others as doubles (Deno's V8: 32-bit Smis). */
const SMI_MIN = -(2 ** 31), SMI_MAX = 2 ** 31 - 1;

/** Not plain data: node:v8 serializes the value instead. */
class NotPlain extends Error {}

/** A stored value's bytes. */
export function encodeValue(value: unknown): Uint8Array {
  try {
    const writer = new Writer();
    writer.byte(VERSION_TAG);
    writer.varint(FORMAT_VERSION);
    writer.value(value, new Set());
    return writer.bytes();
  } catch (error) {
    if (error instanceof NotPlain) return serialize(value);
    throw error;
  }
}

class Writer {
  #buffer = new Uint8Array(256);
  #length = 0;
  #view = new DataView(this.#buffer.buffer);

  bytes(): Uint8Array {
    return this.#buffer.slice(0, this.#length);
  }

  #reserve(n: number): void {
    if (this.#length + n <= this.#buffer.length) return;
    const grown = new Uint8Array(Math.max(this.#buffer.length * 2, this.#length + n));
    grown.set(this.#buffer.subarray(0, this.#length));
    this.#buffer = grown;
    this.#view = new DataView(grown.buffer);
  }

  byte(b: number): void {
    this.#reserve(1);
    this.#buffer[this.#length++] = b;
  }

  varint(n: number): void {
    do {
      let b = n % 128;
      n = Math.floor(n / 128);
      if (n > 0) b |= 0x80;
      this.byte(b);
    } while (n > 0);
  }

  value(value: unknown, seen: Set<object>): void {
    if (value === null) return this.byte(NULL);
    switch (typeof value) {
      case "undefined":
        return this.byte(UNDEFINED);
      case "boolean":
        return this.byte(value ? TRUE : FALSE);
      case "number":
        return this.number(value);
      case "string":
        return this.string(value);
      case "object":
        // V8 writes an object met before (anywhere, not only above) as a back-reference.
        if (seen.has(value)) throw new NotPlain();
        seen.add(value);
        if (Array.isArray(value)) this.array(value, seen);
        else this.object(value, seen);
        return;
      default:
        throw new NotPlain();
    }
  }

  number(n: number): void {
    if (Number.isInteger(n) && !Object.is(n, -0) && n >= SMI_MIN && n <= SMI_MAX) {
      this.byte(INT32);
      this.varint(n >= 0 ? n * 2 : -n * 2 - 1); // ZigZag, in doubles: no 32-bit overflow
      return;
    }
    this.byte(DOUBLE);
    this.#reserve(8);
    this.#view.setFloat64(this.#length, n, true);
    this.#length += 8;
  }

  string(s: string): void {
    let oneByte = true;
    for (let i = 0; i < s.length && oneByte; i++) oneByte = s.charCodeAt(i) <= 0xff;
    if (oneByte) {
      this.byte(ONE_BYTE_STRING);
      this.varint(s.length);
      this.#reserve(s.length);
      for (let i = 0; i < s.length; i++) this.#buffer[this.#length++] = s.charCodeAt(i);
      return;
    }
    const byteLength = s.length * 2;
    // V8 aligns the UTF-16 data on an even offset with a padding byte before the tag.
    if ((this.#length + 1 + varintSize(byteLength)) & 1) this.byte(PADDING);
    this.byte(TWO_BYTE_STRING);
    this.varint(byteLength);
    this.#reserve(byteLength);
    for (let i = 0; i < s.length; i++) {
      this.#view.setUint16(this.#length, s.charCodeAt(i), true);
      this.#length += 2;
    }
  }

  array(array: unknown[], seen: Set<object>): void {
    // Holes and extra properties take V8's other array layouts: left to node:v8.
    if (Object.keys(array).length !== array.length) throw new NotPlain();
    this.byte(BEGIN_DENSE_ARRAY);
    this.varint(array.length);
    for (let i = 0; i < array.length; i++) {
      if (!(i in array)) throw new NotPlain();
      this.value(array[i], seen);
    }
    this.byte(END_DENSE_ARRAY);
    this.varint(0);
    this.varint(array.length);
  }

  object(object: object, seen: Set<object>): void {
    const prototype = Object.getPrototypeOf(object);
    if (prototype !== Object.prototype && prototype !== null) throw new NotPlain();
    if (Object.getOwnPropertySymbols(object).length) throw new NotPlain();
    const keys = Object.keys(object);
    this.byte(BEGIN_OBJECT);
    for (const key of keys) {
      // Integer-like keys are written as numbers by V8: left to node:v8.
      const first = key.charCodeAt(0);
      if (first >= 0x30 && first <= 0x39) throw new NotPlain();
      this.string(key);
      // V8 too writes what a getter returns.
      this.value((object as Record<string, unknown>)[key], seen);
    }
    this.byte(END_OBJECT);
    this.varint(keys.length);
  }
}

function varintSize(n: number): number {
  let size = 1;
  while (n >= 128) {
    n = Math.floor(n / 128);
    size++;
  }
  return size;
}

/** A stored value, from its bytes. */
export function decodeValue(bytes: Uint8Array): unknown {
  try {
    const reader = new Reader(bytes);
    const value = reader.document();
    return value;
  } catch (error) {
    if (error instanceof NotPlain) return deserialize(bytes);
    throw error;
  }
}

const utf8 = new TextDecoder();

class Reader {
  #bytes: Uint8Array;
  #view: DataView;
  #at = 0;

  constructor(bytes: Uint8Array) {
    this.#bytes = bytes;
    this.#view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  document(): unknown {
    if (this.#byte() !== VERSION_TAG || this.#varint() !== FORMAT_VERSION) throw new NotPlain();
    const value = this.#value();
    if (this.#at !== this.#bytes.length) throw new NotPlain();
    return value;
  }

  #byte(): number {
    if (this.#at >= this.#bytes.length) throw new NotPlain();
    return this.#bytes[this.#at++];
  }

  #varint(): number {
    let n = 0, scale = 1;
    for (;;) {
      const b = this.#byte();
      n += (b & 0x7f) * scale;
      if (b < 0x80) return n;
      scale *= 128;
      if (scale > 2 ** 56) throw new NotPlain();
    }
  }

  /** The next tag, padding skipped. */
  #tag(): number {
    let tag = this.#byte();
    while (tag === PADDING) tag = this.#byte();
    return tag;
  }

  #peekTag(): number {
    while (this.#bytes[this.#at] === PADDING) this.#at++;
    if (this.#at >= this.#bytes.length) throw new NotPlain();
    return this.#bytes[this.#at];
  }

  #value(): unknown {
    const tag = this.#tag();
    switch (tag) {
      case NULL:
        return null;
      case UNDEFINED:
        return undefined;
      case TRUE:
        return true;
      case FALSE:
        return false;
      case INT32: {
        const z = this.#varint();
        return z % 2 ? -(z + 1) / 2 : z / 2;
      }
      case DOUBLE: {
        if (this.#at + 8 > this.#bytes.length) throw new NotPlain();
        const n = this.#view.getFloat64(this.#at, true);
        this.#at += 8;
        return n;
      }
      case ONE_BYTE_STRING:
      case TWO_BYTE_STRING:
      case UTF8_STRING:
        return this.#string(tag);
      case BEGIN_OBJECT:
        return this.#object();
      case BEGIN_DENSE_ARRAY:
        return this.#array();
      default:
        throw new NotPlain();
    }
  }

  #string(tag: number): string {
    const length = this.#varint();
    const end = this.#at + length;
    if (end > this.#bytes.length) throw new NotPlain();
    const bytes = this.#bytes.subarray(this.#at, end);
    this.#at = end;
    if (tag === UTF8_STRING) return utf8.decode(bytes);
    if (tag === ONE_BYTE_STRING) {
      // ASCII reads the same as UTF-8, which the decoder does natively; Latin-1 does not.
      let ascii = true;
      for (let i = 0; i < bytes.length && ascii; i++) ascii = bytes[i] < 0x80;
      if (ascii) return utf8.decode(bytes);
      let s = "";
      for (let i = 0; i < bytes.length; i += 4096) {
        s += String.fromCharCode(...bytes.subarray(i, i + 4096));
      }
      return s;
    }
    let s = "";
    if (length % 2) throw new NotPlain();
    const units = new Array<number>(length / 2);
    for (let i = 0; i < units.length; i++) units[i] = bytes[2 * i] | (bytes[2 * i + 1] << 8);
    for (let i = 0; i < units.length; i += 4096) {
      s += String.fromCharCode(...units.slice(i, i + 4096));
    }
    return s;
  }

  #object(): Record<string, unknown> {
    const object: Record<string, unknown> = {};
    let count = 0;
    while (this.#peekTag() !== END_OBJECT) {
      const key = this.#value();
      if (typeof key !== "string" && typeof key !== "number") throw new NotPlain();
      const name = String(key), value = this.#value();
      // An own property even when named __proto__, as V8 defines it (not a prototype).
      if (name === "__proto__") {
        Object.defineProperty(object, name, {
          value,
          writable: true,
          enumerable: true,
          configurable: true,
        });
      } else object[name] = value;
      count++;
    }
    this.#at++;
    if (this.#varint() !== count) throw new NotPlain();
    return object;
  }

  #array(): unknown[] {
    const length = this.#varint();
    if (length > this.#bytes.length) throw new NotPlain();
    const array = new Array<unknown>(length);
    for (let i = 0; i < length; i++) array[i] = this.#value();
    // Extra properties (or holes, written as their own tag) are left to node:v8.
    if (this.#tag() !== END_DENSE_ARRAY) throw new NotPlain();
    if (this.#varint() !== 0 || this.#varint() !== length) throw new NotPlain();
    return array;
  }
}

/**
 * `deno task bench-signatures`: the cost of one access-token signature and one verification
 * with each implementation Deno offers, side by side in one process (issue 39 §3): WebCrypto
 * (what jose uses, so what the service used), `node:crypto`, and @noble/curves (pure
 * JavaScript), for ES256 and Ed25519, beside HS256 on WebCrypto. Before measuring, every
 * implementation's signature is verified by every other implementation of its algorithm, and a
 * tampered one refused, so a fast wrong answer cannot win.
 *
 * Prints one line per implementation and operation: microseconds of process CPU per call
 * (user + system, median of BENCH_SIG_ROUNDS rounds of BENCH_SIG_CALLS calls, defaults 5 and
 * 400) and wall-clock microseconds. The machine may be busy: compare lines of the same run.
 */

import { Buffer } from "node:buffer";
import nodeCrypto from "node:crypto";
import process from "node:process";
import { p256 } from "@noble/curves/nist.js";
import { ed25519 } from "@noble/curves/ed25519.js";

type Bytes = Uint8Array<ArrayBuffer>;

/** One way to sign and verify a JWS signing input. */
interface Implementation {
  algorithm: "ES256" | "EdDSA" | "HS256";
  name: string;
  sign(data: Bytes): Promise<Bytes> | Bytes;
  verify(signature: Bytes, data: Bytes): Promise<boolean> | boolean;
}

const ROUNDS = Number(Deno.env.get("BENCH_SIG_ROUNDS") || 5);
const CALLS = Number(Deno.env.get("BENCH_SIG_CALLS") || 400);

function fromBase64Url(text: string): Bytes {
  return new Uint8Array(Buffer.from(text, "base64url"));
}

async function es256Implementations(): Promise<Implementation[]> {
  const ecdsa = { name: "ECDSA", namedCurve: "P-256" };
  const pair = await crypto.subtle.generateKey(ecdsa, true, ["sign", "verify"]);
  const jwk = await crypto.subtle.exportKey("jwk", pair.privateKey);
  const params = { name: "ECDSA", hash: "SHA-256" };
  const nodePrivate = nodeCrypto.createPrivateKey({
    key: jwk as nodeCrypto.JsonWebKey,
    format: "jwk",
  });
  const nodePublic = nodeCrypto.createPublicKey(nodePrivate);
  const secret = fromBase64Url(jwk.d!);
  const point = new Uint8Array([4, ...fromBase64Url(jwk.x!), ...fromBase64Url(jwk.y!)]);
  const nodeOptions = (key: nodeCrypto.KeyObject) => ({ key, dsaEncoding: "ieee-p1363" as const });
  return [
    {
      algorithm: "ES256",
      name: "WebCrypto",
      sign: async (data) => new Uint8Array(await crypto.subtle.sign(params, pair.privateKey, data)),
      verify: (signature, data) => crypto.subtle.verify(params, pair.publicKey, signature, data),
    },
    {
      algorithm: "ES256",
      name: "node:crypto",
      sign: (data) => new Uint8Array(nodeCrypto.sign("sha256", data, nodeOptions(nodePrivate))),
      verify: (signature, data) =>
        nodeCrypto.verify("sha256", data, nodeOptions(nodePublic), signature),
    },
    {
      algorithm: "ES256",
      name: "@noble/curves",
      sign: (data) => p256.sign(data, secret) as Bytes,
      // WebCrypto and node:crypto do not normalize s: high-S signatures are valid JWS.
      verify: (signature, data) => p256.verify(signature, data, point, { lowS: false }),
    },
  ];
}

async function ed25519Implementations(): Promise<Implementation[]> {
  const pair = await crypto.subtle.generateKey({ name: "Ed25519" }, true, [
    "sign",
    "verify",
  ]) as CryptoKeyPair;
  const jwk = await crypto.subtle.exportKey("jwk", pair.privateKey);
  const nodePrivate = nodeCrypto.createPrivateKey({
    key: jwk as nodeCrypto.JsonWebKey,
    format: "jwk",
  });
  const nodePublic = nodeCrypto.createPublicKey(nodePrivate);
  const secret = fromBase64Url(jwk.d!), publicKey = fromBase64Url(jwk.x!);
  return [
    {
      algorithm: "EdDSA",
      name: "WebCrypto",
      sign: async (data) =>
        new Uint8Array(await crypto.subtle.sign("Ed25519", pair.privateKey, data)),
      verify: (signature, data) => crypto.subtle.verify("Ed25519", pair.publicKey, signature, data),
    },
    {
      algorithm: "EdDSA",
      name: "node:crypto",
      sign: (data) => new Uint8Array(nodeCrypto.sign(null, data, nodePrivate)),
      verify: (signature, data) => nodeCrypto.verify(null, data, nodePublic, signature),
    },
    {
      algorithm: "EdDSA",
      name: "@noble/curves",
      sign: (data) => ed25519.sign(data, secret) as Bytes,
      verify: (signature, data) => ed25519.verify(signature, data, publicKey),
    },
  ];
}

async function hs256Implementation(): Promise<Implementation> {
  const key = await crypto.subtle.generateKey({ name: "HMAC", hash: "SHA-256" }, false, [
    "sign",
    "verify",
  ]);
  return {
    algorithm: "HS256",
    name: "WebCrypto",
    sign: async (data) => new Uint8Array(await crypto.subtle.sign("HMAC", key, data)),
    verify: (signature, data) => crypto.subtle.verify("HMAC", key, signature, data),
  };
}

/** Throws unless each signature of `group` verifies with every member and a tampered one fails. */
async function crossCheck(group: Implementation[], data: Bytes): Promise<void> {
  for (const signer of group) {
    const signature = await signer.sign(data);
    const tampered = signature.slice();
    tampered[5] ^= 1;
    for (const verifier of group) {
      if (!await verifier.verify(signature, data)) {
        throw new Error(
          `${verifier.name} refuses a ${signer.algorithm} signature of ${signer.name}`,
        );
      }
      if (await verifier.verify(tampered, data)) {
        throw new Error(`${verifier.name} accepts a tampered signature of ${signer.name}`);
      }
    }
  }
}

/** Median CPU and wall microseconds per call of `call` over the rounds. */
async function time(call: () => unknown): Promise<{ cpuUs: number; wallUs: number }> {
  for (let i = 0; i < CALLS / 4; i++) await call();
  const cpu: number[] = [], wall: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    const c0 = process.cpuUsage(), w0 = performance.now();
    for (let i = 0; i < CALLS; i++) await call();
    const c = process.cpuUsage(c0);
    cpu.push((c.user + c.system) / CALLS);
    wall.push((performance.now() - w0) * 1000 / CALLS);
  }
  return { cpuUs: median(cpu), wallUs: median(wall) };
}

function median(values: number[]): number {
  const sorted = values.toSorted((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

async function main(): Promise<void> {
  // A JWS signing input of the size of the service's access tokens.
  const data = new TextEncoder().encode("e".repeat(40) + "." + "p".repeat(300));
  const groups = [await es256Implementations(), await ed25519Implementations(), [
    await hs256Implementation(),
  ]];
  for (const group of groups) await crossCheck(group, data);
  print(`deno ${Deno.version.deno}; µs per call, median of ${ROUNDS} rounds of ${CALLS} calls`);
  print("algorithm implementation    sign cpu (wall)   verify cpu (wall)");
  for (const implementation of groups.flat()) {
    const signature = await implementation.sign(data);
    const sign = await time(() => implementation.sign(data));
    const verify = await time(() => implementation.verify(signature, data));
    print(
      `${implementation.algorithm.padEnd(9)} ${implementation.name.padEnd(15)} ` +
        `${fmt(sign)}   ${fmt(verify)}`,
    );
  }
}

function fmt(t: { cpuUs: number; wallUs: number }): string {
  return `${t.cpuUs.toFixed(0).padStart(6)} (${t.wallUs.toFixed(0).padStart(5)})`;
}

function print(line: string): void {
  // deno-lint-ignore no-console -- a command-line tool prints its table
  console.log(line);
}

if (import.meta.main) await main();

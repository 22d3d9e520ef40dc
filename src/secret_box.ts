/**
 * Authenticated encryption of secrets at rest (upstream tokens, device codes) with AES-256-GCM.
 * Keys come from ENCRYPTION_KEY, or from JWT_SECRET through HKDF; a previous secret
 * (ENCRYPTION_KEY_PREVIOUS, JWT_SECRET_PREVIOUS) stays readable so rotating one does not log
 * everyone out.
 */

import { randomToken, sha256Base64Url } from "./crypto.ts";

/** Seals and opens strings. */
export interface SecretBox {
  seal(plaintext: string): Promise<string>;
  /** Throws when the value was not sealed by one of our keys or was altered. */
  open(sealed: string): Promise<string>;
  /** Whether `sealed` is under the key that seals now (else it should be sealed again). */
  isCurrent(sealed: string): Promise<boolean>;
  /** Whether `sealed` names a key we hold (cheap: decides nothing about its integrity). */
  canOpen(sealed: string): Promise<boolean>;
}

const FORMAT = "v1";
const IV_BYTES = 12;
const HKDF_SALT = new TextEncoder().encode("gitlab-mcp-auth secrets at rest");
const HKDF_INFO = new TextEncoder().encode("aes-256-gcm v1");

interface Key {
  id: string;
  key: CryptoKey;
}

/** A box over `secrets`: the first seals, every one opens. Keys are derived on first use. */
export function createSecretBox(secrets: readonly string[]): SecretBox {
  if (secrets.length === 0) throw new Error("createSecretBox needs at least one secret");
  let derived: Promise<Key[]> | undefined;
  const keys = () => derived ??= Promise.all(secrets.map(deriveKey));
  return {
    async seal(plaintext) {
      const current = (await keys())[0];
      const iv = crypto.getRandomValues(new Uint8Array(IV_BYTES));
      const ciphertext = await crypto.subtle.encrypt(
        { name: "AES-GCM", iv },
        current.key,
        new TextEncoder().encode(plaintext),
      );
      return [FORMAT, current.id, b64(iv), b64(new Uint8Array(ciphertext))].join(".");
    },
    async open(sealed) {
      const [format, id, iv, ciphertext] = sealed.split(".");
      const key = (await keys()).find((k) => k.id === id)?.key;
      if (format !== FORMAT || !key || !iv || !ciphertext) {
        throw new Error("sealed value has an unknown format or key");
      }
      const plaintext = await crypto.subtle.decrypt(
        { name: "AES-GCM", iv: fromB64(iv) },
        key,
        fromB64(ciphertext),
      );
      return new TextDecoder().decode(plaintext);
    },
    async isCurrent(sealed) {
      return keyIdOf(sealed) === (await keys())[0].id;
    },
    async canOpen(sealed) {
      const id = keyIdOf(sealed);
      return (await keys()).some((key) => key.id === id);
    },
  };
}

/** The settings that key the box: ENCRYPTION_KEY, else the JWT secrets. */
export interface SealingSettings {
  encryptionKey?: string;
  encryptionKeyPrevious?: string;
  jwtSecret?: string;
  jwtSecretPrevious?: string;
}

/**
 * The secrets upstream tokens are sealed with, the sealing one first: ENCRYPTION_KEY when set,
 * else JWT_SECRET (with JWT_SECRET_PREVIOUS, which still opens); ENCRYPTION_KEY_PREVIOUS opens
 * beside either, so a key is rotated, or set where one was derived from JWT_SECRET, without
 * ending sessions. Empty without ENCRYPTION_KEY or JWT_SECRET.
 */
export function sealingSecrets(
  settings: SealingSettings,
): string[] {
  const { encryptionKey, encryptionKeyPrevious, jwtSecret, jwtSecretPrevious } = settings;
  const previous = encryptionKeyPrevious ? [encryptionKeyPrevious] : [];
  if (encryptionKey) return [encryptionKey, ...previous];
  if (!jwtSecret) return [];
  return [jwtSecret, ...(jwtSecretPrevious ? [jwtSecretPrevious] : []), ...previous];
}

/** The box the service uses; without OAuth settings nothing secret is stored: a throwaway key. */
export function createSecretBoxFromConfig(config: SealingSettings): SecretBox {
  const secrets = sealingSecrets(config);
  return createSecretBox(secrets.length > 0 ? secrets : [randomToken(32)]);
}

async function deriveKey(secret: string): Promise<Key> {
  const material = await crypto.subtle.importKey(
    "raw",
    new TextEncoder().encode(secret),
    "HKDF",
    false,
    ["deriveKey"],
  );
  const key = await crypto.subtle.deriveKey(
    { name: "HKDF", hash: "SHA-256", salt: HKDF_SALT, info: HKDF_INFO },
    material,
    { name: "AES-GCM", length: 256 },
    false,
    ["encrypt", "decrypt"],
  );
  // A short public fingerprint to pick the key when opening; not derived from the AES key.
  const id = (sha256Base64Url(`key-id:${secret}`)).slice(0, 8);
  return { id, key };
}

function keyIdOf(sealed: string): string | undefined {
  return sealed.split(".")[1];
}

function b64(bytes: Uint8Array): string {
  return bytes.toBase64({ alphabet: "base64url", omitPadding: true });
}

function fromB64(text: string): Uint8Array<ArrayBuffer> {
  return Uint8Array.fromBase64(text, { alphabet: "base64url" }) as Uint8Array<ArrayBuffer>;
}

/**
 * User codes (RFC 8628 §6.1): 8 letters from an alphabet without vowels (no words) and without
 * look-alikes, shown as `XXXX-XXXX`; typed in any case, with or without the dash.
 */

/** The user code alphabet: 20 consonants, so 20^8 ≈ 2^34.6 codes. */
export const USER_CODE_ALPHABET = "BCDFGHJKLMNPQRSTVWXZ";
const USER_CODE_LENGTH = 8;

/** A new user code, `XXXX-XXXX`, each letter uniformly random (rejection sampling). */
export function newUserCode(): string {
  const letters: string[] = [];
  const limit = 256 - (256 % USER_CODE_ALPHABET.length);
  while (letters.length < USER_CODE_LENGTH) {
    for (const byte of crypto.getRandomValues(new Uint8Array(16))) {
      if (byte < limit && letters.length < USER_CODE_LENGTH) {
        letters.push(USER_CODE_ALPHABET[byte % USER_CODE_ALPHABET.length]);
      }
    }
  }
  return shown(letters.join(""));
}

/**
 * The canonical form of what a user typed (`XXXX-XXXX`), or undefined when it cannot be a user
 * code: case, spaces and dashes do not matter (RFC 8628 §6.1).
 */
export function normalizeUserCode(typed: string): string | undefined {
  if (typed.length > 40) return undefined;
  const letters = typed.toUpperCase().replace(/[\s-]/g, "");
  if (letters.length !== USER_CODE_LENGTH) return undefined;
  if (![...letters].every((letter) => USER_CODE_ALPHABET.includes(letter))) return undefined;
  return shown(letters);
}

/**
 * Whether `id`, as a form or a link names an authorization (`device`, `code`), can be a user
 * code's hash (SHA-256 in base64url): anything else names none, and is never looked up.
 */
export function isUserCodeHash(id: string): boolean {
  return /^[A-Za-z0-9_-]{43}$/.test(id);
}

function shown(letters: string): string {
  return `${letters.slice(0, 4)}-${letters.slice(4)}`;
}

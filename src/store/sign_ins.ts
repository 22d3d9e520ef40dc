/**
 * Redirect sign-in records (GITLAB_SIGN_IN=redirect): an authorization request waiting on our
 * consent page, keyed by the page's id, then the same request waiting on the upstream's
 * callback, keyed by the `state` sent upstream. Each step is single use: it is taken with an
 * atomic delete guarded by the versionstamp read. The upstream PKCE verifier is sealed at rest.
 */

import type { SecretBox } from "../secret_box.ts";
import type { StoreIo, Versioned } from "./io.ts";
import { signInKey } from "./keys.ts";
import { type FlowCompletion, withCompletion } from "./flows.ts";
import type { SignInRecord } from "./records.ts";

/** The redirect sign-in operations of the store. */
export interface SignInStore {
  /** Stores a new sign-in under `id`; throws on the (astronomically unlikely) collision. */
  createSignIn(id: string, signIn: SignInRecord): Promise<void>;
  /** The sign-in, even past its `expiresAt` (the caller decides), or null. */
  getSignIn(id: string): Promise<Versioned<SignInRecord> | null>;
  /**
   * Takes the sign-in (deletes it if unchanged since read) and, when `next` is given, stores the
   * next step under `nextId` in the same commit; false when someone else took it first.
   */
  takeSignIn(
    signIn: Versioned<SignInRecord>,
    next?: { id: string; signIn: SignInRecord },
  ): Promise<boolean>;
  /** Stores the code and session of a completed redirect sign-in, all or nothing. */
  completeSignIn(completion: FlowCompletion): Promise<boolean>;
}

/** A sign-in as stored: the upstream PKCE verifier sealed. */
type StoredSignIn = Omit<SignInRecord, "upstreamVerifier"> & { sealedVerifier?: string };

/** Sign-in records over the shared KV access and the box that seals secrets at rest. */
export function createSignInStore(io: StoreIo, secrets: SecretBox): SignInStore {
  async function seal(signIn: SignInRecord): Promise<StoredSignIn> {
    const { upstreamVerifier, ...rest } = signIn;
    return upstreamVerifier === undefined
      ? rest
      : { ...rest, sealedVerifier: await secrets.seal(upstreamVerifier) };
  }

  /** A record sealed under a key we no longer hold reads as absent. */
  async function open(stored: Versioned<StoredSignIn>): Promise<Versioned<SignInRecord> | null> {
    const { sealedVerifier, ...rest } = stored.value;
    if (sealedVerifier === undefined) return { ...stored, value: rest };
    try {
      return {
        ...stored,
        value: { ...rest, upstreamVerifier: await secrets.open(sealedVerifier) },
      };
    } catch {
      return null;
    }
  }

  return {
    async createSignIn(id, signIn) {
      const key = signInKey(id);
      const op = io.atomic()
        .check({ key, versionstamp: null })
        .set(key, await seal(signIn), { expireIn: io.ttlUntil(signIn.expiresAt) });
      if (!await io.commit(op)) throw new Error("sign-in id collision");
    },

    async getSignIn(id) {
      const stored = await io.read<StoredSignIn>(signInKey(id));
      return stored && await open(stored);
    },

    async takeSignIn(signIn, next) {
      const op = io.atomic().check(signIn).delete(signIn.key);
      if (next) {
        const key = signInKey(next.id);
        op.check({ key, versionstamp: null })
          .set(key, await seal(next.signIn), { expireIn: io.ttlUntil(next.signIn.expiresAt) });
      }
      return await io.commit(op);
    },

    completeSignIn(completion) {
      return io.commit(withCompletion(io, io.atomic(), completion));
    },
  };
}

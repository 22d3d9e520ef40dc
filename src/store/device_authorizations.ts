/**
 * Device authorizations (RFC 8628): one record per device code, keyed by its hash, and a second
 * key by the user code's hash for the page that finds it. Every transition (a poll, the
 * approval, the denial, the single redemption) is one commit checked against what was read.
 */

import { unredeemedSignIn } from "./flows.ts";
import type { StoreIo, Versioned } from "./io.ts";
import {
  deviceCodeHash,
  deviceKeyOfHash,
  deviceUserKey,
  sessionKey,
  unredeemedKey,
  userCodeHash,
} from "./keys.ts";
import type { DeviceAuthorizationRecord, SessionRecord } from "./records.ts";
import type { SessionRecords } from "./sessions.ts";
import { UNREDEEMED_KEEP_MS } from "./unredeemed.ts";

/**
 * How long a device code's records outlive its `expiresAt` (past it, the page finds no code),
 * so that the client's polls are told `expired_token` (RFC 8628 §3.5) rather than
 * `invalid_grant` for an unknown code: a backend that never returns an expired entry
 * (PostgreSQL) would have them gone at once. Ten minutes: longer than any interval a client
 * polls at.
 */
const EXPIRED_RECORD_KEEP_MS = 10 * 60_000;

/** What the user-code key holds. */
interface UserCodeEntry {
  deviceHash: string;
}

/** The device authorization operations of the store. */
export interface DeviceAuthorizationStore {
  /**
   * Stores a new authorization under its device code and user code (canonical form); false
   * when that user code is taken (the caller draws another).
   */
  createDeviceAuthorization(
    deviceCode: string,
    userCode: string,
    record: Omit<DeviceAuthorizationRecord, "userCodeHash">,
  ): Promise<boolean>;
  /** The authorization of a device code, even past its `expiresAt`, or null. */
  getDeviceAuthorization(deviceCode: string): Promise<Versioned<DeviceAuthorizationRecord> | null>;
  /** The live authorization of a user code (canonical form), or null. */
  getDeviceAuthorizationByUserCode(
    userCode: string,
  ): Promise<Versioned<DeviceAuthorizationRecord> | null>;
  /** The live authorization whose user code has the hash `userCodeHash`, or null. */
  getDeviceAuthorizationOfUserCodeHash(
    userCodeHash: string,
  ): Promise<Versioned<DeviceAuthorizationRecord> | null>;
  /** Replaces the record if unchanged since read; the new version, or null. */
  updateDeviceAuthorization(
    device: Versioned<DeviceAuthorizationRecord>,
    value: DeviceAuthorizationRecord,
  ): Promise<Versioned<DeviceAuthorizationRecord> | null>;
  /**
   * Marks the authorization `status` (`signed_in`, awaiting the user's word, or `approved`)
   * with the new session of its sign-in, stored with it (as an unredeemed sign-in, so one never
   * redeemed is swept like an unused code).
   */
  approveDeviceAuthorization(
    device: Versioned<DeviceAuthorizationRecord>,
    session: SessionRecord,
    status?: "signed_in" | "approved",
  ): Promise<boolean>;
  /**
   * The user's Deny after signing in: marks the authorization `denied` and deletes the session
   * its sign-in stored (never redeemed) with its unredeemed marker, in one commit; false when
   * either changed since read.
   */
  denySignedInDeviceAuthorization(
    device: Versioned<DeviceAuthorizationRecord>,
    session: Versioned<SessionRecord>,
  ): Promise<boolean>;
  /** Deletes the authorization and its user-code key, if unchanged since read. */
  deleteDeviceAuthorization(device: Versioned<DeviceAuthorizationRecord>): Promise<boolean>;
  /**
   * Consumes the approved authorization and stores its session with the first refresh token,
   * all or nothing; false when either changed since read (someone else redeemed it).
   */
  redeemDeviceAuthorization(
    device: Versioned<DeviceAuthorizationRecord>,
    session: Versioned<SessionRecord>,
    updated: SessionRecord,
  ): Promise<boolean>;
}

/** Device authorization records over the shared KV access and the session records. */
export function createDeviceAuthorizationStore(
  io: StoreIo,
  sessions: SessionRecords,
): DeviceAuthorizationStore {
  function recordTtl(record: { expiresAt: number }): number {
    return io.ttlUntil(record.expiresAt + EXPIRED_RECORD_KEEP_MS);
  }

  function live(
    found: Versioned<DeviceAuthorizationRecord> | null,
  ): Versioned<DeviceAuthorizationRecord> | null {
    return found && io.clock.now() <= found.value.expiresAt ? found : null;
  }

  async function ofUserCodeHash(
    hash: string,
  ): Promise<Versioned<DeviceAuthorizationRecord> | null> {
    const entry = await io.read<UserCodeEntry>(deviceUserKey(hash));
    if (!entry) return null;
    return live(await io.read<DeviceAuthorizationRecord>(deviceKeyOfHash(entry.value.deviceHash)));
  }

  function withoutRecord(
    device: Versioned<DeviceAuthorizationRecord>,
  ) {
    return io.atomic().check(device).delete(device.key)
      .delete(deviceUserKey(device.value.userCodeHash));
  }

  return {
    createDeviceAuthorization(deviceCode, userCode, record) {
      const hash = userCodeHash(userCode);
      const deviceHash = deviceCodeHash(deviceCode);
      const value: DeviceAuthorizationRecord = { ...record, userCodeHash: hash };
      // The user code stays taken as long as the record (whose deletion deletes its key).
      const expireIn = recordTtl(record);
      const userKey = deviceUserKey(hash);
      const entry: UserCodeEntry = { deviceHash };
      return io.commit(
        io.atomic()
          .check({ key: userKey, versionstamp: null })
          .check({ key: deviceKeyOfHash(deviceHash), versionstamp: null })
          .set(deviceKeyOfHash(deviceHash), value, { expireIn })
          .set(userKey, entry, { expireIn }),
      );
    },

    getDeviceAuthorization(deviceCode) {
      return io.read<DeviceAuthorizationRecord>(deviceKeyOfHash(deviceCodeHash(deviceCode)));
    },

    getDeviceAuthorizationByUserCode(userCode) {
      return ofUserCodeHash(userCodeHash(userCode));
    },

    getDeviceAuthorizationOfUserCodeHash: ofUserCodeHash,

    async updateDeviceAuthorization(device, value) {
      const op = io.atomic().check(device)
        .set(device.key, value, { expireIn: recordTtl(value) });
      if (!await io.commit(op)) return null;
      return await io.read<DeviceAuthorizationRecord>(device.key);
    },

    approveDeviceAuthorization(device, session, status = "approved") {
      const approved: DeviceAuthorizationRecord = {
        ...device.value,
        status,
        sessionId: session.id,
      };
      const at = sessionKey(session.id);
      return io.commit(
        io.atomic().check(device).check({ key: at, versionstamp: null })
          .set(device.key, approved, { expireIn: recordTtl(device.value) })
          .set(at, session, { expireIn: io.ttlUntil(session.expiresAt) })
          .set(unredeemedKey(session.expiresAt, session.id), unredeemedSignIn(session), {
            expireIn: io.ttlUntil(session.expiresAt + UNREDEEMED_KEEP_MS),
          }),
      );
    },

    denySignedInDeviceAuthorization(device, session) {
      const denied: DeviceAuthorizationRecord = { ...device.value, status: "denied" };
      return io.commit(
        io.atomic().check(device).check(session)
          .set(device.key, denied, { expireIn: recordTtl(device.value) })
          .delete(session.key)
          .delete(unredeemedKey(session.value.expiresAt, session.value.id)),
      );
    },

    deleteDeviceAuthorization(device) {
      return io.commit(withoutRecord(device));
    },

    async redeemDeviceAuthorization(device, session, updated) {
      const op = withoutRecord(device).check(session)
        .delete(unredeemedKey(session.value.expiresAt, session.value.id));
      await sessions.writeRotated(op, session, updated);
      return await io.commit(op);
    },
  };
}

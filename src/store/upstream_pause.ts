/**
 * The one service-wide pause of upstream polling: after the upstream's HTTP 429 (or
 * `RateLimit-Remaining: 0`) no instance polls it again before the pause ends.
 */

import type { StoreIo } from "./io.ts";
import { upstreamPauseKey } from "./keys.ts";

/** The upstream-pause operations of the store. */
export interface UpstreamPauseStore {
  /** Epoch ms until which nobody polls the upstream; 0 when no pause is on. */
  upstreamPausedUntil(): Promise<number>;
  /** Pauses upstream polling until `untilMs`, unless a pause that ends later is already on. */
  pauseUpstream(untilMs: number): Promise<void>;
}

interface PauseRecord {
  /** Epoch ms. */
  expiresAt: number;
}

const PAUSE_WRITE_ATTEMPTS = 5;

/** The upstream pause over the shared KV access. */
export function createUpstreamPauseStore(io: StoreIo): UpstreamPauseStore {
  const key = upstreamPauseKey();
  return {
    async upstreamPausedUntil() {
      const pause = await io.read<PauseRecord>(key);
      return pause && io.isLive(pause.value) ? pause.value.expiresAt : 0;
    },

    async pauseUpstream(untilMs) {
      // A lost race means another instance paused at the same moment: read again and keep
      // whichever pause ends later.
      for (let attempt = 0; attempt < PAUSE_WRITE_ATTEMPTS; attempt++) {
        const current = await io.read<PauseRecord>(key);
        if (current && io.isLive(current.value) && current.value.expiresAt >= untilMs) return;
        const op = io.atomic()
          .check({ key, versionstamp: current?.versionstamp ?? null })
          .set(key, { expiresAt: untilMs }, { expireIn: io.ttlUntil(untilMs) });
        if (await io.commit(op)) return;
      }
    },
  };
}

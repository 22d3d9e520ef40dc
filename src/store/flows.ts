/**
 * Device-flow records: the flow between `/authorize` and its completion, keyed by the hash of
 * the flow state. The device code and any upstream tokens are sealed at rest.
 */

import type { SecretBox } from "../secret_box.ts";
import type { AtomicWrite } from "./group_commit.ts";
import type { StoreIo, Versioned } from "./io.ts";
import {
  codeKey,
  flowKey,
  recordPrefix,
  repeatKey,
  sessionKey,
  strandedTokensKey,
  unredeemedKey,
} from "./keys.ts";
import type {
  CodeRecord,
  FlowRecord,
  SessionRecord,
  StrandedTokens,
  UnredeemedSignIn,
  UpstreamTokenSet,
} from "./records.ts";
import { UNREDEEMED_KEEP_MS } from "./unredeemed.ts";

/** What a completed sign-in writes in one commit. */
export interface FlowCompletion {
  code: string;
  codeRecord: CodeRecord;
  session: SessionRecord;
}

/** The device flows pending now, in all and of one client prefix. */
export interface PendingFlows {
  all: number;
  ofPrefix: number;
  /** Epoch ms when the first of all pending flows expires (Infinity: none pending). */
  firstEndsAt: number;
  /** The same among the prefix's flows. */
  firstOfPrefixEndsAt: number;
}

/** The device-flow operations of the store. */
export interface FlowStore {
  /**
   * Counts the live flows, and those `clientPrefix` started (one pass over the flow records:
   * their number is what MAX_PENDING_FLOWS bounds).
   */
  countPendingFlows(clientPrefix: string): Promise<PendingFlows>;
  createFlow(flowState: string, flow: FlowRecord): Promise<void>;
  /** The flow, even past its `expiresAt` (the caller answers "expired" then), or null. */
  getFlow(flowState: string): Promise<Versioned<FlowRecord> | null>;
  /** Deletes the flow if unchanged since read; false when someone else changed it first. */
  deleteFlow(flow: Versioned<FlowRecord>): Promise<boolean>;
  /**
   * Keeps upstream tokens in the flow, and a sealed copy that a sweep revokes if the flow expires
   * before it completes; null when the flow changed since read.
   */
  saveFlowUpstreamTokens(
    flow: Versioned<FlowRecord>,
    tokens: UpstreamTokenSet,
  ): Promise<Versioned<FlowRecord> | null>;
  /**
   * Records when the upstream may next be polled for this flow (`nextPollAt`) and the interval
   * (grown after `slow_down`); null when the flow changed since read.
   */
  deferFlowPolling(
    flow: Versioned<FlowRecord>,
    intervalSeconds: number,
    nextPollAt: number,
  ): Promise<Versioned<FlowRecord> | null>;
  /**
   * Stores code and session (and the unredeemed sign-in that revokes them if the code expires
   * unused) and deletes the flow, all or nothing; false if the flow changed.
   */
  completeFlow(flow: Versioned<FlowRecord>, completion: FlowCompletion): Promise<boolean>;
}

/** A flow as stored: the device code and upstream tokens sealed (secrets at rest). */
type StoredFlow = Omit<FlowRecord, "deviceCode" | "upstreamTokens"> & { sealed: string };
type SealedFlowPart = Pick<FlowRecord, "deviceCode" | "upstreamTokens">;

/** Flow records over the shared KV access and the box that seals secrets at rest. */
export function createFlowStore(io: StoreIo, secrets: SecretBox): FlowStore {
  async function sealFlow(flow: FlowRecord): Promise<StoredFlow> {
    const { deviceCode, upstreamTokens, ...rest } = flow;
    return { ...rest, sealed: await secrets.seal(JSON.stringify({ deviceCode, upstreamTokens })) };
  }

  /** A flow sealed under a key we no longer hold reads as absent. */
  async function openFlow(stored: Versioned<StoredFlow>): Promise<Versioned<FlowRecord> | null> {
    const { sealed, ...rest } = stored.value;
    let opened: SealedFlowPart;
    try {
      opened = JSON.parse(await secrets.open(sealed));
    } catch {
      return null;
    }
    const value: FlowRecord = { ...rest, deviceCode: opened.deviceCode };
    if (opened.upstreamTokens) value.upstreamTokens = opened.upstreamTokens;
    return { ...stored, value };
  }

  async function rewriteFlow(
    flow: Versioned<FlowRecord>,
    value: FlowRecord,
  ): Promise<Versioned<FlowRecord> | null> {
    const stored = await sealFlow(value);
    const result = await io.atomic().check(flow)
      .set(flow.key, stored, { expireIn: io.ttlUntil(value.expiresAt) })
      .commit();
    return result.ok ? { key: flow.key, value, versionstamp: result.versionstamp } : null;
  }

  return {
    async createFlow(flowState, flow) {
      const key = flowKey(flowState);
      const op = io.atomic()
        .check({ key, versionstamp: null })
        .set(key, await sealFlow(flow), { expireIn: io.ttlUntil(flow.expiresAt) });
      if (!await io.commit(op)) throw new Error("flow state collision");
    },

    async countPendingFlows(clientPrefix) {
      const pending = { all: 0, ofPrefix: 0, firstEndsAt: Infinity, firstOfPrefixEndsAt: Infinity };
      for await (const { value } of io.list<StoredFlow>(recordPrefix("flow"))) {
        if (!io.isLive(value)) continue;
        pending.all++;
        pending.firstEndsAt = Math.min(pending.firstEndsAt, value.expiresAt);
        if (value.clientPrefix !== clientPrefix) continue;
        pending.ofPrefix++;
        pending.firstOfPrefixEndsAt = Math.min(pending.firstOfPrefixEndsAt, value.expiresAt);
      }
      return pending;
    },

    async getFlow(flowState) {
      const stored = await io.read<StoredFlow>(flowKey(flowState));
      return stored && await openFlow(stored);
    },

    deleteFlow(flow) {
      return io.commit(endFlow(io.atomic().check(flow), flow));
    },

    async saveFlowUpstreamTokens(flow, tokens) {
      const value = { ...flow.value, upstreamTokens: tokens };
      const stored = await sealFlow(value);
      const { accessToken, refreshToken } = tokens;
      const stranded: StrandedTokens = {
        sealedUpstreamTokens: await secrets.seal(JSON.stringify({ accessToken, refreshToken })),
      };
      const result = await io.atomic().check(flow)
        .set(flow.key, stored, { expireIn: io.ttlUntil(value.expiresAt) })
        .set(strandedTokensKey(value.expiresAt, flowId(flow)), stranded, {
          expireIn: io.ttlUntil(value.expiresAt + UNREDEEMED_KEEP_MS),
        })
        .commit();
      return result.ok ? { key: flow.key, value, versionstamp: result.versionstamp } : null;
    },

    deferFlowPolling(flow, intervalSeconds, nextPollAt) {
      return rewriteFlow(flow, { ...flow.value, intervalSeconds, nextPollAt });
    },

    completeFlow(flow, completion) {
      return io.commit(
        withCompletion(
          io,
          endFlow(io.atomic().check(flow), flow),
          completion,
        ),
      );
    },
  };
}

/**
 * `op` that deletes the flow, the record of the request that started it (see repeats.ts) and the
 * copy of any token it held: a flow that ends has handed its token on or given it up.
 */
function endFlow(op: AtomicWrite, flow: Versioned<FlowRecord>): AtomicWrite {
  op.delete(flow.key);
  if (flow.value.upstreamTokens) op.delete(strandedTokensKey(flow.value.expiresAt, flowId(flow)));
  return flow.value.requestHash === undefined ? op : op.delete(repeatKey(flow.value.requestHash));
}

/** The flow key's hash, which names the flow's stranded token. */
function flowId(flow: Versioned<FlowRecord>): string {
  return String(flow.key[flow.key.length - 1]);
}

/**
 * `op` that also stores a completed sign-in's new code and new session, and the unredeemed
 * sign-in that revokes them if the code expires unused.
 */
export function withCompletion(
  io: StoreIo,
  op: AtomicWrite,
  { code, codeRecord, session }: FlowCompletion,
): AtomicWrite {
  const codeAt = codeKey(code);
  const sessionAt = sessionKey(session.id);
  return op
    .check({ key: codeAt, versionstamp: null })
    .check({ key: sessionAt, versionstamp: null })
    .set(codeAt, codeRecord, { expireIn: io.ttlUntil(codeRecord.expiresAt) })
    .set(sessionAt, session, { expireIn: io.ttlUntil(session.expiresAt) })
    .set(unredeemedKey(codeRecord.expiresAt, session.id), unredeemedSignIn(session), {
      expireIn: io.ttlUntil(codeRecord.expiresAt + UNREDEEMED_KEEP_MS),
    });
}

/** What an unredeemed sign-in keeps of its session. */
export function unredeemedSignIn(session: SessionRecord): UnredeemedSignIn {
  return { sessionId: session.id, sealedUpstreamTokens: session.sealedUpstreamTokens };
}

/**
 * A configuration file reloaded when its content changes on disk (issue 33 §2.3), not only on
 * SIGHUP: a Kubernetes ConfigMap changes the file in place by swapping a symlink, and a signal to
 * the wrong process (npx, `deno task`) never reaches the service. The file is read again every
 * few seconds (asynchronously: a slow volume holds no request up) and compared by content, so a
 * symlink swap, a rename over it and an edit in place all count, and a touch that changes
 * nothing does not. A changed content (a file gone, too) is applied only once a second read,
 * a moment later, finds it unchanged: a file caught while it is written (an editor truncating
 * and writing it, a copy in chunks) is often a valid YAML file cut short, one that leaves out a
 * rule's `tools` or a server's `allowed_gitlab_groups`, and must not be in force even briefly.
 * MCP_POLICY_FILE, MCP_SERVERS_FILE and MACHINE_ACCESS_FILE follow their files this way (Deno
 * Deploy has no file system events to wait for instead).
 */

import {
  readConfigurationFile,
  readConfigurationFileAsync,
  requireTextWithin,
} from "./bounded_read.ts";

/** How often a file is read: a change is in force within this time and FILE_SETTLE_MS. */
export const FILE_CHECK_MS = 5_000;
/** How long after a change is first read it is read again, and applied if it held still. */
export const FILE_SETTLE_MS = 1_000;

/**
 * Reads in a row that each find another content (about ten seconds, the documented time) after
 * which the watch says the file is not applied: one rewritten more often than it is read (a
 * generated header with the time, an autosave while typing) never holds still.
 */
export const UNSETTLED_READS = 10;

/** What a read finds where the file was (removed, or not readable). */
const GONE = Symbol("gone");

/**
 * One read of a file and of the files it names: what two reads are compared by (GONE when the
 * file itself could not be read), and each file's text or why it could not be read, so that a
 * reload parses exactly what held still rather than reading the files a third time, when a
 * write may have landed since.
 */
interface Snapshot {
  key: string | typeof GONE;
  files: Map<string, { text: string } | { error: unknown }>;
}

/** Reads a file as a watch found it, at most `limit` bytes (a reader's own bound) if given. */
export type SettledRead = (path: string, limit?: number) => string;

/** A file that can be read again: its path (undefined: none configured), and the reload. */
export interface ReloadableFile<R> {
  path(): string | undefined;
  /**
   * Reads the file again and applies it, or keeps what is in force; says which. `readText`,
   * when given, answers for the files as the watch read them (and reads any other).
   */
  reload(readText?: SettledRead): R;
}

/**
 * A running watch: `check` reads the file once now, without blocking the event loop, and reloads
 * it if it changed (the timer calls it too; a check still reading is not started again);
 * `reload` reloads it whatever it holds (SIGHUP), and the next check compares with that.
 */
export interface FileWatch<R> {
  check(): Promise<void>;
  reload(): R;
  stop(): void;
}

/** How a watch reads: its timers, and the reads (tests put theirs in). */
export interface WatchOptions {
  everyMs?: number;
  settleMs?: number;
  readText?: (path: string) => Promise<string>;
  /** The files the watched one names (as in force): a change to one reloads it too. */
  namedFiles?: () => readonly string[];
  /** Called once when UNSETTLED_READS reads in a row each found another content. */
  onUnsettled?: () => void;
}

/**
 * Watches `file`; each changed content is reloaded once, after it held still for a second read,
 * and its outcome reported (a broken or removed file is reported once, not at every check, and
 * what is in force stays). Without a timer (`everyMs` undefined) only `check` reads the file,
 * and a change is applied at the second check that finds it.
 */
export function watchFile<R>(
  file: ReloadableFile<R>,
  onReload: (reload: R) => void,
  options: WatchOptions = {},
): FileWatch<R> {
  const path = file.path();
  const readText = options.readText ?? readConfigurationFileAsync;
  const read = async (): Promise<Snapshot | undefined> => {
    if (path === undefined) return undefined;
    const paths = [path, ...options.namedFiles?.() ?? []];
    const found = await Promise.all(paths.map((named) => readOne(readText, named)));
    const files = new Map(paths.map((named, index) => [named, found[index]]));
    // Missing mid-swap, or removed: only a second read that still finds nothing says which.
    if ("error" in found[0]) return { key: GONE, files };
    const key = found.map((seen) => "text" in seen ? seen.text : "").join("\0");
    return { key, files };
  };
  /** The content in force: read at the start, or by the last reload. */
  let seen = read();
  /** A changed content read once, waiting for the second read that applies it. */
  let pending: Snapshot | undefined;
  /** Reads in a row, up to the last, that each found a content other than the one before. */
  let unsettledReads = 0;
  let checking: Promise<void> | undefined;
  let settling: ReturnType<typeof setTimeout> | undefined;
  const compare = async () => {
    const inForce = seen;
    const now = await read();
    // A reload while this read ran applied the file as it is now: the next check compares.
    if (now === undefined || seen !== inForce) return;
    if (now.key === (await inForce)?.key) {
      pending = undefined;
      unsettledReads = 0;
      return;
    }
    if (now.key !== pending?.key) {
      pending = now;
      if (++unsettledReads === UNSETTLED_READS) options.onUnsettled?.();
      settleLater();
      return;
    }
    pending = undefined;
    unsettledReads = 0;
    seen = Promise.resolve(now);
    onReload(file.reload(settledReader(now)));
  };
  const check = () => checking ??= compare().finally(() => checking = undefined);
  const timer = path !== undefined && options.everyMs !== undefined
    ? setInterval(check, options.everyMs)
    : undefined;
  if (timer !== undefined) Deno.unrefTimer(timer);
  /** With a timer, the second read comes after FILE_SETTLE_MS rather than a whole interval. */
  const settleLater = () => {
    if (timer === undefined || settling !== undefined) return;
    const timeout = setTimeout(() => {
      settling = undefined;
      check();
    }, options.settleMs ?? FILE_SETTLE_MS);
    Deno.unrefTimer(timeout);
    settling = timeout;
  };
  return {
    check,
    reload() {
      pending = undefined;
      unsettledReads = 0;
      seen = read();
      return file.reload();
    },
    stop: () => {
      clearInterval(timer);
      clearTimeout(settling);
    },
  };
}

/** One file's text, or why it could not be read. */
async function readOne(
  readText: (path: string) => Promise<string>,
  path: string,
): Promise<{ text: string } | { error: unknown }> {
  try {
    return { text: await readText(path) };
  } catch (error) {
    return { error };
  }
}

/**
 * Reads the files of `snapshot` as it found them, within the reader's `limit` (a token file's is
 * smaller than the watch's), and any other from disk.
 */
function settledReader(snapshot: Snapshot): SettledRead {
  return (path, limit) => {
    const seen = snapshot.files.get(path);
    if (seen === undefined) return readConfigurationFile(path, limit);
    if ("error" in seen) throw seen.error;
    if (limit !== undefined) requireTextWithin(seen.text, limit);
    return seen.text;
  };
}

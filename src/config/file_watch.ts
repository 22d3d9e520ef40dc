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

import { readConfigurationFileAsync } from "./bounded_read.ts";

/** How often a file is read: a change is in force within this time and FILE_SETTLE_MS. */
export const FILE_CHECK_MS = 5_000;
/** How long after a change is first read it is read again, and applied if it held still. */
export const FILE_SETTLE_MS = 1_000;

/** What a read finds where the file was (removed, or not readable). */
const GONE = Symbol("gone");
type Seen = string | typeof GONE;

/** A file that can be read again: its path (undefined: none configured), and the reload. */
export interface ReloadableFile<R> {
  path(): string | undefined;
  /** Reads the file again and applies it, or keeps what is in force; says which. */
  reload(): R;
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

/**
 * Watches `file`; each changed content is reloaded once, after it held still for a second read,
 * and its outcome reported (a broken or removed file is reported once, not at every check, and
 * what is in force stays). Without a timer (`everyMs` undefined) only `check` reads the file,
 * and a change is applied at the second check that finds it.
 */
export function watchFile<R>(
  file: ReloadableFile<R>,
  onReload: (reload: R) => void,
  options: { everyMs?: number; settleMs?: number; readText?: (path: string) => Promise<string> } =
    {},
): FileWatch<R> {
  const path = file.path();
  const readText = options.readText ?? readConfigurationFileAsync;
  const read = async (): Promise<Seen | undefined> => {
    if (path === undefined) return undefined;
    try {
      return await readText(path);
    } catch {
      // Missing mid-swap, or removed: only a second read that still finds nothing says which.
      return GONE;
    }
  };
  /** The content in force: read at the start, or by the last reload. */
  let seen = read();
  /** A changed content read once, waiting for the second read that applies it. */
  let pending: Seen | undefined;
  let checking: Promise<void> | undefined;
  let settling: ReturnType<typeof setTimeout> | undefined;
  const compare = async () => {
    const inForce = seen;
    const text = await read();
    // A reload while this read ran applied the file as it is now: the next check compares.
    if (text === undefined || seen !== inForce) return;
    if (text === await inForce) {
      pending = undefined;
      return;
    }
    if (text !== pending) {
      pending = text;
      settleLater();
      return;
    }
    pending = undefined;
    seen = Promise.resolve(text);
    onReload(file.reload());
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
      seen = read();
      return file.reload();
    },
    stop: () => {
      clearInterval(timer);
      clearTimeout(settling);
    },
  };
}

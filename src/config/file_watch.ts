/**
 * A configuration file reloaded when its content changes on disk (issue 33 §2.3), not only on
 * SIGHUP: a Kubernetes ConfigMap changes the file in place by swapping a symlink, and a signal to
 * the wrong process (npx, `deno task`) never reaches the service. The file is read again every
 * few seconds (asynchronously: a slow volume holds no request up) and compared by content, so a
 * symlink swap, a rename over it and an edit in place all count, and a touch that changes
 * nothing does not. MCP_POLICY_FILE, MCP_SERVERS_FILE and MACHINE_ACCESS_FILE follow their
 * files this way (Deno Deploy has no file system events to wait for instead).
 */

/** How often a file is read: a change is in force within this time (and a little more). */
export const FILE_CHECK_MS = 5_000;

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
 * Watches `file`; each changed content is reloaded once and its outcome reported (a broken file
 * is reported once, not at every check, and what is in force stays). Without a timer (`everyMs`
 * undefined) only `check` reads the file.
 */
export function watchFile<R>(
  file: ReloadableFile<R>,
  onReload: (reload: R) => void,
  options: { everyMs?: number; readText?: (path: string) => Promise<string> } = {},
): FileWatch<R> {
  const path = file.path();
  const readText = options.readText ?? Deno.readTextFile;
  const read = async () => {
    if (path === undefined) return undefined;
    try {
      return await readText(path);
    } catch {
      // A file that is briefly missing (mid-swap) is read again at the next check.
      return undefined;
    }
  };
  /** The content in force: read at the start, or by the last reload. */
  let seen = read();
  let checking: Promise<void> | undefined;
  const compare = async () => {
    const inForce = seen;
    const text = await read();
    // A reload while this read ran applied the file as it is now: the next check compares.
    if (text === undefined || seen !== inForce || text === await inForce) return;
    seen = Promise.resolve(text);
    onReload(file.reload());
  };
  const check = () => checking ??= compare().finally(() => checking = undefined);
  const timer = path !== undefined && options.everyMs !== undefined
    ? setInterval(check, options.everyMs)
    : undefined;
  if (timer !== undefined) Deno.unrefTimer(timer);
  return {
    check,
    reload() {
      const before = seen;
      seen = read().then((text) => text ?? before);
      return file.reload();
    },
    stop: () => clearInterval(timer),
  };
}

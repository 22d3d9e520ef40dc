/**
 * A configuration file reloaded when its content changes on disk (issue 33 §2.3), not only on
 * SIGHUP: a Kubernetes ConfigMap changes the file in place by swapping a symlink, and a signal to
 * the wrong process (npx, `deno task`) never reaches the service. The file is read again every
 * few seconds and compared by content, so a symlink swap, a rename over it and an edit in place
 * all count, and a touch that changes nothing does not. MCP_POLICY_FILE and MCP_SERVERS_FILE
 * both follow their files this way.
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
 * A running watch: `check` reads the file once now and reloads it if it changed (the timer calls
 * it too); `reload` reloads it whatever it holds (SIGHUP), and the next check compares with that.
 */
export interface FileWatch<R> {
  check(): void;
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
  options: { everyMs?: number; readText?: (path: string) => string } = {},
): FileWatch<R> {
  const path = file.path();
  const readText = options.readText ?? Deno.readTextFileSync;
  const read = () => {
    if (path === undefined) return undefined;
    try {
      return readText(path);
    } catch {
      // A file that is briefly missing (mid-swap) is read again at the next check.
      return undefined;
    }
  };
  let seen = read();
  const check = () => {
    const text = read();
    if (text === undefined || text === seen) return;
    seen = text;
    onReload(file.reload());
  };
  const timer = path !== undefined && options.everyMs !== undefined
    ? setInterval(check, options.everyMs)
    : undefined;
  if (timer !== undefined) Deno.unrefTimer(timer);
  return {
    check,
    reload() {
      seen = read() ?? seen;
      return file.reload();
    },
    stop: () => clearInterval(timer),
  };
}

/**
 * MCP_POLICY_FILE reloaded when its content changes on disk (issue 33 §2.3), not only on SIGHUP:
 * a Kubernetes ConfigMap changes the file in place by swapping a symlink, and a signal to the
 * wrong process (npx, `deno task`) never reaches the service. The file is read again every few
 * seconds and compared by content, so a symlink swap, a rename over it and an edit in place all
 * count, and a touch that changes nothing does not.
 */

import type { CallPolicyHolder, Reload } from "./call_policy_file.ts";

/** How often the file is read: a change is in force within this time (and a little more). */
export const POLICY_FILE_CHECK_MS = 5_000;

/** A running watch: `check` reads the file once now (the timer calls it too). */
export interface PolicyFileWatch {
  check(): void;
  stop(): void;
}

/**
 * Watches the holder's file; each changed content is reloaded once and its outcome reported
 * (a broken file is reported once, not at every check, and the policy in force stays).
 * Without a timer (`everyMs` undefined) only `check` reads the file.
 */
export function watchPolicyFile(
  holder: CallPolicyHolder,
  onReload: (reload: Reload) => void,
  options: { everyMs?: number; readText?: (path: string) => string } = {},
): PolicyFileWatch {
  const path = holder.path();
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
    onReload(holder.reload());
  };
  const timer = path !== undefined && options.everyMs !== undefined
    ? setInterval(check, options.everyMs)
    : undefined;
  if (timer !== undefined) Deno.unrefTimer(timer);
  return { check, stop: () => clearInterval(timer) };
}

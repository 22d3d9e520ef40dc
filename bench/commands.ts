/** Running external commands for the bench, and the environment its child processes get. */

/** What a finished command printed, and its exit code. */
export interface CommandOutput {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `cmd` to completion, capturing its output as text. */
export async function runCommand(
  cmd: string,
  args: string[],
  opts: Deno.CommandOptions = {},
): Promise<CommandOutput> {
  const out = await new Deno.Command(cmd, { args, stdout: "piped", stderr: "piped", ...opts })
    .output();
  const text = (b: Uint8Array) => new TextDecoder().decode(b);
  return { code: out.code, stdout: text(out.stdout), stderr: text(out.stderr) };
}

/** Whether the shell finds `command`. */
export async function hasCommand(command: string): Promise<boolean> {
  return (await runCommand("sh", ["-c", `command -v ${command}`])).code === 0;
}

/** The environment children get: only what finding deno and its cache needs, plus `extra`. */
export function childEnv(extra: Record<string, string>): Record<string, string> {
  const keep = ["PATH", "HOME", "DENO_DIR", "XDG_CACHE_HOME", "TMPDIR", "NO_COLOR"];
  const base: Record<string, string> = {};
  for (const k of keep) {
    const v = Deno.env.get(k);
    if (v !== undefined) base[k] = v;
  }
  return { ...base, ...extra };
}

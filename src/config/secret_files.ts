/**
 * Secrets from files (issue 38 §2): every secret variable `NAME` may come from a file named by
 * `NAME_FILE` instead (a mounted Kubernetes or Docker secret), holding what the variable would,
 * one trailing newline removed. Setting both, a file that cannot be read and an empty one stop
 * start-up with one line naming `NAME_FILE` and the path, never the content.
 */

import { readSecretFile } from "./bounded_read.ts";
import { unreadableReason } from "./unreadable.ts";
import { ConfigError, type ConfigVariable, type Env } from "./variable.ts";

/** The same variable, marked as a secret: it may come from `NAME_FILE`, and is never shown. */
export function secret<T>(variable: ConfigVariable<T>): ConfigVariable<T> {
  return { ...variable, secret: true };
}

/** The `NAME_FILE` forms of the secret variables among `variables`, for the table and docs. */
export function secretFileForms(
  variables: readonly ConfigVariable<unknown>[],
): ConfigVariable<undefined>[] {
  return variables.filter((variable) => variable.secret).map(({ name }) => ({
    name: fileVariable(name),
    defaultValue: undefined,
    shownDefault: "none",
    meaning: `a file holding \`${name}\` (one trailing newline removed); not with \`${name}\``,
    // Read into `name` by withSecretFiles before the table is read.
    read: () => undefined,
  }));
}

/**
 * `env` with each secret's `NAME_FILE` read into `NAME`. Throws ConfigError naming `NAME_FILE`
 * when `NAME` is set too, or the file cannot be read or is empty.
 */
export function withSecretFiles(
  env: Env,
  variables: readonly ConfigVariable<unknown>[],
  readText: (path: string) => string = readSecretFile,
): Env {
  const resolved: Env = { ...env };
  for (const { name } of variables.filter((variable) => variable.secret)) {
    const fileName = fileVariable(name);
    const path = env[fileName]?.trim();
    if (!path) continue;
    if (env[name]?.trim()) {
      throw new ConfigError(fileName, `is set and so is ${name}: set only one of them`);
    }
    let text: string;
    try {
      text = readText(path);
    } catch (error) {
      throw new ConfigError(fileName, `cannot read ${path} (${unreadableReason(error)})`);
    }
    const value = text.replace(/\r?\n$/, "");
    if (value.trim() === "") throw new ConfigError(fileName, `${path} is empty`);
    resolved[name] = value;
  }
  return resolved;
}

function fileVariable(name: string): string {
  return `${name}_FILE`;
}

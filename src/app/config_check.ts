/**
 * `admin config check` (issue 38 §5): the environment and files start-up reads, checked without
 * stopping at the first problem, and the effective configuration as `NAME=value` lines with
 * every secret shown as `****`. It connects to nothing; the CLI opens the store on `--connect`.
 */

import {
  type Config,
  CONFIG_VARIABLES,
  CROSS_CHECKS,
  listConfigVariables,
  missingOAuthSettings,
  withProfileDefaults,
} from "./config.ts";
import { withSecretFiles } from "../config/secret_files.ts";
import { ConfigError, type Env, readTable, variablesOf } from "../config/variable.ts";

/** What a check found: the effective lines, every problem, and the configuration when it reads. */
export interface ConfigCheck {
  lines: string[];
  problems: string[];
  config?: Config;
}

/** What a secret is shown as. */
export const MASK = "****";

/** Checks `given` as start-up would, gathering every problem instead of stopping at one. */
export function checkConfiguration(given: Env): ConfigCheck {
  const problems: string[] = [];
  const attempt = <T>(step: () => T): T | undefined => {
    try {
      return step();
    } catch (error) {
      if (!(error instanceof ConfigError)) throw error;
      problems.push(error.message);
      return undefined;
    }
  };
  const variables = variablesOf(CONFIG_VARIABLES);
  let env: Env = { ...given };
  for (const secret of variables.filter((variable) => variable.secret)) {
    env = attempt(() => withSecretFiles(env, [secret])) ?? env;
  }
  const profile = attempt(() => CONFIG_VARIABLES.securityProfile.read(env));
  const filled = profile === undefined ? env : withProfileDefaults(profile, env);
  for (const variable of variables) attempt(() => variable.read(filled));
  let config: Config | undefined;
  if (problems.length === 0) {
    const read = readTable(CONFIG_VARIABLES, filled);
    for (const check of CROSS_CHECKS) attempt(() => check(read));
    for (const name of missingOAuthSettings(read)) problems.push(`${name}: is required`);
    config = read;
  }
  return { lines: effectiveLines(filled), problems, config: problems.length ? undefined : config };
}

/** Every variable as `NAME=value`: what is set, else its default, a secret (or key) as `****`. */
function effectiveLines(env: Env): string[] {
  return listConfigVariables().map((variable) => {
    const value = env[variable.name]?.trim() || variable.defaultValue || "";
    const masked = (variable.secret || variable.hidden) && value !== "";
    return `${variable.name}=${masked ? MASK : value}`;
  });
}

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
import { configuredProvider } from "./deps.ts";
import { withSecretFiles } from "../config/secret_files.ts";
import { startupWarnings } from "./weak_settings.ts";
import { ConfigError, type Env, readTable, variablesOf } from "../config/variable.ts";
import { withoutUserinfo } from "../config/parsers.ts";
import { nearNameWarnings } from "../config/near_names.ts";

/**
 * What a check found: the effective lines, every problem, the warnings start-up would log (who
 * can sign in, weak settings), and the configuration when it reads.
 */
export interface ConfigCheck {
  lines: string[];
  problems: string[];
  warnings: string[];
  config?: Config;
}

/** What a secret is shown as. */
export const MASK = "****";

/**
 * Checks `given` as start-up would, gathering every problem instead of stopping at one. A
 * variable found wrong counts as unset for the rules between variables, and is not reported
 * again by them (nor as missing).
 */
export function checkConfiguration(given: Env): ConfigCheck {
  const problems: string[] = [];
  const failed = new Set<string>();
  const attempt = <T>(step: () => T): T | undefined => {
    try {
      return step();
    } catch (error) {
      if (!(error instanceof ConfigError)) throw error;
      const name = error.variable;
      if (failed.has(name) || failed.has(`${name}_FILE`)) return undefined;
      failed.add(name);
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
  const usable: Env = { ...filled };
  for (const name of failed) delete usable[name];
  const config = attempt(() => readTable(CONFIG_VARIABLES, usable));
  if (config) {
    for (const check of CROSS_CHECKS) attempt(() => check(config));
    // Start-up refuses a provider src/upstream/ does not know where it builds the app.
    attempt(() => configuredProvider(config));
    for (const name of missingOAuthSettings(config)) {
      attempt(() => {
        throw new ConfigError(name, "is required");
      });
    }
  }
  return {
    lines: effectiveLines(filled).map(withoutUserinfo),
    problems: problems.map(withoutUserinfo),
    warnings: [...ignoredVariables(given), ...(config ? startupWarnings(config) : [])].map(
      withoutUserinfo,
    ),
    config: problems.length === 0 ? config : undefined,
  };
}

/** Warnings for the variables of `env` that are ignored though their names say they were meant. */
export function ignoredVariables(env: Env): string[] {
  return nearNameWarnings(env, listConfigVariables().map(({ name }) => name));
}

/** Every variable as `NAME=value`: what is set, else its default, a secret (or key) as `****`. */
function effectiveLines(env: Env): string[] {
  return listConfigVariables().map((variable) => {
    const value = env[variable.name]?.trim() || variable.defaultValue || "";
    const masked = (variable.secret || variable.hidden) && value !== "";
    return `${variable.name}=${masked ? MASK : value}`;
  });
}

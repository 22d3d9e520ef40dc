/**
 * The configuration table's machinery: one environment variable (its name, default, meaning
 * and parser), tables of them (nested groups), and reading a table from an environment map.
 */

/**
 * A configuration value is present but wrong; start-up stops with this one-line message (a line
 * break or other control character a value brought in, a file's path say, is written escaped).
 */
export class ConfigError extends Error {
  constructor(readonly variable: string, problem: string) {
    super(`${variable}: ${problem.replace(CONTROL_CHARACTERS, escaped)}`);
    this.name = "ConfigError";
  }
}

// deno-lint-ignore no-control-regex -- control characters are what it looks for
const CONTROL_CHARACTERS = /[\x00-\x1f\x7f]/g;

/** A control character as JSON writes it (`\n`, `\u0000`). */
function escaped(character: string): string {
  return JSON.stringify(character).slice(1, -1);
}

/** The environment as given to loadConfig: a variable may be absent. */
export type Env = Record<string, string | undefined>;

/** Turns a variable's text into its value, or throws a ConfigError naming the variable. */
export type Parser<T> = (name: string, raw: string) => T;

/** One environment variable: its name, default, meaning, and how it is read. */
export interface ConfigVariable<T> {
  readonly name: string;
  /** The text used when the variable is unset or blank; undefined: none. */
  readonly defaultValue: string | undefined;
  /** The default exactly as docs/configuration.md's table shows it. */
  readonly shownDefault: string;
  /** One line, as in docs/configuration.md's table. */
  readonly meaning: string;
  /** A secret: it may come from `NAME_FILE` (secret_files.ts) and is never shown. */
  readonly secret?: boolean;
  /** Never shown, though not read from `NAME_FILE` (a secret with a file variable of its own). */
  readonly hidden?: boolean;
  /** The value in `env`, the default when unset or blank. Throws ConfigError. */
  read(env: Env): T;
}

/** Config fields, each an environment variable or a group of them (a nested object). */
export type ConfigTable = { readonly [field: string]: ConfigVariable<unknown> | ConfigTable };

export type ValueOf<Entry> = Entry extends ConfigVariable<infer T> ? T
  : Entry extends ConfigTable ? ValuesOf<Entry>
  : never;

/** What a table reads to: a field may be left out exactly when its value may be undefined. */
export type ValuesOf<Table extends ConfigTable> = Flatten<
  & { -readonly [K in keyof Table as RequiredKey<Table, K>]: ValueOf<Table[K]> }
  & { -readonly [K in keyof Table as OptionalKey<Table, K>]?: ValueOf<Table[K]> }
>;

export type OptionalKey<Table, K extends keyof Table> = undefined extends ValueOf<Table[K]> ? K
  : never;

export type RequiredKey<Table, K extends keyof Table> = undefined extends ValueOf<Table[K]> ? never
  : K;

export type Flatten<T> = { [K in keyof T]: T[K] };

/** A variable with a default: never undefined. */
export function variable<T>(
  name: string,
  defaultValue: string,
  parse: Parser<T>,
  meaning: string,
  shownDefault?: string,
): ConfigVariable<T>;
/** A variable without a default: undefined when unset or blank. */
export function variable<T>(
  name: string,
  defaultValue: undefined,
  parse: Parser<T>,
  meaning: string,
  shownDefault?: string,
): ConfigVariable<T | undefined>;
export function variable<T>(
  name: string,
  defaultValue: string | undefined,
  parse: Parser<T>,
  meaning: string,
  shownDefault = defaultValue === undefined ? "none" : `\`${defaultValue}\``,
): ConfigVariable<T | undefined> {
  return {
    name,
    defaultValue,
    shownDefault,
    meaning,
    read(env) {
      const raw = env[name]?.trim() || defaultValue;
      return raw === undefined ? undefined : parse(name, raw);
    },
  };
}

export function variablesOf(table: ConfigTable): ConfigVariable<unknown>[] {
  return Object.values(table).flatMap((entry) => isVariable(entry) ? [entry] : variablesOf(entry));
}

export function readTable<Table extends ConfigTable>(table: Table, env: Env): ValuesOf<Table> {
  const fields = Object.entries(table).map(([field, entry]) => [field, readEntry(entry, env)]);
  // Object.fromEntries cannot carry per-field types; each field is read by its own entry.
  return Object.fromEntries(fields) as ValuesOf<Table>;
}

export function readEntry(entry: ConfigVariable<unknown> | ConfigTable, env: Env): unknown {
  return isVariable(entry) ? entry.read(env) : readTable(entry, env);
}

export function isVariable(
  entry: ConfigVariable<unknown> | ConfigTable,
): entry is ConfigVariable<unknown> {
  return typeof entry.read === "function";
}

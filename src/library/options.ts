/** Reading `createResourceGuard`'s options with the service's own configuration parsers. */

import { ConfigError, type Parser } from "../config/variable.ts";

/**
 * An option read by the parser its environment variable has, so the library and the service
 * accept the same values; the library's callers get a TypeError naming the option.
 */
export function option<T>(parse: Parser<T>, name: string, raw: string): T {
  try {
    return parse(name, raw);
  } catch (error) {
    if (error instanceof ConfigError) throw new TypeError(error.message, { cause: error });
    throw error;
  }
}

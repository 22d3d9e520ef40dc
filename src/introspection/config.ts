/**
 * Who may call `/introspect` (INTROSPECTION_TOKENS).
 */

import { secret } from "../config/secret_files.ts";
import { type ConfigTable, type ValuesOf, variable } from "../config/variable.ts";
import { parseIntrospectionTokens } from "./callers.ts";

export const INTROSPECTION_VARIABLES = {
  /** Bearer credentials of the resource servers that may call /introspect; undefined: 404. */
  introspectionTokens: secret(variable(
    "INTROSPECTION_TOKENS",
    undefined,
    parseIntrospectionTokens,
    "comma list of secrets (≥ 32 bytes each) that may call `/introspect` (else it is 404)",
  )),
} satisfies ConfigTable;

/** What INTROSPECTION_VARIABLES reads to. */
export type IntrospectionConfig = ValuesOf<typeof INTROSPECTION_VARIABLES>;

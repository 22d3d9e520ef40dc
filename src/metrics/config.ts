/**
 * Who may read `/metrics` (METRICS_TOKEN).
 */

import { MIN_SECRET_BYTES, parseSecret } from "../config/parsers.ts";
import { secret } from "../config/secret_files.ts";
import { type ConfigTable, type ValuesOf, variable } from "../config/variable.ts";

export const METRICS_VARIABLES = {
  /** The bearer token of `GET /metrics`; undefined: no such endpoint (404). */
  metricsToken: secret(variable(
    "METRICS_TOKEN",
    undefined,
    parseSecret,
    `bearer token (≥ ${MIN_SECRET_BYTES} bytes) for \`GET /metrics\` ([metrics](#operations)); unset: 404`,
  )),
} satisfies ConfigTable;

/** What METRICS_VARIABLES reads to. */
export type MetricsConfig = ValuesOf<typeof METRICS_VARIABLES>;

/** What the access tests (who may sign in) share. */

import type { LogFields, Logger } from "../src/logger.ts";

/** A logger that keeps its warnings. */
export function recordingLogger(): Logger & { warnings: { message: string; fields: LogFields }[] } {
  const warnings: { message: string; fields: LogFields }[] = [];
  return {
    warnings,
    info() {},
    warn(message, fields = {}) {
      warnings.push({ message, fields });
    },
    error() {},
  };
}

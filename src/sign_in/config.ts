/**
 * The device sign-in's shares of GitLab: the poll budget, and the caps on pending flows.
 */

import { decimalAbove, integerBetween } from "../config/parsers.ts";
import { type ConfigTable, type ValuesOf, variable } from "../config/variable.ts";

export const SIGN_IN_VARIABLES = {
  /**
   * GitLab device-token polls per second, all instances together, shared fairly among client
   * prefixes (sign_in/poll_budget.ts). GitLab.com allows some 500 unauthenticated requests a
   * minute per IP address: 5/s is 300 of them, leaving room for flow starts.
   */
  gitlabPollBudget: variable(
    "GITLAB_POLL_BUDGET",
    "5",
    decimalAbove(0, 10_000),
    "GitLab polls per second, all instances together ([how](#poll-economy-device-mode))",
  ),
  /** Device flows pending at once, all clients together; a new one past it answers 429. */
  maxPendingFlows: variable(
    "MAX_PENDING_FLOWS",
    "1000",
    integerBetween(1, 100_000),
    "pending device sign-ins at once, in all ([abuse limits](#abuse-limits))",
  ),
  /** The same per client prefix (IPv4 /24, IPv6 /56). */
  maxPendingFlowsPerPrefix: variable(
    "MAX_PENDING_FLOWS_PER_PREFIX",
    "50",
    integerBetween(1, 100_000),
    "the same per client IPv4 /24 or IPv6 /56",
  ),
} satisfies ConfigTable;

/** What SIGN_IN_VARIABLES reads to. */
export type SignInConfig = ValuesOf<typeof SIGN_IN_VARIABLES>;

/**
 * What a signed-in account may call through the gateway (MCP_POLICY_FILE): ordered rules naming
 * tools, resources (URIs) or prompts by `*` patterns, each admitting (`allow`) or refusing
 * (`deny`) the users and groups it names. Parsing refuses anything it does not understand, so a
 * typo never widens access; deciding reads only what the session learnt at sign-in.
 *
 * @see docs/gateway.md "What they may call"
 */

import { type AllowedGroup, parseAllowedGroups, parseAllowedUsers } from "./policy.ts";
import { meetsRole, namesAccount, type ProviderRoles, type SessionAccess } from "./policy.ts";
import { unknownRole } from "./policy.ts";
import { GITLAB_PROVIDER_ROLES } from "../upstream/gitlab.ts";
import { isNormalUri, missedInNormalForm, normalUriPattern } from "./resource_uri.ts";

/** What a rule names, and the MCP methods that act on it. */
export type Target = "tools" | "resources" | "prompts";

/** Whether a rule admits or refuses the accounts it names. */
export type Effect = "allow" | "deny";

/**
 * Accounts a rule names: usernames (lower case) and `id:<n>` (as ALLOWED_GITLAB_USERS), and
 * groups with an optional minimum role.
 */
export interface Accounts {
  users: string[];
  groups: AllowedGroup[];
}

/** One rule, as parsed. */
export interface CallRule {
  target: Target;
  /** The patterns as written, for messages. */
  patterns: string[];
  matchers: RegExp[];
  effect: Effect;
  accounts: Accounts;
}

/** A parsed policy. */
export interface CallPolicy {
  defaultEffect: Effect;
  rules: CallRule[];
}

/** The account a message comes from, as the session knows it. */
export interface Caller {
  username: string;
  /** The provider's user id, as text: what an `id:<n>` entry names. */
  userId: string;
  /** What the session learnt of its groups at sign-in (and each re-check); absent: nothing. */
  access?: SessionAccess;
  /**
   * The groups of ALLOWED_GITLAB_GROUPS: asked at every sign-in, so a record that does not say
   * which groups were asked (`groupsAsked`) asked these.
   */
  listedGroups: string[];
}

/** A decision: the effect, and the index (from 0) of the rule that decided, if one did. */
export interface CallDecision {
  effect: Effect;
  rule?: number;
  /**
   * Refused before any rule is asked, because what the call names cannot be decided (a
   * resource URI not in normal form, a missing name): why, for the JSON-RPC error.
   */
  invalid?: string;
}

/** Thrown with the problem of a policy that cannot be used. */
export class PolicyError extends Error {
  override name = "PolicyError";
}

const TARGETS: readonly Target[] = ["tools", "resources", "prompts"];
const EFFECTS: readonly Effect[] = ["allow", "deny"];

/** The method that acts on one named thing, and what it names. */
const CALL_TARGETS: Readonly<Record<string, Target>> = {
  "tools/call": "tools",
  "resources/read": "resources",
  // A subscription tells its subscriber when the resource changes: decided as reading it.
  "resources/subscribe": "resources",
  "prompts/get": "prompts",
};

/** The target a method calls by name (tools/call, resources/read, prompts/get), if any. */
export function targetOfCall(method: string | undefined): Target | undefined {
  return method !== undefined && Object.hasOwn(CALL_TARGETS, method)
    ? CALL_TARGETS[method]
    : undefined;
}

/**
 * Parses a policy file's text. Throws PolicyError naming the problem. A group's role is kept by
 * name: `unknownRoleIn` checks it against the provider's roles.
 */
export function parseCallPolicy(text: string): CallPolicy {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    throw new PolicyError(`not JSON (${error instanceof Error ? error.message : error})`);
  }
  const root = objectOf(parsed, "the file");
  onlyKeys(root, ["default", "rules"], "the file");
  const defaultEffect = root.default ?? "allow";
  if (!EFFECTS.includes(defaultEffect as Effect)) {
    throw new PolicyError(
      `"default" must be "allow" or "deny", not ${JSON.stringify(root.default)}`,
    );
  }
  const rules = root.rules ?? [];
  if (!Array.isArray(rules)) throw new PolicyError(`"rules" must be an array`);
  return { defaultEffect: defaultEffect as Effect, rules: rules.map(parseRule) };
}

function parseRule(raw: unknown, index: number): CallRule {
  const where = `rule ${index}`;
  const rule = objectOf(raw, where);
  onlyKeys(rule, [...TARGETS, ...EFFECTS], where);
  const targets = TARGETS.filter((target) => target in rule);
  if (targets.length !== 1) {
    throw new PolicyError(`${where} must name exactly one of "tools", "resources", "prompts"`);
  }
  const effects = EFFECTS.filter((effect) => effect in rule);
  if (effects.length !== 1) throw new PolicyError(`${where} must have either "allow" or "deny"`);
  const [target] = targets;
  const [effect] = effects;
  const written = rule[target];
  if (!Array.isArray(written) || written.length === 0) {
    throw new PolicyError(`${where}: "${target}" must be a non-empty array of patterns`);
  }
  const patterns = written.map((pattern) => checkedPattern(pattern, where));
  return {
    target,
    patterns,
    matchers: patterns.map((pattern) =>
      target === "resources" ? resourceMatcher(pattern, where) : patternMatcher(pattern)
    ),
    effect,
    accounts: parseAccounts(rule[effect], `${where} "${effect}"`),
  };
}

function parseAccounts(raw: unknown, where: string): Accounts {
  const accounts = objectOf(raw, where);
  onlyKeys(accounts, ["users", "groups"], where);
  const users = stringList(accounts.users ?? [], `${where} "users"`);
  const groups = stringList(accounts.groups ?? [], `${where} "groups"`);
  if (users.length === 0 && groups.length === 0) {
    throw new PolicyError(`${where} names no users and no groups`);
  }
  try {
    return {
      users: users.flatMap((user) => parseAllowedUsers(`${where} "users"`, user)),
      groups: groups.flatMap((group) => parseAllowedGroups(`${where} "groups"`, group)),
    };
  } catch (error) {
    throw new PolicyError(error instanceof Error ? error.message : String(error));
  }
}

/** A pattern's characters: printable, no spaces; `*` is the only wildcard. */
const PATTERN = /^[\x21-\x7e\u00a0-\uffff]+$/u;

function checkedPattern(pattern: unknown, where: string): string {
  if (typeof pattern !== "string" || !PATTERN.test(pattern) || pattern.length > 500) {
    throw new PolicyError(
      `${where}: invalid pattern ${JSON.stringify(pattern)} (a name or URI with * wildcards, ` +
        `no spaces or control characters)`,
    );
  }
  return pattern;
}

/**
 * The matcher of a resource pattern in normal form, which is what requests are matched in
 * (resource_uri.ts). A pattern that does not parse as a URL cannot match anything a request may
 * name, and one whose normal form misses URIs it names as written would narrow a `deny` rule
 * (`https://internal.example*` gains a `/` after its `*`): both are refused.
 */
function resourceMatcher(pattern: string, where: string): RegExp {
  const normal = normalUriPattern(pattern);
  if (normal === undefined) {
    throw new PolicyError(
      `${where}: resource pattern ${JSON.stringify(pattern)} is not a URI (with * wildcards), ` +
        `or * alone`,
    );
  }
  const matcher = patternMatcher(normal);
  const missed = missedInNormalForm(pattern, matcher);
  if (missed !== undefined) {
    throw new PolicyError(
      `${where}: resource pattern ${JSON.stringify(pattern)} reads as ${JSON.stringify(normal)} ` +
        `in normal form, which misses ${JSON.stringify(missed)}: write the scheme and the / ` +
        `after the host out, and keep each * inside one part of the URI`,
    );
  }
  return matcher;
}

/** The whole-name matcher of a pattern: `*` stands for any run of characters, `/` included. */
function patternMatcher(pattern: string): RegExp {
  const source = pattern.split("*").map((part) => part.replace(/[.+?^${}()|[\]\\]/g, "\\$&"))
    .join(".*");
  return new RegExp(`^${source}$`, "su");
}

function objectOf(value: unknown, where: string): Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new PolicyError(`${where} must be a JSON object`);
  }
  return value as Record<string, unknown>;
}

function onlyKeys(value: Record<string, unknown>, known: string[], where: string): void {
  const unknown = Object.keys(value).find((key) => !known.includes(key));
  if (unknown !== undefined) {
    throw new PolicyError(
      `${where} has an unknown key ${JSON.stringify(unknown)} (known: ${known.join(", ")})`,
    );
  }
}

function stringList(value: unknown, where: string): string[] {
  if (!Array.isArray(value) || !value.every((entry) => typeof entry === "string")) {
    throw new PolicyError(`${where} must be an array of strings`);
  }
  return value;
}

/** The group full paths a policy names: their memberships are learnt at sign-in. */
export function policyGroups(policy: CallPolicy): string[] {
  const paths = policy.rules.flatMap((rule) => rule.accounts.groups.map((group) => group.path));
  return [...new Set(paths)];
}

/**
 * Why `policy` names a role the provider does not declare, as parsing words its problems (the
 * rule, its effect, the entry); undefined when every role is one of `roles`.
 */
export function unknownRoleIn(policy: CallPolicy, roles: ProviderRoles): string | undefined {
  for (const [index, rule] of policy.rules.entries()) {
    for (const group of rule.accounts.groups) {
      const problem = unknownRole(group, roles);
      if (problem) return `rule ${index} "${rule.effect}" "groups": ${problem}`;
    }
  }
  return undefined;
}

/**
 * The decision for `caller` acting on `name` of `target`: the first rule that decides, by the
 * provider's `roles` (GitLab's unless told otherwise).
 */
export function decideCall(
  policy: CallPolicy,
  caller: Caller,
  target: Target,
  name: string,
  roles: ProviderRoles = GITLAB_PROVIDER_ROLES,
): CallDecision {
  const invalid = invalidName(target, name);
  if (invalid !== undefined) return { effect: "deny", invalid };
  for (const [index, rule] of policy.rules.entries()) {
    if (rule.target !== target || !rule.matchers.some((matcher) => matcher.test(name))) continue;
    const named = names(rule.accounts, caller, roles);
    if (rule.effect === "allow") return { effect: named === true ? "allow" : "deny", rule: index };
    // Unknown membership in a deny rule's group refuses: a missing lookup never admits.
    if (named !== false) return { effect: "deny", rule: index };
  }
  return { effect: policy.defaultEffect };
}

/**
 * Why `name` cannot be decided: a resource URI the MCP server would read as another one (not in
 * normal form, resource_uri.ts), or an empty name a lenient server might still run.
 */
function invalidName(target: Target, name: string): string | undefined {
  if (target === "resources") {
    return isNormalUri(name)
      ? undefined
      : "uri must be a URI in normal form (as new URL(uri).href writes it)";
  }
  return name === "" ? "name must be a non-empty string" : undefined;
}

/**
 * Whether `accounts` names the caller: true, false, or "unknown" when a group's membership was
 * never learnt for this session (signed in before the policy named it).
 */
function names(accounts: Accounts, caller: Caller, roles: ProviderRoles): boolean | "unknown" {
  if (namesAccount(accounts.users, { id: caller.userId, username: caller.username })) {
    return true;
  }
  let unknown = false;
  for (const group of accounts.groups) {
    const level = levelIn(caller, group.path);
    if (level === "unknown") unknown = true;
    else if (level !== undefined && meetsRole(group, level, roles)) return true;
  }
  return unknown ? "unknown" : false;
}

/** The caller's level in a group; undefined: not a member; "unknown": never asked. */
function levelIn(caller: Caller, path: string): number | undefined | "unknown" {
  const access = caller.access;
  if (access === undefined) return "unknown";
  const lower = path.toLowerCase();
  const found = Object.entries(access.groupLevels).find(([key]) => key.toLowerCase() === lower);
  if (found) return found[1];
  const asked = access.groupsAsked ?? caller.listedGroups;
  return asked.some((key) => key.toLowerCase() === lower) ? undefined : "unknown";
}

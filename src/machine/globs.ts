/**
 * The globs of MACHINE_ACCESS_FILE. A project path's `*` stays inside one path segment and `**`
 * crosses segments (`acme/*` is a group's own projects, `acme/**` its subgroups' too, and
 * neither is `acme` itself); a ref's, an environment's and a tool's `*` is any run of
 * characters, `/` included (`release/*` is every release branch, as GitLab writes them).
 *
 * @see docs/gateway.md "Machine callers"
 */

/** A whole-string matcher of a project pattern: `*` within a segment, `**` across them. */
export function projectGlob(pattern: string): RegExp {
  const source = pattern.split("**").map((part) => part.split("*").map(escaped).join("[^/]*")).join(
    ".*",
  );
  return new RegExp(`^${source}$`, "su");
}

/** A whole-string matcher where `*` is any run of characters, `/` included. */
export function crossingGlob(pattern: string): RegExp {
  return new RegExp(`^${pattern.split("*").map(escaped).join(".*")}$`, "su");
}

function escaped(part: string): string {
  return part.replace(/[.+?^${}()|[\]\\]/g, "\\$&");
}

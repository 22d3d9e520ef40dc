/**
 * The operator's command line (`deno task admin …`), parsed into one command or refused with
 * the reason. Parsing only: nothing here opens KV or prints.
 */

/** One operator command, as typed. */
export type AdminCommand =
  /** `group`: only the sessions that listed group (a full path, any case) admitted. */
  | {
    name: "sessions list";
    who?: UserSelector;
    group?: string;
    /** Only the sessions of this MCP server (`default`: /mcp). */
    server?: string;
    json: boolean;
  }
  | { name: "sessions revoke"; by: UserSelector | { id: string }; keepGitLabTokens: boolean }
  | { name: "clients list"; json: boolean }
  /** A machine client (client_credentials) authenticating with keys or a generated secret. */
  | {
    name: "clients add";
    clientName: string;
    grant: "client_credentials";
    clientId?: string;
    credential: { jwksFile: string } | { secret: true };
  }
  | { name: "clients delete"; clientId: string; keepGitLabTokens: boolean }
  | { name: "stats"; json: boolean }
  /** `--connect`: also open the store; without it nothing is connected to. */
  | { name: "config check"; connect: boolean }
  /** `--alg`: a private signing JWK for ACCESS_TOKEN_ALG instead of the secrets. */
  | { name: "keys generate"; alg?: "ES256" | "EdDSA" }
  | { name: "migrate" }
  | { name: "help" };

/**
 * Whose sessions: `--user` takes a GitLab username (any case) or a numeric user id, and the
 * commands say which matched; `--user-id` and `--username` take only one kind.
 */
export type UserSelector = { user: string } | { userId: string } | { username: string };

/** The usage text printed with every refusal (and for `help`). */
export const USAGE = [
  "usage: admin sessions list [<user>] [--group <group>] [--server <name>] [--json]",
  "       admin sessions revoke (<user> | --id <session id>) [--keep-gitlab-tokens]",
  "       admin clients list [--json] | clients delete <client id> [--keep-gitlab-tokens]",
  "       admin clients add --name <name> --grant client_credentials [--id <client id>]",
  "             (--jwks-file <public JWK Set file> | --secret)",
  "       admin stats [--json] | keys generate [--alg ES256|EdDSA] | migrate | help",
  "       admin config check [--connect]",
  "<user>: --user <gitlab username or id> | --user-id <id> | --username <username>",
  "<group>: the full path of an ALLOWED_GITLAB_GROUPS group that admitted the sessions",
].join("\n");

/** Arguments that name no command; the CLI prints the message and USAGE and exits 2. */
export class UsageError extends Error {
  override name = "UsageError";
}

/** Flags and positional words of one command line. */
interface Split {
  words: string[];
  flags: Map<string, string | true>;
}

/**
 * Ends sessions without revoking their GitLab tokens (they stay valid at GitLab until revoked
 * there): for when this environment cannot open or revoke them, and the operator knows it.
 */
const KEEP = "--keep-gitlab-tokens";

/** Flags that take a value; every other flag is a switch. */
const VALUE_FLAGS = new Set([
  "--user",
  "--user-id",
  "--username",
  "--group",
  "--server",
  "--id",
  "--alg",
  "--name",
  "--grant",
  "--jwks-file",
]);

const USER_FLAGS = ["--user", "--user-id", "--username"];

function split(args: readonly string[]): Split {
  const words: string[] = [];
  const flags = new Map<string, string | true>();
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
    if (!arg.startsWith("--")) {
      words.push(arg);
      continue;
    }
    const [name, inline] = arg.includes("=") ? arg.split(/=(.*)/s, 2) : [arg, undefined];
    if (flags.has(name)) throw new UsageError(`${name} given twice`);
    if (!VALUE_FLAGS.has(name)) {
      if (inline !== undefined) throw new UsageError(`${name} takes no value`);
      flags.set(name, true);
      continue;
    }
    const value = inline ?? args[++i];
    if (value === undefined || value.trim() === "") throw new UsageError(`${name} needs a value`);
    flags.set(name, value);
  }
  return { words, flags };
}

/** Refuses any flag of `given` not in `allowed`, and any positional word beyond `words`. */
function only(given: Split, allowed: string[], words: number): void {
  for (const name of given.flags.keys()) {
    if (!allowed.includes(name)) throw new UsageError(`unknown option ${name}`);
  }
  if (given.words.length > words) {
    throw new UsageError(`unexpected argument ${given.words[words]}`);
  }
}

function value(given: Split, name: string): string | undefined {
  const raw = given.flags.get(name);
  return typeof raw === "string" ? raw : undefined;
}

/** The one user flag given, if any; two of them are refused. */
function userSelector(given: Split): UserSelector | undefined {
  const named = USER_FLAGS.filter((flag) => given.flags.has(flag));
  if (named.length > 1) throw new UsageError(`give one of ${named.join(" and ")}`);
  const user = value(given, "--user");
  if (user !== undefined) return { user };
  const username = value(given, "--username");
  if (username !== undefined) return { username };
  const userId = value(given, "--user-id");
  if (userId === undefined) return undefined;
  const id = userId.trim();
  if (!/^[\x21-\x7e]{1,255}$/.test(id)) throw new UsageError("--user-id takes a user id");
  return { userId: id };
}

/** Parses the words after `admin`; throws UsageError for anything that is not one command. */
export function parseAdminArgs(args: readonly string[]): AdminCommand {
  const given = split(args);
  const [group, action] = given.words;
  const json = given.flags.has("--json");
  switch (`${group ?? ""} ${action ?? ""}`.trim()) {
    case "sessions list":
      only(given, [...USER_FLAGS, "--group", "--server", "--json"], 2);
      return {
        name: "sessions list",
        who: userSelector(given),
        group: value(given, "--group"),
        server: value(given, "--server"),
        json,
      };
    case "sessions revoke": {
      only(given, [...USER_FLAGS, "--id", KEEP], 2);
      const user = userSelector(given);
      const id = value(given, "--id");
      if ((user === undefined) === (id === undefined)) {
        throw new UsageError("sessions revoke needs exactly one of --user and --id");
      }
      return {
        name: "sessions revoke",
        by: user ?? { id: id ?? "" },
        keepGitLabTokens: given.flags.has(KEEP),
      };
    }
    case "clients list":
      only(given, ["--json"], 2);
      return { name: "clients list", json };
    case "clients add":
      only(given, ["--name", "--grant", "--id", "--jwks-file", "--secret"], 2);
      return clientsAdd(given);
    case "clients delete": {
      only(given, [KEEP], 3);
      const clientId = given.words[2];
      if (clientId === undefined) throw new UsageError("clients delete needs a client id");
      return { name: "clients delete", clientId, keepGitLabTokens: given.flags.has(KEEP) };
    }
    case "stats":
      only(given, ["--json"], 1);
      return { name: "stats", json };
    case "config check":
      only(given, ["--connect"], 2);
      return { name: "config check", connect: given.flags.has("--connect") };
    case "keys generate": {
      only(given, ["--alg"], 2);
      const alg = value(given, "--alg");
      if (alg === undefined) return { name: "keys generate" };
      if (alg !== "ES256" && alg !== "EdDSA") throw new UsageError("--alg must be ES256 or EdDSA");
      return { name: "keys generate", alg };
    }
    case "migrate":
      only(given, [], 1);
      return { name: "migrate" };
    case "help":
      only(given, [], 1);
      return { name: "help" };
    case "":
      only(given, ["--help"], 0);
      if (given.flags.has("--help")) return { name: "help" };
      throw new UsageError("no command given");
    default:
      if (given.flags.has("--help")) return { name: "help" };
      throw new UsageError(`unknown command: ${given.words.join(" ")}`);
  }
}

/** A machine client's id as an operator may choose it: no spaces, no URL, no surprises. */
const MACHINE_CLIENT_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

/** `clients add`: a name, the grant, one way to authenticate. */
function clientsAdd(given: Split): AdminCommand {
  const clientName = value(given, "--name");
  if (clientName === undefined) throw new UsageError("clients add needs --name");
  if (clientName.length > 200) throw new UsageError("--name takes at most 200 characters");
  const grant = value(given, "--grant");
  if (grant !== "client_credentials") {
    throw new UsageError("clients add needs --grant client_credentials (the one grant it adds)");
  }
  const clientId = value(given, "--id");
  if (clientId !== undefined && !MACHINE_CLIENT_ID.test(clientId)) {
    throw new UsageError(
      "--id takes 1 to 128 letters, digits, '.', '_' or '-' (first a letter or digit)",
    );
  }
  const jwksFile = value(given, "--jwks-file");
  if ((jwksFile === undefined) === !given.flags.has("--secret")) {
    throw new UsageError("clients add needs exactly one of --jwks-file and --secret");
  }
  return {
    name: "clients add",
    clientName,
    grant,
    clientId,
    credential: jwksFile === undefined ? { secret: true } : { jwksFile },
  };
}

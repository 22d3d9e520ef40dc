/**
 * The operator's command line (`deno task admin …`), parsed into one command or refused with
 * the reason. Parsing only: nothing here opens KV or prints.
 */

/** One operator command, as typed. */
export type AdminCommand =
  | { name: "sessions list"; user?: string; json: boolean }
  | { name: "sessions revoke"; by: { user: string } | { id: string } }
  | { name: "clients list"; json: boolean }
  | { name: "clients delete"; clientId: string }
  | { name: "stats"; json: boolean }
  | { name: "keys generate" }
  | { name: "migrate" }
  | { name: "help" };

/** The usage text printed with every refusal (and for `help`). */
export const USAGE = [
  "usage: admin sessions list [--user <gitlab username or id>] [--json]",
  "       admin sessions revoke --user <gitlab username or id> | --id <session id>",
  "       admin clients list [--json] | clients delete <client id>",
  "       admin stats [--json] | keys generate | migrate | help",
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

/** Flags that take a value; every other flag is a switch. */
const VALUE_FLAGS = new Set(["--user", "--id"]);

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

/** Parses the words after `admin`; throws UsageError for anything that is not one command. */
export function parseAdminArgs(args: readonly string[]): AdminCommand {
  const given = split(args);
  const [group, action] = given.words;
  const json = given.flags.has("--json");
  switch (`${group ?? ""} ${action ?? ""}`.trim()) {
    case "sessions list":
      only(given, ["--user", "--json"], 2);
      return { name: "sessions list", user: value(given, "--user"), json };
    case "sessions revoke": {
      only(given, ["--user", "--id"], 2);
      const user = value(given, "--user");
      const id = value(given, "--id");
      if ((user === undefined) === (id === undefined)) {
        throw new UsageError("sessions revoke needs exactly one of --user and --id");
      }
      return { name: "sessions revoke", by: user === undefined ? { id: id ?? "" } : { user } };
    }
    case "clients list":
      only(given, ["--json"], 2);
      return { name: "clients list", json };
    case "clients delete": {
      only(given, [], 3);
      const clientId = given.words[2];
      if (clientId === undefined) throw new UsageError("clients delete needs a client id");
      return { name: "clients delete", clientId };
    }
    case "stats":
      only(given, ["--json"], 1);
      return { name: "stats", json };
    case "keys generate":
      only(given, [], 2);
      return { name: "keys generate" };
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

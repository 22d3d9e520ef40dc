/**
 * The operator's machine clients: `clients add` registers one (client_credentials, with public
 * keys or a generated secret shown once), `clients list` shows them beside the registered ones
 * (never a secret nor its hash), `clients delete` ends one: its tokens are refused from the
 * gateway's next call, which looks the client up.
 */

import { randomToken } from "../crypto.ts";
import { clientSecretHash } from "../grants/client_auth/client_secret.ts";
import { MachineKeyError, publicJwksOf } from "../clients/machine_keys.ts";
import type { Logger } from "../logger.ts";
import type { MachineClientCredential, MachineClientRecord, Store } from "../store/mod.ts";
import type { AdminCommand } from "./args.ts";
import { AdminRefusal } from "./refusal.ts";
import { formatTable } from "./table.ts";
import { jsonLine } from "./terminal.ts";

type AddCommand = Extract<AdminCommand, { name: "clients add" }>;

/** What these commands use of the CLI's (AdminDeps). */
interface AdminDeps {
  store: Store;
  baseUrl?: string;
  logger: Logger;
  print(line: string): void;
  note?(line: string): void;
}

/** `clients add`: stores the client, prints one JSON line (`client_id`, the secret once). */
export async function addMachineClient(command: AddCommand, deps: AdminDeps): Promise<number> {
  const given = command.credential;
  let secret: string | undefined;
  let credential: MachineClientCredential;
  if ("jwksFile" in given) {
    requireBaseUrl(deps.baseUrl);
    credential = { method: "private_key_jwt", jwks: await keysOf(given.jwksFile) };
  } else {
    secret = randomToken(32);
    credential = { method: "client_secret", secretHash: clientSecretHash(secret) };
  }
  const client: MachineClientRecord = {
    clientId: command.clientId ?? randomToken(16),
    name: command.clientName,
    grantType: command.grant,
    credential,
    createdAt: Date.now(),
  };
  if (!await deps.store.addMachineClient(client)) {
    throw new AdminRefusal(`client id ${JSON.stringify(client.clientId)} is taken; nothing added`);
  }
  deps.print(jsonLine({
    client_id: client.clientId,
    ...(secret === undefined ? {} : { client_secret: secret }),
  }));
  deps.note?.(
    secret === undefined
      ? "# Added. Give the client a rule under clients: in MACHINE_ACCESS_FILE."
      : "# Added. The secret is shown this once and stored only as a hash: keep it now. " +
        "Give the client a rule under clients: in MACHINE_ACCESS_FILE.",
  );
  return 0;
}

/**
 * Keys are refused without BASE_URL: the service would refuse every assertion signed with them
 * (an assertion's `aud` must name a fixed issuer, not the request's Host).
 */
function requireBaseUrl(baseUrl: string | undefined): void {
  if (baseUrl) return;
  throw new AdminRefusal(
    "--jwks-file needs BASE_URL, set as the service has it: without it the service refuses " +
      "private_key_jwt (an assertion's aud must name a fixed issuer); nothing added",
    2,
  );
}

/** The public keys of the command's key file; AdminRefusal when it cannot be read or used. */
async function keysOf(path: string): Promise<{ keys: JsonWebKey[] }> {
  let text: string;
  try {
    text = await Deno.readTextFile(path);
  } catch (error) {
    throw new AdminRefusal(
      `cannot read ${path}: ${error instanceof Error ? error.message : error}`,
    );
  }
  try {
    return await publicJwksOf(text);
  } catch (error) {
    if (!(error instanceof MachineKeyError)) throw error;
    throw new AdminRefusal(`${path}: ${error.message}; nothing added`, 2);
  }
}

/** One line a machine client: how it authenticates, never its secret or the secret's hash. */
function machineClientView(client: MachineClientRecord) {
  const { credential } = client;
  return {
    clientId: client.clientId,
    name: client.name,
    kind: "machine",
    grantTypes: [client.grantType],
    tokenEndpointAuthMethod: credential.method === "private_key_jwt"
      ? "private_key_jwt"
      : "client_secret_basic client_secret_post",
    keyIds: credential.method === "private_key_jwt"
      ? credential.jwks.keys.map((key) => String((key as { kid?: unknown }).kid ?? ""))
      : [],
    addedAt: new Date(client.createdAt).toISOString(),
  };
}

/** The machine clients after the registered ones: JSON lines, or a table of their own. */
export function printMachineClients(
  clients: MachineClientRecord[],
  json: boolean,
  deps: AdminDeps,
): void {
  const views = clients.map(machineClientView);
  if (json) return views.forEach((view) => deps.print(jsonLine(view)));
  if (views.length === 0) return;
  const rows = views.map((v) => [v.clientId, v.name, v.addedAt, v.tokenEndpointAuthMethod]);
  formatTable(["MACHINE CLIENT", "NAME", "ADDED", "AUTHENTICATION"], rows)
    .forEach((line) => deps.print(line));
  deps.print(`${clients.length} machine client(s)`);
}

/** `clients delete` of a machine client: true when there was one (and it is gone). */
export async function deleteMachineClient(clientId: string, deps: AdminDeps): Promise<boolean> {
  if (!await deps.store.deleteMachineClient(clientId)) return false;
  deps.logger.info("operator action", { action: "clients delete", clientId, kind: "machine" });
  return true;
}

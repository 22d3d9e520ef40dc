/**
 * Why a configuration file could not be read, said the same way for every file the service
 * reads (`<NAME>_FILE` secrets, MCP_SERVERS_FILE, MCP_POLICY_FILE, MACHINE_ACCESS_FILE,
 * SIGNING_KEYS_FILE, the token and policy files they name).
 */

import { RefusedFile } from "./bounded_read.ts";

/**
 * The folder the container image may read configuration and secrets from (deploy/Dockerfile's
 * `--allow-read`; tests/deploy_container_test.ts holds the two together).
 */
export const IMAGE_CONFIG_FOLDER = "/etc/gitlab-mcp-auth";

/**
 * Why a file could not be read, by the error's name. Deno's permissions refusing it
 * (`NotCapable`: a Docker secret at /run/secrets, say) names the image's folder when this
 * process may read that one, as in the image: that is where the file belongs.
 */
export function unreadableReason(error: unknown): string {
  if (!(error instanceof Error)) return "unreadable";
  if (error instanceof RefusedFile) return error.message;
  if (!(error instanceof Deno.errors.NotCapable)) return error.name;
  const folder = Deno.permissions.querySync({ name: "read", path: IMAGE_CONFIG_FOLDER });
  return folder.state === "granted"
    ? `NotCapable: this process may not read it; in the container image put it under ${IMAGE_CONFIG_FOLDER}, the folder it reads configuration from`
    : "NotCapable: this process may not read it (Deno's --allow-read)";
}

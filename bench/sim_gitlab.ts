/**
 * The simulated GitLab of dev/simulated_gitlab.ts as a process, for the `/oauth/poll` case of
 * bench/run.ts: listens on 127.0.0.1:$PORT, device codes live an hour (so flows made before the
 * measurement do not expire during it), nobody approves (every poll stays pending). On SIGTERM
 * it prints how many requests each endpoint received, as one JSON line, and exits.
 */

import { startSimulatedGitLab } from "../dev/simulated_gitlab.ts";

const gitlab = startSimulatedGitLab({
  port: Number(Deno.env.get("PORT") ?? "0"),
  deviceExpiresInSeconds: 3600,
  clientId: Deno.env.get("GITLAB_CLIENT_ID") || undefined,
});
const report = () => {
  // deno-lint-ignore no-console -- the report is this tool's output
  console.log(JSON.stringify({ calls: gitlab.calls }));
  Deno.exit(0);
};
Deno.addSignalListener("SIGTERM", report);
Deno.addSignalListener("SIGINT", report);
// deno-lint-ignore no-console -- readiness line
console.log(JSON.stringify({ listening: gitlab.url.href }));

/**
 * deploy/kubernetes/ cannot be applied here (no cluster, no kubectl, no container runtime):
 * these tests hold it to what can be checked. The kustomizations are rendered as kustomize
 * would (they list resources only: the files' documents, folders recursively), every manifest
 * is validated against the Kubernetes API's schemas (kubernetes-models, generated from the
 * API's OpenAPI document), and the Deployment is checked for what issue 38 §3 asks: replicas,
 * probes, PodDisruptionBudget, non-root and read-only, capabilities, resources, termination
 * longer than the service's drain, every secret read through `<NAME>_FILE` from a Secret the
 * base mounts but does not contain, every variable the service's own; and what it sets, with
 * the ConfigMap's files and the example Secret's keys, loads as a complete configuration.
 */

import assert from "node:assert/strict";
import { parseAllDocuments, parseDocument } from "yaml";
import { Deployment } from "kubernetes-models/apps/v1/Deployment";
import { PodDisruptionBudget } from "kubernetes-models/policy/v1/PodDisruptionBudget";
import { ConfigMap } from "kubernetes-models/v1/ConfigMap";
import { Secret } from "kubernetes-models/v1/Secret";
import { Service } from "kubernetes-models/v1/Service";
import type { IContainer } from "kubernetes-models/v1/Container";
import type { IPodSpec } from "kubernetes-models/v1/PodSpec";
import { SHUTDOWN_GRACE_MS } from "../main.ts";
import { listConfigVariables, loadConfig } from "../src/app/config.ts";
import { TEST_SECRET } from "./_helpers.ts";

const KUBERNETES = new URL("../deploy/kubernetes/", import.meta.url);
const BASE = new URL("base/", KUBERNETES);
const EXAMPLE = new URL("example/", KUBERNETES);
const KNOWN = new Set(listConfigVariables().map((variable) => variable.name));
/** The variables the service's table marks secret: each read from a file too (`<NAME>_FILE`). */
const SECRETS = listConfigVariables().filter((variable) => variable.secret).map(({ name }) => name);

/** A manifest: what every Kubernetes object has, the rest read through its model. */
interface Manifest {
  apiVersion: string;
  kind: string;
  metadata: { name: string; labels?: Record<string, string> };
  [field: string]: unknown;
}

/** The schema of each kind the manifests use (`apiVersion/kind`): its model's validate(). */
const MODELS: Record<string, (manifest: Manifest) => { validate(): void }> = {
  "apps/v1/Deployment": (m) => new Deployment(m as never),
  "policy/v1/PodDisruptionBudget": (m) => new PodDisruptionBudget(m as never),
  "v1/ConfigMap": (m) => new ConfigMap(m as never),
  "v1/Secret": (m) => new Secret(m as never),
  "v1/Service": (m) => new Service(m as never),
};

/**
 * What `kustomize build <folder>` makes of a kustomization that only lists resources: each
 * file's documents in order, a folder's own kustomization rendered in place.
 */
async function render(folder: URL): Promise<Manifest[]> {
  const kustomization = parseDocument(
    await Deno.readTextFile(new URL("kustomization.yaml", folder)),
  ).toJS();
  assert.deepEqual(
    Object.keys(kustomization).sort(),
    ["apiVersion", "kind", "resources"],
    `${folder}: resources only, so that rendering is reading them`,
  );
  assert.equal(kustomization.apiVersion, "kustomize.config.k8s.io/v1beta1");
  assert.equal(kustomization.kind, "Kustomization");
  const manifests: Manifest[] = [];
  for (const resource of kustomization.resources as string[]) {
    const url = new URL(resource, folder);
    if ((await Deno.stat(url)).isDirectory) {
      manifests.push(...await render(new URL(`${resource}/`, folder)));
      continue;
    }
    for (const document of parseAllDocuments(await Deno.readTextFile(url))) {
      assert.deepEqual(document.errors, [], resource);
      manifests.push(document.toJS());
    }
  }
  return manifests;
}

function only<T extends Manifest>(manifests: Manifest[], kind: string): T {
  const found = manifests.filter((manifest) => manifest.kind === kind);
  assert.equal(found.length, 1, `one ${kind}`);
  return found[0] as T;
}

/** The Deployment's pod spec and its one container. */
function podOf(manifests: Manifest[]): { pod: IPodSpec; container: IContainer } {
  const deployment = only<Manifest & { spec: { template: { spec: IPodSpec } } }>(
    manifests,
    "Deployment",
  );
  const pod = deployment.spec.template.spec;
  assert.equal(pod.containers.length, 1);
  return { pod, container: pod.containers[0] };
}

/** Where the container mounts each volume: by volume name, its mount path. */
function mountsOf(pod: IPodSpec, container: IContainer): Map<string, string> {
  const mounts = new Map<string, string>();
  for (const mount of container.volumeMounts ?? []) {
    assert.ok(pod.volumes?.some((volume) => volume.name === mount.name), mount.name);
    mounts.set(mount.name, mount.mountPath);
  }
  return mounts;
}

/** The Secret the pod mounts (its name and mount path); the base must not contain it. */
function mountedSecret(pod: IPodSpec, container: IContainer): { name: string; path: string } {
  const volume = pod.volumes?.find((volume) => volume.secret);
  assert.ok(volume?.secret?.secretName, "a Secret is mounted");
  const path = mountsOf(pod, container).get(volume.name);
  assert.ok(path);
  return { name: volume.secret.secretName, path };
}

/** The secret NAME a `<NAME>_FILE` variable stands for, if NAME is one of SECRETS. */
function secretOfFileVariable(name: string): string | undefined {
  const secret = name.match(/^(.*)_FILE$/)?.[1];
  return secret && SECRETS.includes(secret) ? secret : undefined;
}

Deno.test("deploy/kubernetes: every manifest of the base and the example passes the Kubernetes API's schemas", async () => {
  for (const folder of [BASE, EXAMPLE]) {
    const manifests = await render(folder);
    assert.ok(manifests.length >= 4, `${folder} renders`);
    for (const manifest of manifests) {
      const model = MODELS[`${manifest.apiVersion}/${manifest.kind}`];
      assert.ok(model, `${manifest.apiVersion} ${manifest.kind} is a kind the test knows`);
      model(manifest).validate();
      assert.equal(manifest.metadata.labels?.["app.kubernetes.io/name"], "gitlab-mcp-auth");
    }
  }
  // The schemas are the real ones: a wrong type is refused.
  const deployment = only<Manifest & { spec: { replicas: unknown } }>(
    await render(BASE),
    "Deployment",
  );
  assert.throws(
    () =>
      new Deployment({ ...deployment, spec: { ...deployment.spec, replicas: "2" } } as never)
        .validate(),
    /replicas must be integer/,
  );
});

Deno.test("deploy/kubernetes: two replicas or more, probes, disruption budget, service, non-root and read-only", async () => {
  const manifests = await render(BASE);
  const deployment = only<
    Manifest & {
      spec: {
        replicas: number;
        selector: { matchLabels: Record<string, string> };
        template: { metadata: { labels: Record<string, string> } };
      };
    }
  >(manifests, "Deployment");
  assert.ok(deployment.spec.replicas >= 2, "two pods or more");
  const podLabels = deployment.spec.template.metadata.labels;
  const selects = (selector: Record<string, string>) =>
    Object.entries(selector).every(([name, value]) => podLabels[name] === value);
  assert.ok(selects(deployment.spec.selector.matchLabels));
  const { pod, container } = podOf(manifests);
  const ports = new Map((container.ports ?? []).map((port) => [port.name, port.containerPort]));

  // Probes on the service's own endpoints, on the port it listens on (PORT).
  assert.equal(container.readinessProbe?.httpGet?.path, "/readyz");
  assert.equal(container.livenessProbe?.httpGet?.path, "/healthz");
  const env = new Map((container.env ?? []).map((variable) => [variable.name, variable.value]));
  for (const probe of [container.readinessProbe, container.livenessProbe, container.startupProbe]) {
    const port = probe?.httpGet?.port;
    if (port === undefined) continue;
    assert.equal(typeof port === "string" ? ports.get(port) : port, Number(env.get("PORT")));
  }

  // A disruption leaves a pod serving; the Service reaches the pods by the named port.
  const budget = only<
    Manifest & { spec: { minAvailable: number; selector: { matchLabels: Record<string, string> } } }
  >(manifests, "PodDisruptionBudget");
  assert.ok(budget.spec.minAvailable >= 1 && budget.spec.minAvailable < deployment.spec.replicas);
  assert.ok(selects(budget.spec.selector.matchLabels));
  const service = only<
    Manifest & { spec: { selector: Record<string, string>; ports: { targetPort: string }[] } }
  >(manifests, "Service");
  assert.ok(selects(service.spec.selector));
  for (const port of service.spec.ports) assert.ok(ports.has(port.targetPort), port.targetPort);

  // Non-root (by number, as the image's user), read-only, no capability, no escalation.
  assert.equal(pod.securityContext?.runAsNonRoot, true);
  assert.ok((pod.securityContext?.runAsUser ?? 0) > 0);
  const dockerfile = await Deno.readTextFile(new URL("../deploy/Dockerfile", import.meta.url));
  const imageUser = dockerfile.match(/^USER (\d+):(\d+)$/m);
  assert.ok(imageUser, "the image's USER is numeric");
  assert.equal(String(pod.securityContext?.runAsUser), imageUser[1]);
  assert.equal(container.securityContext?.runAsNonRoot, true);
  assert.equal(container.securityContext?.readOnlyRootFilesystem, true);
  assert.equal(container.securityContext?.allowPrivilegeEscalation, false);
  assert.deepEqual(container.securityContext?.capabilities?.drop, ["ALL"]);
  assert.equal(container.securityContext?.capabilities?.add, undefined);

  // Requests and limits, of CPU and memory.
  for (const kind of ["requests", "limits"] as const) {
    for (const resource of ["cpu", "memory"]) {
      assert.ok(container.resources?.[kind]?.[resource], `${kind}.${resource}`);
    }
  }

  // Termination outlasts the preStop pause plus the service's drain of requests in flight.
  const pauseSeconds = container.lifecycle?.preStop?.sleep?.seconds ?? 0;
  const drainSeconds = SHUTDOWN_GRACE_MS / 1000;
  assert.ok(
    (pod.terminationGracePeriodSeconds ?? 30) > pauseSeconds + drainSeconds,
    `terminationGracePeriodSeconds > ${pauseSeconds} + ${drainSeconds}`,
  );
});

Deno.test("deploy/kubernetes: every variable is the service's own; secrets come through <NAME>_FILE from a Secret the base mounts but does not fill", async () => {
  const base = await render(BASE);
  const { pod, container } = podOf(base);
  const secret = mountedSecret(pod, container);
  assert.equal(container.envFrom, undefined, "every variable is named in the Deployment");
  const names = (container.env ?? []).map((variable) => variable.name);
  const unknown = names.filter((name) => !KNOWN.has(name));
  assert.deepEqual(unknown, [], "variables the service does not read");
  for (const variable of container.env ?? []) {
    assert.ok(!SECRETS.includes(variable.name), `${variable.name} is read from a file`);
    assert.equal(variable.valueFrom, undefined, `${variable.name}: a file, not valueFrom`);
  }
  const secretFiles = (container.env ?? []).filter((variable) =>
    secretOfFileVariable(variable.name)
  );
  assert.ok(
    secretFiles.some((variable) => variable.name === "DATABASE_URL_FILE"),
    "PostgreSQL",
  );
  assert.ok(secretFiles.some((variable) => variable.name === "JWT_SECRET_FILE"));
  for (const variable of secretFiles) {
    assert.ok(variable.value?.startsWith(`${secret.path}/`), `${variable.name} in the Secret`);
  }
  // The base references the Secret; only the example, outside it, holds one (placeholders).
  assert.deepEqual(base.filter((manifest) => manifest.kind === "Secret"), []);
  const example = only<Manifest & { stringData: Record<string, string> }>(
    await render(EXAMPLE),
    "Secret",
  );
  assert.equal(example.metadata.name, secret.name);
  assert.deepEqual(
    Object.keys(example.stringData).sort(),
    secretFiles.map((variable) => variable.value?.slice(secret.path.length + 1)).sort(),
    "the example has a key for every file the Deployment reads, and no other",
  );
  for (const value of Object.values(example.stringData)) assert.match(value, /^REPLACE-/);
});

Deno.test("deploy/kubernetes: what the Deployment sets, with the ConfigMap's files and a filled Secret, is a complete configuration on PostgreSQL", async () => {
  const manifests = await render(BASE);
  const { pod, container } = podOf(manifests);
  const mounts = mountsOf(pod, container);
  const secret = mountedSecret(pod, container);
  const configVolume = pod.volumes?.find((volume) => volume.configMap);
  const configMap = only<Manifest & { data: Record<string, string> }>(manifests, "ConfigMap");
  assert.equal(configVolume?.configMap?.name, configMap.metadata.name);
  const configPath = mounts.get(configVolume.name);
  assert.ok(configPath);
  // The folders as the pod sees them, here in a temporary directory.
  const dir = await Deno.makeTempDir({ prefix: "kubernetes-" });
  const secretValues: Record<string, string> = {
    "database-url": "postgres://auth:pw@postgres:5432/auth",
    "jwt-secret": TEST_SECRET,
    "encryption-key": "an-encryption-key-of-at-least-32-bytes!!",
    "metrics-token": "a-metrics-token-of-at-least-32-bytes!!!",
  };
  try {
    await Deno.mkdir(`${dir}/config`);
    await Deno.mkdir(`${dir}/secrets`);
    for (const [file, text] of Object.entries(configMap.data)) {
      await Deno.writeTextFile(`${dir}/config/${file}`, text);
    }
    for (const [file, text] of Object.entries(secretValues)) {
      await Deno.writeTextFile(`${dir}/secrets/${file}`, `${text}\n`);
    }
    const env: Record<string, string> = {};
    for (const { name, value = "" } of container.env ?? []) {
      const local = value.replace(configPath, `${dir}/config`).replace(
        secret.path,
        `${dir}/secrets`,
      );
      if (local.startsWith(`${dir}/config/`)) {
        assert.ok(
          configMap.data[local.slice(dir.length + 8)] !== undefined,
          `${name}: in the ConfigMap`,
        );
      }
      // The service reads `<NAME>_FILE` itself (loadConfig): the Secret's files as mounted.
      env[name] = local;
    }
    // Under the image's own ENV (its KV_PATH is emptied: PostgreSQL).
    const config = loadConfig({ ...imageEnv(), ...env });
    assert.equal(config.securityProfile, "strict");
    assert.equal(config.kvPath, undefined);
    assert.equal(config.databaseUrl?.toString().startsWith("postgres://"), true);
    assert.deepEqual(config.mcpServersFile?.servers.map((server) => server.name), ["docs"]);
    assert.ok(config.mcpPolicyFile?.policy, "the policy file is read");
    assert.ok(config.metricsToken, "metrics are served");
    assert.equal(config.port, 8000);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

/** The Dockerfile's `ENV` (the image the Deployment runs). */
function imageEnv(): Record<string, string> {
  const dockerfile = Deno.readTextFileSync(new URL("../deploy/Dockerfile", import.meta.url));
  const env = dockerfile.match(/^ENV ((?:.*\\\n)*.*)$/m)?.[1] ?? "";
  return Object.fromEntries([...env.matchAll(/([A-Z][A-Z0-9_]*)=(\S+)/g)].map((m) => [m[1], m[2]]));
}

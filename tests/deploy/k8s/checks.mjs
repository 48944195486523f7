// Consistency checks of the rendered deploy/k8s manifests against the server's flags
// (tests/deploy/k8s_test.sh runs it after validate.mjs).
//
// usage: node checks.mjs RENDERED.yaml OUT_DIR
// Writes OUT_DIR/config.textproto (the ConfigMap entry that --config points at) and
// OUT_DIR/args (the container's arguments, one a line) so that the test can start the real
// server with them. Prints each failed check; exits 1 if any failed.
import { writeFileSync } from "node:fs";
import { posix } from "node:path";
import { check, finish, loadArguments, matches } from "./checking.mjs";

const { objects, outDir } = loadArguments("checks.mjs");
const ofKind = (kind) => objects.filter((o) => o.kind === kind);
// "HOST:PORT" / "[::]:PORT" -> { host, port }
function hostPort(value) {
  const m = /^(.*):(\d+)$/.exec(value ?? "");
  return m ? { host: m[1], port: Number(m[2]) } : null;
}

// The server's StatefulSet (the cluster overlay adds another one, NATS's: cluster_checks.mjs).
const sets = ofKind("StatefulSet").filter((s) => s.metadata?.name === "graphbandit");
check(sets.length === 1, `expected one StatefulSet named graphbandit, found ${sets.length}`);
if (sets.length !== 1) finish();
const sts = sets[0];
const pod = sts.spec.template;
const podSpec = pod.spec;
const podLabels = pod.metadata?.labels ?? {};
check(matches(sts.spec.selector?.matchLabels, podLabels), "StatefulSet selector does not match its pod labels");
const container = (podSpec.containers ?? []).find((c) => c.name === "graphbandit");
check(!!container, "no container named graphbandit");
if (!container) finish();

// The server's flags, as given in args (--name=value).
const args = container.args ?? [];
const flags = {};
for (const a of args) {
  const m = /^--([a-z_]+)=(.*)$/.exec(a);
  check(!!m, `argument "${a}" is not of the form --flag=value`);
  if (m) flags[m[1]] = m[2];
}
for (const f of ["listen", "metrics_listen", "state_dir", "config", "shutdown_grace_seconds"]) {
  check(f in flags, `--${f} is not set`);
}
writeFileSync(posix.join(outDir, "args"), args.map((a) => `${a}\n`).join(""));

// gRPC: the listen port, the container port and every probe agree; all interfaces.
const listen = hostPort(flags.listen);
check(!!listen, `--listen=${flags.listen} is not HOST:PORT`);
const ports = Object.fromEntries((container.ports ?? []).map((p) => [p.name, p.containerPort]));
if (listen) {
  check(["0.0.0.0", "[::]"].includes(listen.host),
    `--listen binds ${listen.host}: the kubelet's probes and the Services cannot reach it`);
  check(ports.grpc === listen.port, `container port "grpc" (${ports.grpc}) != --listen port ${listen.port}`);
  for (const probe of ["startupProbe", "readinessProbe", "livenessProbe"]) {
    const p = container[probe];
    if (probe === "startupProbe" && !p) continue;
    check(!!p, `${probe} is missing`);
    if (!p) continue;
    check(!!p.grpc, `${probe} is not a native gRPC probe`);
    check(p.grpc?.port === listen.port, `${probe} gRPC port ${p.grpc?.port} != --listen port ${listen.port}`);
    check(!p.grpc?.service, `${probe} asks for service "${p.grpc?.service}"; the server reports overall health under ""`);
  }
}

// Metrics: the annotations, the container port and --metrics_listen agree.
const metrics = hostPort(flags.metrics_listen);
check(!!metrics, `--metrics_listen=${flags.metrics_listen} is not HOST:PORT`);
const ann = pod.metadata?.annotations ?? {};
check(ann["prometheus.io/scrape"] === "true", "pod annotation prometheus.io/scrape is not \"true\"");
check(ann["prometheus.io/path"] === "/metrics", "pod annotation prometheus.io/path is not /metrics");
if (metrics) {
  check(["0.0.0.0", "[::]"].includes(metrics.host), `--metrics_listen binds ${metrics.host}: Prometheus cannot reach it`);
  check(ann["prometheus.io/port"] === String(metrics.port),
    `annotation prometheus.io/port ${ann["prometheus.io/port"]} != --metrics_listen port ${metrics.port}`);
  check(ports.metrics === metrics.port, `container port "metrics" (${ports.metrics}) != --metrics_listen port ${metrics.port}`);
}

// Shutdown: the kubelet waits longer than the server's drain.
const grace = Number(flags.shutdown_grace_seconds);
check(Number.isFinite(grace) && grace > 0, `--shutdown_grace_seconds=${flags.shutdown_grace_seconds} is not a positive number`);
check(podSpec.terminationGracePeriodSeconds > grace,
  `terminationGracePeriodSeconds ${podSpec.terminationGracePeriodSeconds} is not above --shutdown_grace_seconds ${grace}`);

// Resources.
for (const kind of ["requests", "limits"]) {
  for (const r of ["cpu", "memory"]) {
    check(container.resources?.[kind]?.[r] !== undefined, `resources.${kind}.${r} is not set`);
  }
}

// Security context.
const psc = podSpec.securityContext ?? {};
const csc = container.securityContext ?? {};
check(psc.runAsNonRoot === true, "pod securityContext.runAsNonRoot is not true");
check(psc.runAsUser === 10001, `pod securityContext.runAsUser is ${psc.runAsUser}, not 10001`);
check(Number.isInteger(psc.fsGroup) && psc.fsGroup > 0, "pod securityContext.fsGroup is not set (the state volume must be writable)");
check(psc.seccompProfile?.type === "RuntimeDefault", "pod seccompProfile is not RuntimeDefault");
check(csc.allowPrivilegeEscalation === false, "container allowPrivilegeEscalation is not false");
check(csc.readOnlyRootFilesystem === true, "container readOnlyRootFilesystem is not true");
check(csc.privileged !== true, "container is privileged");
check((csc.capabilities?.drop ?? []).includes("ALL"), "container does not drop ALL capabilities");
check(!(csc.capabilities?.add ?? []).length, "container adds capabilities");
check(csc.runAsNonRoot !== false && (csc.runAsUser === undefined || csc.runAsUser > 0), "container may run as root");
check((csc.seccompProfile?.type ?? "RuntimeDefault") === "RuntimeDefault", "container seccompProfile is not RuntimeDefault");

// Volumes: --state_dir is a volume claim template, --config comes from a rendered ConfigMap.
const mounts = container.volumeMounts ?? [];
const volumes = Object.fromEntries((podSpec.volumes ?? []).map((v) => [v.name, v]));
const stateMount = mounts.find((m) => m.mountPath === flags.state_dir);
check(!!stateMount, `nothing is mounted at --state_dir ${flags.state_dir}`);
const claims = (sts.spec.volumeClaimTemplates ?? []).map((t) => t.metadata?.name);
check(stateMount && claims.includes(stateMount.name) && !volumes[stateMount.name],
  `--state_dir is not on a volumeClaimTemplate (claims: ${claims.join(", ")})`);
check(!stateMount?.readOnly, "the state volume is mounted read-only");
const configDir = posix.dirname(flags.config ?? "");
const configMount = mounts.find((m) => m.mountPath === configDir);
check(!!configMount, `nothing is mounted at ${configDir} (--config)`);
const cmName = configMount && volumes[configMount.name]?.configMap?.name;
check(!!cmName, `the volume at ${configDir} is not a ConfigMap`);
const cm = ofKind("ConfigMap").find((c) => c.metadata?.name === cmName);
check(!!cm, `ConfigMap ${cmName} referenced by the StatefulSet is not in the rendered output`);
const configText = cm?.data?.[posix.basename(flags.config ?? "")];
check(typeof configText === "string" && configText.length > 0,
  `ConfigMap ${cmName} has no key ${posix.basename(flags.config ?? "")}`);
writeFileSync(posix.join(outDir, "config.textproto"), configText ?? "");
// Replicas: in single-node mode each replica would be an independent model with its own log, so
// there must be exactly one; in cluster mode (a `cluster` block) the replicas share each model's
// stream, and one would defeat the purpose.
const clusterMode = /^\s*cluster\s*\{/m.test(configText ?? "");
if (clusterMode) {
  check(sts.spec.replicas >= 2, `cluster mode with ${sts.spec.replicas} replica(s): use at least 2`);
} else {
  check(sts.spec.replicas === 1, "StatefulSet must have exactly 1 replica (one writer per model)");
}
// The root filesystem is read-only: every other path the server writes must be a volume.
check(mounts.some((m) => m.mountPath === "/tmp" && !m.readOnly), "/tmp is not a writable volume");

// Services: a headless governing Service and a client ClusterIP Service, both on the pod.
const services = ofKind("Service");
const headless = services.find((s) => s.metadata.name === sts.spec.serviceName);
check(!!headless, `the StatefulSet's serviceName ${sts.spec.serviceName} is not a rendered Service`);
check(headless?.spec?.clusterIP === "None", "the governing Service is not headless (clusterIP: None)");
const client = services.find((s) => s !== headless && (s.spec?.type ?? "ClusterIP") === "ClusterIP" &&
  s.spec?.clusterIP !== "None" && matches(s.spec?.selector, podLabels));
check(!!client, "no client ClusterIP Service");
for (const s of [headless, client].filter(Boolean)) {
  check(matches(s.spec.selector, podLabels), `Service ${s.metadata.name} selector does not match the pod labels`);
  const byTarget = (name, number) =>
    (s.spec.ports ?? []).find((p) => p.targetPort === name || p.targetPort === number);
  const g = byTarget("grpc", listen?.port);
  check(!!g && g.port === listen?.port, `Service ${s.metadata.name} does not expose gRPC on ${listen?.port}`);
  if (s === client) {
    const m = byTarget("metrics", metrics?.port);
    check(!!m && m.port === metrics?.port, `Service ${s.metadata.name} does not expose metrics on ${metrics?.port}`);
  }
}

// PodDisruptionBudget on the same pods.
const pdbs = ofKind("PodDisruptionBudget").filter((p) => matches(p.spec?.selector?.matchLabels, podLabels));
check(pdbs.length === 1, `expected one PodDisruptionBudget on the server's pods, found ${pdbs.length}`);
const pdb = pdbs[0]?.spec ?? {};
// One replica: a drain waits for an operator. Several: at least one stays, and one may go.
const allowedDown = Number.isInteger(pdb.minAvailable) ? sts.spec.replicas - pdb.minAvailable
  : Number.isInteger(pdb.maxUnavailable) ? pdb.maxUnavailable : NaN;
check(sts.spec.replicas === 1 ? pdb.minAvailable === 1
  : allowedDown >= 1 && allowedDown < sts.spec.replicas,
  `PodDisruptionBudget (minAvailable ${pdb.minAvailable}, maxUnavailable ${pdb.maxUnavailable}) ` +
  `with ${sts.spec.replicas} replica(s)`);

finish();

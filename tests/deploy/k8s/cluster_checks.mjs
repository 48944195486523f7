// Consistency checks of the rendered cluster overlay (deploy/k8s/cluster): the NATS StatefulSet,
// the graphbandit replicas' `cluster` configuration and the HAProxy load balancer must point at
// each other with the same names and ports. tests/deploy/k8s_test.sh runs it after checks.mjs
// (which checks the graphbandit StatefulSet itself against the server's flags).
//
// usage: node cluster_checks.mjs RENDERED.yaml OUT_DIR
// Writes OUT_DIR/nats.conf, OUT_DIR/haproxy.cfg, OUT_DIR/models.map (the ConfigMap entries) and
// OUT_DIR/cluster.json (ports and paths) for tests/deploy/k8s_cluster_run.py, which runs the real
// nats-server, graphbandit-server and haproxy with them. Exits 1 if any check failed.
import { writeFileSync } from "node:fs";
import { posix } from "node:path";
import { check, finish, loadArguments, matches } from "./checking.mjs";

const { objects, outDir } = loadArguments("cluster_checks.mjs");
const named = (kind, name) => objects.find((o) => o.kind === kind && o.metadata?.name === name);
const portsOf = (container) =>
  Object.fromEntries((container?.ports ?? []).map((p) => [p.name, p.containerPort]));
// The file a container sees at PATH: the ConfigMap mounted at its directory, and its key.
function mountedFile(podSpec, container, path) {
  const mount = (container?.volumeMounts ?? []).find((m) => m.mountPath === posix.dirname(path));
  const volume = (podSpec?.volumes ?? []).find((v) => v.name === mount?.name);
  const cm = volume?.configMap && named("ConfigMap", volume.configMap.name);
  return cm?.data?.[posix.basename(path)];
}
const envOf = (container) => Object.fromEntries((container?.env ?? []).map((e) => [e.name, e]));

// --- NATS ------------------------------------------------------------------------------------
const nats = named("StatefulSet", "nats");
check(!!nats, "no StatefulSet named nats");
if (!nats) finish();
const natsReplicas = nats.spec.replicas;
check(natsReplicas === 3, `NATS has ${natsReplicas} servers: JetStream's Raft needs 3 to survive the loss of one`);
const natsPod = nats.spec.template;
const natsContainer = (natsPod.spec.containers ?? []).find((c) => c.name === "nats");
check(!!natsContainer, "no container named nats");
const natsPorts = portsOf(natsContainer);
const natsService = named("Service", nats.spec.serviceName);
check(natsService?.spec?.clusterIP === "None", `the NATS governing Service ${nats.spec.serviceName} is not headless`);
check(natsService?.spec?.publishNotReadyAddresses === true,
  "the NATS Service must publish servers that are not ready yet, or the cluster cannot form");
check(matches(natsService?.spec?.selector, natsPod.metadata?.labels), "the NATS Service does not select the NATS pods");
check(matches(nats.spec.selector?.matchLabels, natsPod.metadata?.labels), "the NATS StatefulSet's selector does not match its pods");
const args = natsContainer?.args ?? [];
const configPath = args[args.indexOf("--config") + 1];
check(args.includes("--config") && !!configPath, `nats is not started with --config FILE: ${args.join(" ")}`);
const natsConf = mountedFile(natsPod.spec, natsContainer, configPath ?? "");
check(typeof natsConf === "string", `no ConfigMap provides ${configPath}`);
const conf = natsConf ?? "";
const setting = (name, text = conf) => new RegExp(`^\\s*${name}\\s*[:=]\\s*(\\S+)`, "m").exec(text)?.[1];
const clusterBlock = /^cluster\s*\{([\s\S]*?)^\}/m.exec(conf)?.[1] ?? "";
const jsBlock = /^jetstream\s*\{([\s\S]*?)^\}/m.exec(conf)?.[1];
check(jsBlock !== undefined, "JetStream is not enabled in nats.conf");
check(Number(setting("port")) === natsPorts.client, `nats.conf port ${setting("port")} != container port "client" ${natsPorts.client}`);
check(Number(setting("http_port")) === natsPorts.monitor, `nats.conf http_port != container port "monitor" ${natsPorts.monitor}`);
check(Number(setting("port", clusterBlock)) === natsPorts.cluster, `nats.conf cluster port != container port "cluster" ${natsPorts.cluster}`);
// Each server is named after its pod, and the routes list every pod by its stable DNS name.
check(setting("server_name") === "$POD_NAME", "nats.conf server_name is not $POD_NAME");
check(envOf(natsContainer).POD_NAME?.valueFrom?.fieldRef?.fieldPath === "metadata.name",
  "POD_NAME is not the pod's name (downward API)");
const routes = [...clusterBlock.matchAll(/nats:\/\/([^\s,\]]+)/g)].map((m) => m[1]).sort();
const expectedRoutes = [...Array(natsReplicas).keys()]
  .map((i) => `${nats.metadata.name}-${i}.${nats.spec.serviceName}:${natsPorts.cluster}`).sort();
check(JSON.stringify(routes) === JSON.stringify(expectedRoutes),
  `nats.conf routes ${routes.join(", ")} are not the StatefulSet's pods ${expectedRoutes.join(", ")}`);
// JetStream's store on the pod's claim; the pid file (lame duck mode) on a writable volume.
const natsMounts = natsContainer?.volumeMounts ?? [];
const storeDir = setting("store_dir", jsBlock ?? "");
const storeMount = natsMounts.find((m) => m.mountPath === storeDir);
check(!!storeMount && (nats.spec.volumeClaimTemplates ?? []).some((t) => t.metadata?.name === storeMount.name),
  `JetStream's store_dir ${storeDir} is not on a volume claim`);
const pidFile = setting("pid_file");
check(natsMounts.some((m) => m.mountPath === posix.dirname(pidFile ?? "") && !m.readOnly),
  `the pid file ${pidFile} is not on a writable volume (the root filesystem is read-only)`);
const ldm = (natsContainer?.lifecycle?.preStop?.exec?.command ?? []).join(" ");
check(ldm.includes(`ldm=${pidFile}`), `the preStop hook does not signal lame duck mode through ${pidFile}`);
const ldmSeconds = Number(/^(\d+)s$/.exec(setting("lame_duck_duration") ?? "")?.[1]);
check(natsPod.spec.terminationGracePeriodSeconds > ldmSeconds,
  `terminationGracePeriodSeconds ${natsPod.spec.terminationGracePeriodSeconds} is not above lame_duck_duration ${ldmSeconds}s`);
for (const probe of ["startupProbe", "readinessProbe", "livenessProbe"]) {
  const p = natsContainer?.[probe]?.httpGet;
  check(p && (p.port === "monitor" || p.port === natsPorts.monitor) && p.path?.startsWith("/healthz"),
    `NATS ${probe} is not /healthz on the monitoring port`);
}
// Liveness must not fail because other servers are down or a stream is catching up (that is
// what plain /healthz reports): restarting the survivors would make an outage worse.
check(natsContainer?.livenessProbe?.httpGet?.path === "/healthz?js-enabled-only=true",
  "the NATS liveness probe is not /healthz?js-enabled-only=true");
const natsPdb = objects.find((o) => o.kind === "PodDisruptionBudget" && matches(o.spec?.selector?.matchLabels, natsPod.metadata?.labels));
check(natsPdb?.spec?.minAvailable === Math.floor(natsReplicas / 2) + 1,
  `the NATS PodDisruptionBudget does not keep a quorum (${natsPdb?.spec?.minAvailable} of ${natsReplicas})`);

// --- graphbandit replicas: their `cluster` block points at the NATS servers -----------------------
const sts = named("StatefulSet", "graphbandit");
const serverPod = sts?.spec?.template;
const server = (serverPod?.spec?.containers ?? []).find((c) => c.name === "graphbandit");
const flag = (name) => (server?.args ?? []).find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
const serverConfig = mountedFile(serverPod?.spec, server, flag("config") ?? "") ?? "";
const cluster = /^cluster\s*\{([\s\S]*?)^\}/m.exec(serverConfig)?.[1];
check(cluster !== undefined, "the graphbandit configuration has no cluster block");
const natsServers = [...(cluster ?? "").matchAll(/"nats:\/\/([^"]+)"/g)].map((m) => m[1]).sort();
const expectedServers = [...Array(natsReplicas).keys()]
  .map((i) => `${nats.metadata.name}-${i}.${nats.spec.serviceName}:${natsPorts.client}`).sort();
check(JSON.stringify(natsServers) === JSON.stringify(expectedServers),
  `cluster.nats_servers ${natsServers.join(", ")} are not the NATS pods ${expectedServers.join(", ")}`);
check(!/^\s*node_id\s*:/m.test(cluster ?? ""),
  "cluster.node_id is set: every replica would get the same id; leave it to the pod's host name");
const streamReplicas = Number(setting("replicas", cluster ?? "") ?? 3);
check(streamReplicas === natsReplicas, `cluster.replicas ${streamReplicas} != the ${natsReplicas} NATS servers`);

// --- HAProxy: finds the ready replicas and speaks HTTP/2 to them ---------------------------------
const ready = named("Service", "graphbandit-ready");
check(ready?.spec?.clusterIP === "None", "graphbandit-ready is not a headless Service");
check(ready?.spec?.publishNotReadyAddresses !== true, "graphbandit-ready publishes replicas that are not ready");
check(matches(ready?.spec?.selector, serverPod?.metadata?.labels), "graphbandit-ready does not select the graphbandit replicas");
const readyGrpc = (ready?.spec?.ports ?? []).find((p) => p.name === "grpc");
check(!!readyGrpc && (readyGrpc.targetPort === "grpc" || readyGrpc.targetPort === portsOf(server).grpc),
  "graphbandit-ready has no port named grpc on the replicas' gRPC port (HAProxy looks up its SRV record)");
const proxy = named("Deployment", "graphbandit-proxy");
check(!!proxy, "no Deployment named graphbandit-proxy");
const proxyPod = proxy?.spec?.template;
const haproxy = (proxyPod?.spec?.containers ?? []).find((c) => c.name === "haproxy");
check((proxy?.spec?.replicas ?? 1) >= 2, "one proxy pod is a single point of failure");
check(!matches(serverPod?.metadata?.labels, proxyPod?.metadata?.labels) &&
  !matches(sts?.spec?.selector?.matchLabels, proxyPod?.metadata?.labels),
  "the proxy pods carry the replicas' labels: the replicas' Services would send calls to them");
const haArgs = haproxy?.args ?? [];
const cfgPath = haArgs[haArgs.indexOf("-f") + 1];
const cfg = mountedFile(proxyPod?.spec, haproxy, cfgPath ?? "") ?? "";
check(cfg.length > 0, `no ConfigMap provides HAProxy's ${cfgPath}`);
const template = /^\s*server-template\s+\S+\s+(\d+)\s+"([^"]+)"(.*)$/m.exec(cfg);
check(!!template, "haproxy.cfg has no server-template for the replicas");
const srv = template?.[2] ?? "";
check(srv === `_grpc._tcp.${ready?.metadata?.name}.\${POD_NAMESPACE}.svc.\${CLUSTER_DOMAIN}`,
  `server-template resolves ${srv}, not the SRV records of graphbandit-ready`);
check(Number(template?.[1]) >= sts?.spec?.replicas, "server-template has fewer slots than replicas");
check(/\bproto h2\b/.test(template?.[3] ?? "") && /\bresolvers\s+\S+/.test(template?.[3] ?? ""),
  "server-template does not speak HTTP/2 (gRPC) to the replicas or has no resolvers");
const env = envOf(haproxy);
check(env.POD_NAMESPACE?.valueFrom?.fieldRef?.fieldPath === "metadata.namespace", "POD_NAMESPACE is not the pod's namespace");
check(!!env.CLUSTER_DOMAIN?.value, "CLUSTER_DOMAIN is not set");
const proxyPorts = portsOf(haproxy);
const bind = /^frontend\s+grpc\s*\n\s*bind\s+:(\d+)\s+proto h2/m.exec(cfg);
check(!!bind && Number(bind[1]) === proxyPorts.grpc, `HAProxy's gRPC frontend does not bind HTTP/2 on container port grpc ${proxyPorts.grpc}`);
const mapPath = /map\(([^,)]+)/.exec(cfg)?.[1];
check(typeof mountedFile(proxyPod?.spec, haproxy, mapPath ?? "") === "string", `no ConfigMap provides the model map ${mapPath}`);
check(/use_backend\s+%\[req\.hdr\(x-graphbandit-model\)/.test(cfg), "HAProxy does not route by the x-graphbandit-model header");
const retryOn = [...cfg.matchAll(/^\s*retry-on\s+(.*)$/gm)].flatMap((m) => m[1].split(/\s+/));
check(retryOn.length > 0 && retryOn.every((t) => t === "conn-failure"),
  `HAProxy resends calls that may have reached a replica (retry-on ${retryOn.join(" ")}: only conn-failure is safe)`);
const monitor = /^frontend\s+monitoring\s*\n\s*bind\s+:(\d+)/m.exec(cfg);
for (const probe of ["readinessProbe", "livenessProbe"]) {
  const p = haproxy?.[probe]?.httpGet;
  check(p?.path === "/healthz" && (p?.port === "monitoring" || p?.port === Number(monitor?.[1])) &&
    proxyPorts.monitoring === Number(monitor?.[1]), `the proxy's ${probe} is not /healthz on the monitoring frontend`);
}
const proxyService = named("Service", "graphbandit-proxy");
check(matches(proxyService?.spec?.selector, proxyPod?.metadata?.labels), "Service graphbandit-proxy does not select the proxy pods");
check((proxyService?.spec?.ports ?? []).some((p) => p.targetPort === "grpc" && p.port === 50051),
  "Service graphbandit-proxy does not expose gRPC on 50051");

writeFileSync(posix.join(outDir, "nats.conf"), conf);
writeFileSync(posix.join(outDir, "haproxy.cfg"), cfg);
writeFileSync(posix.join(outDir, "models.map"), mountedFile(proxyPod?.spec, haproxy, mapPath ?? "") ?? "");
writeFileSync(posix.join(outDir, "cluster.json"), JSON.stringify({
  nats_replicas: natsReplicas, nats_ports: natsPorts, nats_service: nats.spec.serviceName,
  nats_name: nats.metadata.name, map_path: mapPath, proxy_ports: proxyPorts,
  replicas: sts?.spec?.replicas,
}, null, 2));
finish();

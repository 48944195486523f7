#!/usr/bin/python3
"""The cluster overlay's rendered configurations, run by the real programs on loopback.

tests/deploy/k8s_test.sh renders deploy/k8s/cluster and extracts its ConfigMaps
(cluster_checks.mjs); this script then starts, from those files:

  * three nats-server with the rendered nats.conf (`nats-server -t` first), each with its pod
    name in POD_NAME; only the addresses move to 127.0.0.1 and the paths to a temporary
    directory (the routes nats-K.nats:6222 become the loopback ports);
  * two graphbandit-server replicas with the container's arguments and the rendered
    graphbandit.textproto, its nats_servers moved to the loopback ports and a node_id per replica
    (on Kubernetes each pod's host name differs; here both share one);
  * haproxy with the rendered haproxy.cfg (`haproxy -c` on it as rendered first), its DNS
    server-template then replaced
    by the two replicas' loopback addresses (there is no cluster DNS here) and its binds moved to
    loopback.

Then, through HAProxy, over two client connections (one without the model header, for the
default model, one with it): the calls reach both replicas (HAProxy balances calls, not
connections); a model no replica hosts gets NOT_FOUND from a replica; every acknowledged reward is
learned once on both replicas; after a replica is killed with SIGKILL, calls go to the other (at
most 2 of 40 need a client retry); HAProxy's /healthz and /metrics answer on the monitoring
frontend. Every process is stopped by its PID.

usage: k8s_cluster_run.py OUT_DIR BUILD_DIR   (OUT_DIR: what cluster_checks.mjs and checks.mjs
wrote: nats.conf, haproxy.cfg, models.map, cluster.json, args, config.textproto)
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request


_ISSUED_PORTS = set()


def free_ports(n):
    """n loopback ports free right now and never handed out before in this run.

    The kernel may give a port that was bound and closed here again, so two calls (for
    example gRPC ports, then metrics ports) could otherwise return the same port and one
    process would fail to bind it."""
    sockets, ports = [], []
    while len(ports) < n:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        sockets.append(s)
        port = s.getsockname()[1]
        if port not in _ISSUED_PORTS:
            _ISSUED_PORTS.add(port)
            ports.append(port)
    for s in sockets:
        s.close()
    return ports


def wait_port(port, seconds, proc=None):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.1)
    return False


def http_get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
        return response.status, response.read().decode(errors="replace")


def sub(pattern, replacement, text, what, flags=re.M):
    result, count = re.subn(pattern, replacement, text, flags=flags)
    if count == 0:
        raise AssertionError(f"the rendered {what} no longer has {pattern!r}: update this test")
    return result


def main():
    out, build = sys.argv[1], sys.argv[2]
    sys.path.insert(0, os.path.join(build, "python"))
    from graphbandit import Client, GraphbanditError, bandit_pb2

    with open(os.path.join(out, "cluster.json")) as f:
        layout = json.load(f)
    work = tempfile.mkdtemp(prefix="graphbandit-k8s-cluster-")
    procs = {}

    def start(name, command, env=None):
        log = open(os.path.join(work, name + ".log"), "ab")
        procs[name] = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, env=env)
        log.close()
        return procs[name]

    def tail(name):
        try:
            with open(os.path.join(work, name + ".log"), errors="replace") as f:
                return "".join(f.readlines()[-15:])
        except OSError:
            return ""

    failed = []
    try:
        # --- NATS: the rendered nats.conf, addresses on loopback ------------------------------
        with open(os.path.join(out, "nats.conf")) as f:
            nats_conf = f.read()
        n = layout["nats_replicas"]
        ports = layout["nats_ports"]
        client_ports, route_ports, http_ports = free_ports(n), free_ports(n), free_ports(n)
        env = dict(os.environ, POD_NAME=f"{layout['nats_name']}-0")
        check = subprocess.run(["nats-server", "-t", "-c", os.path.join(out, "nats.conf")],
                               env=env, capture_output=True, text=True)
        if check.returncode != 0:
            raise AssertionError(f"nats-server -t refuses the rendered nats.conf: {check.stderr}")
        print("ok   nats-server -t accepts the rendered nats.conf")
        for i in range(n):
            conf = sub(rf"^port:\s*{ports['client']}$", f"host: 127.0.0.1\nport: {client_ports[i]}",
                       nats_conf, "nats.conf")
            conf = sub(rf"^http_port:\s*{ports['monitor']}$", f"http: 127.0.0.1:{http_ports[i]}",
                       conf, "nats.conf")
            conf = sub(r"^(\s*)port:\s*%d$" % ports["cluster"],
                       rf"\1host: 127.0.0.1\n\1port: {route_ports[i]}", conf, "nats.conf")
            for k in range(n):
                conf = sub(rf"nats://{layout['nats_name']}-{k}\.{layout['nats_service']}:"
                           rf"{ports['cluster']}\b", f"nats://127.0.0.1:{route_ports[k]}", conf,
                           "nats.conf")
            conf = sub(r"^(\s*)store_dir:.*$", rf"\1store_dir: {work}/nats{i}", conf, "nats.conf")
            conf = sub(r"^pid_file:.*$", f"pid_file: {work}/nats{i}.pid", conf, "nats.conf")
            path = os.path.join(work, f"nats{i}.conf")
            with open(path, "w") as f:
                f.write(conf)
            start(f"nats{i}", ["nats-server", "-c", path],
                  env=dict(os.environ, POD_NAME=f"{layout['nats_name']}-{i}"))
        for i in range(n):
            if not wait_port(client_ports[i], 20, procs[f"nats{i}"]):
                raise AssertionError(f"nats{i} did not start:\n{tail(f'nats{i}')}")

        # --- two graphbandit replicas: the container's arguments, the rendered configuration ---
        with open(os.path.join(out, "config.textproto")) as f:
            config = f.read()
        for k in range(n):
            config = sub(rf'"nats://{layout["nats_name"]}-{k}\.{layout["nats_service"]}:'
                         rf'{ports["client"]}"', f'"nats://127.0.0.1:{client_ports[k]}"', config,
                         "graphbandit.textproto")
        with open(os.path.join(out, "args")) as f:
            args = f.read().split()
        grpc_ports, metrics_ports = free_ports(2), free_ports(2)
        server = os.path.join(build, "server", "graphbandit-server")
        for r in range(2):
            replica_config = sub(r"^cluster\s*\{", f'cluster {{\n  node_id: "graphbandit-{r}"',
                                 config, "graphbandit.textproto")
            path = os.path.join(work, f"replica{r}.textproto")
            with open(path, "w") as f:
                f.write(replica_config)
            command = [server]
            for a in args:
                name = a.split("=", 1)[0]
                command.append({
                    "--listen": f"--listen=127.0.0.1:{grpc_ports[r]}",
                    "--metrics_listen": f"--metrics_listen=127.0.0.1:{metrics_ports[r]}",
                    "--state_dir": f"--state_dir={work}/state{r}",
                    "--config": f"--config={path}",
                }.get(name, a))
            start(f"replica{r}", command)
        for r in range(2):
            if not wait_port(grpc_ports[r], 60, procs[f"replica{r}"]):
                raise AssertionError(f"replica{r} did not start:\n{tail(f'replica{r}')}")
        print("ok   two replicas started with the rendered configuration on the rendered NATS")

        # --- HAProxy: the rendered haproxy.cfg, the replicas instead of DNS -------------------
        with open(os.path.join(out, "haproxy.cfg")) as f:
            cfg = f.read()
        proxy_port, monitor_port = free_ports(2)
        pp = layout["proxy_ports"]
        cfg = sub(rf"^(\s*)bind :{pp['grpc']}\b", rf"\1bind 127.0.0.1:{proxy_port}", cfg,
                  "haproxy.cfg")
        cfg = sub(rf"^(\s*)bind :{pp['monitoring']}\b", rf"\1bind 127.0.0.1:{monitor_port}", cfg,
                  "haproxy.cfg")
        shutil.copy(os.path.join(out, "models.map"), os.path.join(work, "models.map"))
        cfg = cfg.replace(layout["map_path"], os.path.join(work, "models.map"))
        haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
        henv = dict(os.environ, POD_NAMESPACE="test", CLUSTER_DOMAIN="cluster.local")
        # The rendered file as it is (only the map's path moved): the DNS server-template, its
        # environment variables and resolvers section must pass HAProxy's own check.
        path = os.path.join(work, "haproxy-rendered.cfg")
        with open(path, "w") as f:
            f.write(cfg)
        check = subprocess.run([haproxy, "-c", "-f", path], env=henv, capture_output=True,
                               text=True)
        if check.returncode != 0:
            raise AssertionError(f"haproxy -c refuses the rendered haproxy.cfg:\n{check.stdout}"
                                 f"{check.stderr}")
        print("ok   haproxy -c accepts the rendered haproxy.cfg (with its DNS server-template)")
        cfg = sub(r'^(\s*)server-template (\S+) \d+ "[^"]+" resolvers \S+ init-addr none (.*)$',
                  lambda m: "".join(f"{m.group(1)}server {m.group(2)}{r} 127.0.0.1:{p} "
                                    f"{m.group(3)}\n" for r, p in enumerate(grpc_ports)),
                  cfg, "haproxy.cfg")
        path = os.path.join(work, "haproxy.cfg")
        with open(path, "w") as f:
            f.write(cfg)
        start("haproxy", [haproxy, "-W", "-db", "-f", path], env=henv)
        if not wait_port(proxy_port, 10, procs["haproxy"]):
            raise AssertionError(f"haproxy did not start:\n{tail('haproxy')}")
        status, _ = http_get(monitor_port, "/healthz")
        if status != 200:
            raise AssertionError(f"HAProxy /healthz answered {status}")
        print("ok   haproxy runs the rendered haproxy.cfg; /healthz answers 200")

        target = f"127.0.0.1:{proxy_port}"
        retryable = ("UNAVAILABLE", "DEADLINE_EXCEEDED")

        retried = []

        def retry(fn, seconds=20):
            end = time.time() + seconds
            while True:
                try:
                    return fn()
                except GraphbanditError as e:
                    if e.code.name not in retryable or time.time() > end:
                        raise
                    retried.append(e.code.name)
                    time.sleep(0.2)

        acknowledged = set()
        # One connection for both kinds of call: the default model without the header, and
        # the same model named (the header).
        with Client(target, timeout=10) as plain, Client(target, timeout=10,
                                                         model="default") as named:
            retry(lambda: named.add_edges([("u0", "u1", 1.0), ("u1", "u2", 1.0)]))
            for i in range(40):
                client = plain if i % 2 else named
                d = retry(lambda: client.select(f"u{i % 3}", [("a", [0.1, 0.2]), ("b", [0.5, 0.1])],
                                                event_id=f"k8s-{i}"))
                a = retry(lambda: client.reward(d.event_id, 1.0 if d.arms[0].arm_id == "a" else 0.0))
                if a.outcome not in (bandit_pb2.ACCEPTED, bandit_pb2.DUPLICATE):
                    failed.append(f"reward {d.event_id}: {bandit_pb2.RewardOutcome.Name(a.outcome)}")
                acknowledged.add(d.event_id)
            try:
                named.describe_model(model="nosuchmodel")
                failed.append("a model no replica hosts was served")
            except GraphbanditError as e:
                if e.code.name != "NOT_FOUND":
                    failed.append(f"a model no replica hosts: {e.code.name}, not NOT_FOUND")
                else:
                    print(f"ok   a model no replica hosts: NOT_FOUND ({e.message})")

        # Both replicas served calls that came over the same client connections (HAProxy
        # balances calls, not connections).
        served = []
        for r in range(2):
            _, text = http_get(metrics_ports[r], "/metrics")
            served.append(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                              if line.startswith("graphbandit_rpc_requests_total{")
                              and ('method="SelectArm"' in line or 'method="ReportReward"' in line)))
        if sum(served) < 80 or min(served) < 0.25 * sum(served):
            failed.append(f"HAProxy did not spread the calls: SelectArm and ReportReward calls "
                          f"per replica {served}")
        else:
            print(f"ok   HAProxy spread the calls of two connections over both replicas: "
                  f"SelectArm and ReportReward calls per replica {served}")

        def learned(r):
            with Client(f"127.0.0.1:{grpc_ports[r]}", timeout=10) as c:
                return c.describe_model().rewards_learned

        deadline = time.time() + 30
        while time.time() < deadline and [learned(r) for r in range(2)] != [len(acknowledged)] * 2:
            time.sleep(0.2)
        counts = [learned(r) for r in range(2)]
        if counts != [len(acknowledged)] * 2:
            failed.append(f"replicas learned {counts}, {len(acknowledged)} acknowledged")
        else:
            print(f"ok   both replicas learned the {len(acknowledged)} acknowledged rewards")

        # One replica killed: HAProxy resends what it could not deliver to the other, and its
        # health checks take the dead one out within a second or two.
        procs["replica0"].send_signal(signal.SIGKILL)
        procs["replica0"].wait()
        retried.clear()
        with Client(target, timeout=10) as client:
            for i in range(20):
                d = retry(lambda: client.select("u1", [("a", [0.1, 0.2])], event_id=f"k8s-after-{i}"))
                retry(lambda: client.reward(d.event_id, 1.0))
        if len(retried) > 2:
            failed.append(f"with a replica killed, {len(retried)} of 40 calls through HAProxy "
                          f"failed first ({retried}): it does not send them to the live replica")
        else:
            print(f"ok   with a replica killed, calls through HAProxy succeed ({len(retried)} of "
                  "40 needed a client retry)")
        _, text = http_get(monitor_port, "/metrics")
        if "haproxy_backend_http_responses_total" not in text:
            failed.append("HAProxy's /metrics has no backend counters")
        else:
            print("ok   HAProxy exports Prometheus metrics on /metrics")
    except Exception as e:  # noqa: BLE001 - reported below
        failed.append(f"{type(e).__name__}: {e}")
    finally:
        # The proxy, then the replicas, then NATS (which the replicas still write to).
        for name, proc in reversed(list(procs.items())):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if failed:
            for name in procs:
                print(f"--- {name} ---\n{tail(name)}")
            print(f"logs in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    for f in failed:
        print(f"FAIL: {f}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Cluster mode end to end on loopback (`tools/dev.sh cluster-test`).

Starts three nats-server with JetStream (one cluster), three graphbandit-server nodes serving the
same model in cluster mode, and nginx in front of them (grpc_pass over the three, chosen by the
x-graphbandit-model header as in deploy/cluster/nginx.conf). Drives a
learnable task through the proxy with the Python client: worker threads decide, reward each
decision (retrying a call that failed with a retryable status, with the same event id), and
record what they saw. During the run it kills one graphbandit node with SIGKILL and restarts it,
then kills one NATS server with SIGKILL and restarts it (or, with --rounds=N, N rounds of random
such faults, sometimes two processes at once). Afterwards it checks:

  * every node reports the same model version and the same number of learned rewards, equal to
    the rewards acknowledged to the clients (each learned exactly once);
  * the same probe decision scores identically on every node;
  * the clients saw only retryable status codes (UNAVAILABLE, DEADLINE_EXCEEDED);
  * regret fell: the mean regret of the last third of the decisions is below that of the first
    third and below a uniform random choice's.

Everything listens on 127.0.0.1; every process it starts is stopped by its PID at the end.
Run from the repository root after building (GRAPHBANDIT_BUILD_DIR, default build/).
"""

import argparse
import math
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

MODEL_CONFIG = """
cluster {{
  node_id: "{node}"
  nats_servers: [{servers}]
  stream_prefix: "gbcluster"
}}
durability {{ snapshot_every_records: 3000 }}
default_model: "news"
models {{
  name: "news"
  ledger {{ reward_window_seconds: 600 }}
}}
"""

NGINX_CONFIG = """
worker_processes 1;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/nginx-error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {dir}/nginx-body;
  proxy_temp_path {dir}/nginx-proxy;
  fastcgi_temp_path {dir}/nginx-fastcgi;
  uwsgi_temp_path {dir}/nginx-uwsgi;
  scgi_temp_path {dir}/nginx-scgi;
{upstream}
  # As deploy/cluster/nginx.conf: the model header picks the group of nodes. Calls without it
  # go nowhere, so the test fails unless the clients name the model.
  upstream nowhere {{
    server 127.0.0.1:1;
  }}
  map $http_x_graphbandit_model $graphbandit_upstream {{
    default nowhere;
    "news" graphbandit;
  }}
  server {{
    listen 127.0.0.1:{port} http2;
    location / {{
      grpc_pass grpc://$graphbandit_upstream;
      # A node that is down refuses the connection: the call goes to the next node (gRPC
      # statuses travel as trailers and are the client's to retry).
      grpc_next_upstream error timeout;
      grpc_next_upstream_tries 3;
      grpc_connect_timeout 1s;
      grpc_read_timeout 30s;
      grpc_send_timeout 30s;
      # When no node answers, nginx's own error becomes the gRPC status UNAVAILABLE (instead of
      # an HTML page the client cannot parse).
      error_page 502 504 = /grpc-unavailable;
    }}
    location = /grpc-unavailable {{
      internal;
      default_type application/grpc;
      add_header grpc-status 14 always;
      add_header grpc-message "no graphbandit node answered" always;
      return 204;
    }}
  }}
}}
"""

RETRYABLE = {"UNAVAILABLE", "DEADLINE_EXCEEDED"}
MODEL = "news"
ARMS = 8
USERS = 24


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


def wait_port(port, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.1)
    return False


class Processes:
    """Every process this test starts, by name; all are stopped by PID at the end."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.procs = {}
        self.commands = {}

    def start(self, name, command):
        self.commands[name] = command
        log = open(os.path.join(self.workdir, name + ".log"), "ab")
        self.procs[name] = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL)
        log.close()
        return self.procs[name]

    def restart(self, name):
        return self.start(name, self.commands[name])

    def kill(self, name, sig=signal.SIGKILL):
        proc = self.procs.get(name)
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, sig)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()

    def stop_all(self):
        for name in list(self.procs):
            self.kill(name, signal.SIGTERM)

    def tail(self, name, lines=20):
        try:
            with open(os.path.join(self.workdir, name + ".log"), errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""


def start_nats(procs, workdir):
    """Three nats-server with JetStream in one cluster, on loopback; returns their client URLs
    as a quoted, comma-separated list for the configuration's nats_servers."""
    client, route = free_ports(3), free_ports(3)
    routes = ",".join(f"nats://127.0.0.1:{p}" for p in route)
    for i in range(3):
        procs.start(f"nats{i}", [
            "nats-server", "-a", "127.0.0.1", "-p", str(client[i]), "-n", f"n{i}", "-js",
            "-sd", os.path.join(workdir, f"nats{i}"), "--cluster_name", "graphbandit",
            "--cluster", f"nats://127.0.0.1:{route[i]}", "--routes", routes])
    for i in range(3):
        if not wait_port(client[i], 20):
            raise RuntimeError(f"nats-server {i} did not start:\n{procs.tail(f'nats{i}')}")
    return ", ".join(f'"nats://127.0.0.1:{p}"' for p in client)


def start_nginx(procs, workdir, grpc_ports, default_upstream="nowhere"):
    """nginx in front of the nodes (NGINX_CONFIG); calls without the model header go to
    `default_upstream` ("nowhere", or "graphbandit": the nodes). Returns its address."""
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    (port,) = free_ports(1)
    upstream = "  upstream graphbandit {\n" + "".join(
        f"    server 127.0.0.1:{p} max_fails=1 fail_timeout=2s;\n" for p in grpc_ports) + \
        "    keepalive 32;\n  }\n"
    conf = os.path.join(workdir, "nginx.conf")
    with open(conf, "w") as f:
        f.write(NGINX_CONFIG.format(dir=workdir, upstream=upstream, port=port)
                .replace("default nowhere;", f"default {default_upstream};"))
    procs.start("nginx", [nginx, "-p", workdir, "-c", conf, "-e",
                          os.path.join(workdir, "nginx-error.log")])
    if not wait_port(port, 10):
        raise RuntimeError(f"nginx did not start:\n{procs.tail('nginx')}")
    return f"127.0.0.1:{port}"


def true_reward(user, features):
    # Non-linear in the arm, shifted per user group (users of a group share the graph's edges).
    group = user % 3
    x, y = features
    return math.sin(3.0 * x + group) * math.cos(2.0 * y) + 0.3 * (group - 1) * x


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.acknowledged = set()
        self.unresolved = 0          # rewards given up on after retries (outcome unknown)
        self.errors = {}             # status code name -> count
        self.regrets = []            # (time, regret) per decision
        self.latency = {"select": [], "reward": []}  # seconds per answered call, retries included
        self.decisions = 0

    def error(self, code):
        with self.lock:
            self.errors[code] = self.errors.get(code, 0) + 1


def call_with_retries(stats, fn, deadline_s=20.0):
    """Calls fn() until it succeeds or fails with a non-retryable status; returns the response,
    or None after retrying until the deadline."""
    from graphbandit import GraphbanditError
    end = time.time() + deadline_s
    while True:
        try:
            return fn()
        except GraphbanditError as e:
            name = e.code.name if hasattr(e.code, "name") else str(e.code)
            stats.error(name)
            if name not in RETRYABLE or time.time() > end:
                if name not in RETRYABLE:
                    raise
                return None
            time.sleep(0.1)


def worker(index, target, stop, stats, rng_seed):
    from graphbandit import Client, bandit_pb2
    rng = random.Random(rng_seed)
    client = Client(target, timeout=5, model=MODEL)
    i = 0
    try:
        while not stop.is_set():
            i += 1
            user = rng.randrange(USERS)
            candidates = [(f"arm{a}", [rng.uniform(-1, 1), rng.uniform(-1, 1)]) for a in range(ARMS)]
            event_id = f"w{index}-{i}"
            began = time.time()
            decision = call_with_retries(
                stats, lambda: client.select(f"user{user}", candidates, event_id=event_id))
            if decision is None:
                continue
            selected = time.time()
            chosen = int(decision.arms[0].arm_id[3:])
            values = [true_reward(user, f) for _, f in candidates]
            reward = values[chosen] + rng.gauss(0, 0.1)
            answer = call_with_retries(stats, lambda: client.reward(decision.event_id, reward))
            rewarded = time.time()
            with stats.lock:
                stats.latency["select"].append(selected - began)
                stats.latency["reward"].append(rewarded - selected)
                stats.decisions += 1
                stats.regrets.append((time.time(), max(values) - values[chosen]))
                if answer is None:
                    stats.unresolved += 1
                elif answer.outcome in (bandit_pb2.ACCEPTED, bandit_pb2.DUPLICATE):
                    stats.acknowledged.add(decision.event_id)
                else:
                    stats.error("OUTCOME_" + bandit_pb2.RewardOutcome.Name(answer.outcome))
    finally:
        client.close()


def scrape(port):
    """The node's metrics for the default model, by name (first sample of each)."""
    import urllib.request
    values = {}
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("#") or f'model="{MODEL}"' not in line:
                continue
            name = line.split("{", 1)[0]
            values.setdefault(name, float(line.rsplit(" ", 1)[1]))
    return values


def describe(port):
    from graphbandit import Client
    with Client(f"127.0.0.1:{port}", timeout=10, model=MODEL) as client:
        return client.describe_model()


def probe(port, tag):
    from graphbandit import Client
    candidates = [("p0", [0.2, -0.4]), ("p1", [-0.7, 0.1]), ("p2", [0.9, 0.9])]
    with Client(f"127.0.0.1:{port}", timeout=10, model=MODEL) as client:
        decision = client.select("user1", candidates, k=3, event_id=f"probe-{tag}")
        return sorted((a.arm_id, a.mean, a.stddev) for a in decision.arms)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build_dir", default=os.environ.get("GRAPHBANDIT_BUILD_DIR", "build"))
    parser.add_argument("--seconds", type=float, default=60.0, help="load duration")
    parser.add_argument("--workers", type=int, default=6)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--rounds", type=int, default=0,
                        help="instead of the fixed faults, this many rounds of random ones: each "
                             "kills one or two processes (nodes, at most one NATS server) with "
                             "SIGKILL and restarts them a moment later")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed of the random faults (default: printed, from the clock)")
    args = parser.parse_args()

    build = os.path.abspath(args.build_dir)
    server = os.path.join(build, "server", "graphbandit-server")
    sys.path.insert(0, os.path.join(build, "python"))
    for binary in (server, shutil.which("nats-server"), shutil.which("nginx") or "/usr/sbin/nginx"):
        if binary is None or not os.path.exists(binary):
            sys.exit(f"cluster-test: missing {binary}: run tools/dev.sh build (and deps)")

    workdir = tempfile.mkdtemp(prefix="graphbandit-cluster-")
    procs = Processes(workdir)
    failures = []
    try:
        servers = start_nats(procs, workdir)

        grpc_ports, metrics_ports = free_ports(3), free_ports(3)
        for i in range(3):
            config = os.path.join(workdir, f"node{i}.textproto")
            with open(config, "w") as f:
                f.write(MODEL_CONFIG.format(node=f"node{i}", servers=servers))
            procs.start(f"node{i}", [
                server, f"--listen=127.0.0.1:{grpc_ports[i]}",
                f"--metrics_listen=127.0.0.1:{metrics_ports[i]}",
                f"--state_dir={os.path.join(workdir, f'state{i}')}", f"--config={config}"])
        for i in range(3):
            if not wait_port(grpc_ports[i], 60):
                raise RuntimeError(f"node {i} did not start:\n{procs.tail(f'node{i}')}")

        target = start_nginx(procs, workdir, grpc_ports)

        # The user graph: three groups, each a chain.
        from graphbandit import Client
        with Client(target, timeout=10, model=MODEL) as client:
            edges = [(f"user{u}", f"user{u + 3}", 1.0) for u in range(USERS - 3)]
            call_with_retries(Stats(), lambda: client.add_edges(edges))

        # The proxy routes by the model header: a call that does not name the model goes nowhere.
        from graphbandit import GraphbanditError
        with Client(target, timeout=5) as client:
            try:
                client.describe_model()
                failures.append("a call without the model header reached a node")
            except GraphbanditError as e:
                if e.code.name != "UNAVAILABLE":
                    failures.append(f"a call without the model header: {e.code.name}, "
                                    "not UNAVAILABLE")

        stats = Stats()
        stop = threading.Event()
        threads = [threading.Thread(target=worker, args=(w, target, stop, stats, 1000 + w))
                   for w in range(args.workers)]
        start = time.time()
        for t in threads:
            t.start()
        # The faults, at fixed fractions of the run.
        serving_again = []  # seconds from a node's restart until it accepted connections

        def restart(name):
            procs.restart(name)
            if name.startswith("node"):
                # Serving again once it has read the stream up to its end (Open's catch-up).
                at, port = time.time(), grpc_ports[int(name[4:])]

                def watch():
                    if wait_port(port, 120):
                        serving_again.append(time.time() - at)
                threading.Thread(target=watch, daemon=True).start()

        def fault(fraction, victims, down):
            return [(fraction, "kill " + " ".join(victims),
                     lambda: [procs.kill(v) for v in victims]),
                    (fraction + down, "restart " + " ".join(victims),
                     lambda: [restart(v) for v in victims])]

        if args.rounds > 0:
            seed = args.seed if args.seed is not None else int(time.time()) % 100000
            print(f"cluster-test: {args.rounds} rounds of random faults, --seed={seed}",
                  flush=True)
            rng = random.Random(seed)
            slot = 0.8 / args.rounds
            schedule = []
            for r in range(args.rounds):
                victims = [f"node{rng.randrange(3)}"]
                extra = rng.random()
                if extra < 0.3:
                    victims.append(f"nats{rng.randrange(3)}")
                elif extra < 0.45:
                    victims.append(f"node{(int(victims[0][4:]) + 1 + rng.randrange(2)) % 3}")
                elif extra < 0.75:
                    victims = [f"nats{rng.randrange(3)}"]
                schedule += fault(0.05 + r * slot, victims, rng.uniform(0.2, 0.7) * slot)
        else:
            schedule = (fault(0.25, ["node1"], 0.15) + fault(0.55, ["nats2"], 0.15))
        for fraction, what, action in schedule:
            time.sleep(max(0.0, start + fraction * args.seconds - time.time()))
            print(f"cluster-test: {time.time() - start:5.1f} s: {what}", flush=True)
            action()
        time.sleep(max(0.0, start + args.seconds - time.time()))
        stop.set()
        for t in threads:
            t.join(timeout=60)
        elapsed = time.time() - start
        print(f"cluster-test: {stats.decisions} decisions in {elapsed:.1f} s through the proxy "
              f"({stats.decisions / elapsed:.0f}/s), {len(stats.acknowledged)} rewards "
              f"acknowledged, {stats.unresolved} unresolved, errors seen: {stats.errors}",
              flush=True)

        for call, values in stats.latency.items():
            values.sort()
            if values:
                print(f"cluster-test: {call} latency through the proxy (Python client, retries "
                      f"included): p50 {1000 * values[len(values) // 2]:.1f} ms, p99 "
                      f"{1000 * values[int(len(values) * 0.99)]:.1f} ms, max "
                      f"{1000 * values[-1]:.0f} ms", flush=True)
        if serving_again:
            print("cluster-test: restarted nodes served again after "
                  + ", ".join(f"{s:.2f}" for s in serving_again)
                  + " s (snapshot, then the stream to its end)", flush=True)
        # Every node applies the whole stream: wait until they agree and stay put.
        for i in range(3):
            if not wait_port(grpc_ports[i], 60):
                failures.append(f"node{i} did not come back:\n{procs.tail(f'node{i}')}")
        for name in [f"nats{i}" for i in range(3)] + [f"node{i}" for i in range(3)]:
            if procs.procs[name].poll() is not None:
                failures.append(f"{name} is not running at the end of the run (exit status "
                                f"{procs.procs[name].returncode}):\n{procs.tail(name)}")
        deadline = time.time() + 90
        described = None
        while time.time() < deadline:
            try:
                described = [describe(p) for p in grpc_ports]
            except Exception as e:  # noqa: BLE001 - a node still starting
                described = None
                print(f"cluster-test: waiting for the nodes: {e}", flush=True)
                time.sleep(1)
                continue
            versions = {d.model_version for d in described}
            learned = {d.rewards_learned for d in described}
            if len(versions) == 1 and len(learned) == 1:
                time.sleep(2)
                again = [describe(p) for p in grpc_ports]
                if [d.model_version for d in again] == [d.model_version for d in described]:
                    break
            time.sleep(0.5)
        if described is None:
            failures.append("the nodes could not be described")
        else:
            for i, d in enumerate(described):
                print(f"cluster-test: node{i}: version {d.model_version}, "
                      f"{d.rewards_learned} rewards learned, {d.users} users, "
                      f"dictionary {d.dictionary_size}", flush=True)
            if len({d.model_version for d in described}) != 1:
                failures.append("the nodes report different model versions")
            learned = {d.rewards_learned for d in described}
            if len(learned) != 1:
                failures.append(f"the nodes learned different numbers of rewards: {learned}")
            acked = len(stats.acknowledged)
            lo, hi = acked, acked + stats.unresolved
            for n in learned:
                if not lo <= n <= hi:
                    failures.append(f"{n} rewards learned, but {acked} were acknowledged "
                                    f"(and {stats.unresolved} unresolved)")
            # The nodes export where they are in the shared log (read position, apply lag).
            for i, d in enumerate(described):
                metrics = scrape(metrics_ports[i])
                position = metrics.get("graphbandit_shared_log_read_position")
                lag = metrics.get("graphbandit_shared_log_apply_lag")
                if position is None or position < d.model_version or lag is None:
                    failures.append(f"node{i} exports read position {position} and apply lag "
                                    f"{lag} at model version {d.model_version}")
        probes = [probe(p, f"node{i}") for i, p in enumerate(grpc_ports)]
        if not all(p == probes[0] for p in probes):
            failures.append(f"the probe scores differ between nodes: {probes}")
        else:
            print(f"cluster-test: probe scores identical on the three nodes: {probes[0]}")
        bad = {k: v for k, v in stats.errors.items() if k not in RETRYABLE}
        if bad:
            failures.append(f"clients saw non-retryable errors: {bad}")
        regrets = [r for _, r in sorted(stats.regrets)]
        third = max(1, len(regrets) // 3)
        first, last = sum(regrets[:third]) / third, sum(regrets[-third:]) / third
        # A uniform random choice's regret on this task, estimated on fresh draws.
        rng = random.Random(7)
        uniform = 0.0
        for _ in range(4000):
            user = rng.randrange(USERS)
            values = [true_reward(user, (rng.uniform(-1, 1), rng.uniform(-1, 1)))
                      for _ in range(ARMS)]
            uniform += max(values) - sum(values) / ARMS
        uniform /= 4000
        print(f"cluster-test: mean regret first third {first:.3f}, last third {last:.3f}, "
              f"uniform choice {uniform:.3f}", flush=True)
        if not (last < first and last < uniform):
            failures.append("regret did not fall")
    except Exception as e:  # noqa: BLE001 - reported as a failure below
        failures.append(f"{type(e).__name__}: {e}")
    finally:
        procs.stop_all()
        if failures:
            for name in sorted(procs.procs):
                print(f"--- {name} (last lines) ---\n{procs.tail(name)}")
        if args.keep or failures:
            print(f"cluster-test: logs in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    if failures:
        for failure in failures:
            print(f"cluster-test: FAIL: {failure}")
        sys.exit(1)
    print("cluster-test: PASS")


if __name__ == "__main__":
    main()

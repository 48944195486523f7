#!/usr/bin/python3
"""Cluster mode measured on loopback: decisions per second with 1, 2 and 3 replicas, the cost of
the stream against the local log, apply lag between replicas, and a replaced node's recovery.

For each layout it starts fresh processes, runs graphbandit-loadgen (closed loop, a reward for
every decision, a grpc.health baseline in the same run) for --seconds, and prints one line per
layout; then it stops every process it started, by PID. Layouts:

  local     one node in single-node mode (its own log, fdatasync per reward), called directly;
  stream    one node in cluster mode (the three-replica stream), called directly: against
            `local`, what putting the log on the stream costs;
  proxy-N   N nodes in cluster mode (N in --replicas) behind nginx (as deploy/cluster/nginx.conf),
            called through nginx over --channels connections.

While the load runs it samples every node's read position in the stream (the spread between
replicas at one instant, in records) and graphbandit_shared_log_apply_lag; with two or more
nodes, a probe thread reports a reward to node0 every 0.5 s and times how long until node1 has
applied it (the model version node0 answered), the lag a client sees between replicas. It also
reads the CPU seconds each process used over the run (/proc/PID/stat).

After the last proxy-N layout with N >= 2 and its load: node N-1 is killed (SIGKILL) and
restarted on its state directory (newest snapshot plus the stream after it), then killed again,
its state directory deleted and started empty (a replaced node reads the whole stream); each
time until it serves (Open returns once it has applied the stream to its end).

Everything listens on 127.0.0.1. Run from the repository root after building.
  tools/dev.sh cluster-bench [--seconds=20] [--concurrency=8] [--replicas=1,2,3] [--json=FILE]
  tools/dev.sh cluster-bench --layouts=local,stream --mode=open --rate=200   # latency at a fixed
      rate below saturation: what the stream adds to a call, without queueing
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_test as ct  # noqa: E402 - the process helpers and configurations

# The model of PERFORMANCE.md's open-loop runs (EK-UCB, m = 256); the cluster block only in
# cluster mode.
CONFIG = """{cluster}
durability {{ snapshot_every_records: 3000 }}
default_model: "news"
models {{
  name: "news"
  nystrom {{ max_dictionary_size: 256 }}
  ledger {{ reward_window_seconds: 600 }}
}}
"""
CLUSTER_BLOCK = """
cluster {{
  node_id: "{node}"
  nats_servers: [{servers}]
  stream_prefix: "gbbench"
}}"""
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """CPU seconds used by the process and its live children (nginx's workers)."""
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(entry) == pid or int(fields[1]) == pid:  # fields[1]: the parent's PID
            total += (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime
    return total


def sampler(ports, stop, samples):
    """Every 0.25 s: each node's read position and apply lag."""
    while not stop.is_set():
        try:
            row = [ct.scrape(p) for p in ports]
            positions = [r.get("graphbandit_shared_log_read_position", 0) for r in row]
            lags = [r.get("graphbandit_shared_log_apply_lag", 0) for r in row]
            samples.append((max(positions) - min(positions), max(lags)))
        except Exception:  # noqa: BLE001 - a node busy or restarting: skip the sample
            pass
        stop.wait(0.25)


def cpu_sampler(procs, stop, samples):
    """Every 0.5 s: (time, {process: CPU seconds so far})."""
    while not stop.is_set():
        samples.append((time.time(), {n: cpu_seconds(p.pid) for n, p in procs.procs.items()}))
        stop.wait(0.5)


def visibility_probe(writer_port, reader_port, stop, lags):
    """Every 0.5 s: a reward on the writer node, then the time until the reader node has it."""
    from graphbandit import Client
    with Client(f"127.0.0.1:{writer_port}", timeout=10, model=ct.MODEL) as a, \
            Client(f"127.0.0.1:{reader_port}", timeout=10, model=ct.MODEL) as b:
        i = 0
        while not stop.is_set():
            i += 1
            try:
                # 16 features, as the load generator's (--dim=16): a model fixes its dimension.
                d = a.select("probe-user", [("x", [0.1] * 16), ("y", [-0.1] * 16)],
                             event_id=f"visibility-{i}")
                answer = a.reward(d.event_id, 0.5)
                acked = time.time()
                while b.describe_model().model_version < answer.model_version:
                    if time.time() - acked > 30:
                        break
                    time.sleep(0.001)
                lags.append(time.time() - acked)
            except Exception:  # noqa: BLE001 - counted by the load generator's errors instead
                pass
            stop.wait(0.5)


def calls_served(metrics_port):
    """SelectArm and ReportReward calls this node answered (graphbandit_rpc_requests_total)."""
    import urllib.request
    counts = {"SelectArm": 0, "ReportReward": 0}
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("graphbandit_rpc_requests_total{"):
                for method in counts:
                    if f'method="{method}"' in line:
                        counts[method] += int(float(line.rsplit(" ", 1)[1]))
    return counts


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def serve_time(procs, name, port):
    began = time.time()
    procs.restart(name)
    if not ct.wait_port(port, 300):
        raise RuntimeError(f"{name} did not come back:\n{procs.tail(name)}")
    return time.time() - began


def run_layout(args, layout, nodes, cluster, proxy, workdir, recovery):
    build = os.path.abspath(args.build_dir)
    server = os.path.join(build, "server", "graphbandit-server")
    loadgen = os.path.join(build, "client", "graphbandit-loadgen")
    procs = ct.Processes(workdir)
    result = {"layout": layout, "nodes": nodes}
    try:
        servers = ct.start_nats(procs, workdir) if cluster else None
        grpc_ports, metrics_ports = ct.free_ports(nodes), ct.free_ports(nodes)
        for i in range(nodes):
            config = os.path.join(workdir, f"node{i}.textproto")
            with open(config, "w") as f:
                f.write(CONFIG.format(cluster=CLUSTER_BLOCK.format(node=f"node{i}", servers=servers)
                                      if cluster else ""))
            procs.start(f"node{i}", [
                server, f"--listen=127.0.0.1:{grpc_ports[i]}",
                f"--metrics_listen=127.0.0.1:{metrics_ports[i]}",
                f"--state_dir={os.path.join(workdir, f'state{i}')}", f"--config={config}"])
        for i in range(nodes):
            if not ct.wait_port(grpc_ports[i], 120):
                raise RuntimeError(f"node {i} did not start:\n{procs.tail(f'node{i}')}")
        target = f"127.0.0.1:{grpc_ports[0]}"
        if proxy:
            target = ct.start_nginx(procs, workdir, grpc_ports, default_upstream="graphbandit")

        stop, samples, lags = threading.Event(), [], []
        threads = []
        if cluster:
            threads.append(threading.Thread(target=sampler, args=(metrics_ports, stop, samples)))
        if nodes >= 2:
            threads.append(threading.Thread(target=visibility_probe,
                                            args=(grpc_ports[0], grpc_ports[1], stop, lags)))
        cpu_before = {n: cpu_seconds(p.pid) for n, p in procs.procs.items()}
        cpu_samples = []
        threads.append(threading.Thread(target=cpu_sampler, args=(procs, stop, cpu_samples)))
        for t in threads:
            t.start()
        report = os.path.join(workdir, "report.json")
        command = [loadgen, f"--target={target}", f"--model={ct.MODEL}", f"--mode={args.mode}",
                   f"--rate={args.rate}",
                   f"--concurrency={args.concurrency}", f"--channels={args.channels}",
                   f"--duration_seconds={args.seconds}", "--warmup_seconds=2",
                   "--baseline_seconds=3", f"--candidates={args.candidates}", "--dim=16",
                   "--reward_ratio=1", "--progress=false", "--roofline=false",
                   f"--metrics_url=http://127.0.0.1:{metrics_ports[0]}/metrics",
                   f"--report_json={report}"]
        began = time.time()
        run = subprocess.run(command, capture_output=True, text=True)
        wall = time.time() - began
        stop.set()
        for t in threads:
            t.join(timeout=60)
        cpu = {n: cpu_seconds(p.pid) - cpu_before.get(n, 0.0) for n, p in procs.procs.items()}
        if run.returncode != 0:
            raise RuntimeError(f"loadgen failed ({run.returncode}):\n{run.stdout}\n{run.stderr}")
        with open(report) as f:
            result["loadgen"] = json.load(f)
        result["cpu_seconds"] = {
            "nodes": sum(v for n, v in cpu.items() if n.startswith("node")),
            "nats": sum(v for n, v in cpu.items() if n.startswith("nats")),
            "nginx": cpu.get("nginx", 0.0), "wall": wall}
        # CPU per rewarded decision in the measured interval only: the load generator runs its
        # health baseline (3 s) and warm-up (2 s) first; one more second of margin each side.
        window = [c for c in cpu_samples if began + 6 <= c[0] <= began + 5 + args.seconds - 1]
        if len(window) >= 2:
            (t0, c0), (t1, c1) = window[0], window[-1]
            rate = result["loadgen"]["select"]["throughput_per_second"]
            per = {n: (c1.get(n, 0) - c0.get(n, 0)) / (t1 - t0) for n in c1}
            result["cores_busy"] = {
                "nodes": sum(v for n, v in per.items() if n.startswith("node")),
                "nats": sum(v for n, v in per.items() if n.startswith("nats")),
                "nginx": per.get("nginx", 0.0)}
            result["cpu_ms_per_decision"] = {k: 1000 * v / rate if rate else float("nan")
                                             for k, v in result["cores_busy"].items()}
        if samples:
            result["read_position_spread"] = {"p50": percentile([s[0] for s in samples], 0.5),
                                              "p99": percentile([s[0] for s in samples], 0.99),
                                              "max": max(s[0] for s in samples)}
            result["apply_lag_records"] = {"p50": percentile([s[1] for s in samples], 0.5),
                                           "max": max(s[1] for s in samples)}
        if lags:
            result["visibility_ms"] = {"n": len(lags), "p50": 1000 * percentile(lags, 0.5),
                                       "p99": 1000 * percentile(lags, 0.99),
                                       "max": 1000 * max(lags)}
        # Every node learned the same rewards (the load generator waited for node0 to learn).
        learned = []
        deadline = time.time() + 60
        while time.time() < deadline:
            learned = [ct.describe(p).rewards_learned for p in grpc_ports]
            if len(set(learned)) == 1:
                break
            time.sleep(0.5)
        result["rewards_learned"] = learned
        result["calls_per_node"] = [calls_served(p) for p in metrics_ports]
        if recovery:
            last, port = f"node{nodes - 1}", grpc_ports[nodes - 1]
            stream_end = ct.describe(grpc_ports[0]).model_version
            procs.kill(last)
            result["restart_from_snapshot_s"] = serve_time(procs, last, port)
            procs.kill(last)
            shutil.rmtree(os.path.join(workdir, f"state{nodes - 1}"))
            result["replaced_node_s"] = serve_time(procs, last, port)
            result["stream_records"] = stream_end
            result["replaced_node_learned"] = ct.describe(port).rewards_learned
    finally:
        procs.stop_all()
    return result


def summary(r):
    """One line: throughput and latency of both calls, CPU, lag and recovery."""
    g = r["loadgen"]
    sel, rew, base = g["select"], g["reward"], g["baseline"]
    cpu = r["cpu_seconds"]
    line = (f"SelectArm {sel['throughput_per_second']:.0f}/s (health {base['throughput_per_second']:.0f}/s), "
            f"p50/p99 {1000 * sel['latency_seconds']['p50']:.1f}/{1000 * sel['latency_seconds']['p99']:.1f} ms; "
            f"ReportReward {rew['throughput_per_second']:.0f}/s, p50/p99 "
            f"{1000 * rew['latency_seconds']['p50']:.1f}/{1000 * rew['latency_seconds']['p99']:.1f} ms; "
            f"errors {sel['errors']}+{rew['errors']}; CPU s over {cpu['wall']:.0f} s: nodes "
            f"{cpu['nodes']:.1f}, nats {cpu['nats']:.1f}, nginx {cpu['nginx']:.1f}; learned "
            f"{r['rewards_learned']} of {g['accepted_rewards']} accepted")
    if "cpu_ms_per_decision" in r:
        busy, per = r["cores_busy"], r["cpu_ms_per_decision"]
        line += (f"; measured interval: cores busy nodes {busy['nodes']:.2f}, nats "
                 f"{busy['nats']:.2f}, nginx {busy['nginx']:.2f}; CPU ms per rewarded decision "
                 f"nodes {per['nodes']:.2f}, nats {per['nats']:.2f}, nginx {per['nginx']:.2f}")
    if r["nodes"] > 1:
        line += "; SelectArm/ReportReward per node " + ", ".join(
            f"{c['SelectArm']}/{c['ReportReward']}" for c in r["calls_per_node"])
    if "read_position_spread" in r:
        line += (f"; read-position spread p50/p99/max {r['read_position_spread']['p50']:.0f}/"
                 f"{r['read_position_spread']['p99']:.0f}/{r['read_position_spread']['max']:.0f} "
                 f"records, apply lag max {r['apply_lag_records']['max']:.0f}")
    if "visibility_ms" in r:
        v = r["visibility_ms"]
        line += (f"; node0 ack -> node1 applied p50/p99/max {v['p50']:.1f}/{v['p99']:.1f}/"
                 f"{v['max']:.1f} ms ({v['n']} probes)")
    if "replaced_node_s" in r:
        line += (f"; restart from snapshot {r['restart_from_snapshot_s']:.2f} s, replaced node "
                 f"(empty state, {r['stream_records']} stream records) "
                 f"{r['replaced_node_s']:.2f} s, learned {r['replaced_node_learned']}")
    return line


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build_dir", default=os.environ.get("GRAPHBANDIT_BUILD_DIR", "build"))
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--concurrency", type=int, default=8,
                        help="closed loop: callers; open loop: most calls in flight")
    parser.add_argument("--mode", default="closed", choices=("closed", "open"))
    parser.add_argument("--rate", type=float, default=0,
                        help="open loop: SelectArm calls per second (each rewarded)")
    parser.add_argument("--channels", type=int, default=4)
    parser.add_argument("--candidates", type=int, default=50)
    parser.add_argument("--replicas", default="1,2,3")
    parser.add_argument("--layouts", default="local,stream,proxy")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    sys.path.insert(0, os.path.join(os.path.abspath(args.build_dir), "python"))

    plan = []
    layouts = args.layouts.split(",")
    if "local" in layouts:
        plan.append(("local", 1, False, False))
    if "stream" in layouts:
        plan.append(("stream", 1, True, False))
    if "proxy" in layouts:
        plan += [(f"proxy-{n}", n, True, True) for n in map(int, args.replicas.split(","))]
    last_multi = max((i for i, p in enumerate(plan) if p[1] >= 2), default=-1)
    results = []
    for i, (layout, nodes, cluster, proxy) in enumerate(plan):
        workdir = tempfile.mkdtemp(prefix=f"graphbandit-bench-{layout}-")
        try:
            r = run_layout(args, layout, nodes, cluster, proxy, workdir, i == last_multi)
        except Exception as e:  # noqa: BLE001 - reported, with the logs kept
            print(f"cluster-bench: {layout}: FAILED: {e} (logs in {workdir})", flush=True)
            sys.exit(1)
        shutil.rmtree(workdir, ignore_errors=True)
        results.append(r)
        print(f"cluster-bench: {layout}: {summary(r)}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Plays a task that is not the simulator's against a real graphbandit server over gRPC.

The robustness check, as an outside user would run it: an environment written independently of
sim (NumPy, its own random streams), a fresh server per run with its defaults (or a
--config you pass), sequential SelectArm + ReportReward with immediate rewards, and two
baselines computed here on the same rounds: per-user LinUCB with an intercept (alpha tuned per
task over a grid: the best in hindsight) and uniform random choice.

The task: a stochastic block model of --users users in --blocks blocks (users are assigned to
blocks at random); 20 fresh candidates per round with --dim features N(0, 1) (times --scale as
the server sees them); the noise-free reward of item x for user u is

    f_b(x) normalised to mean 0, sd 1     (b = u's block; one function per block, --family)
    + theta_u . x                          (per-user linear part, sd --user_linear)
    + b_u                                  (per-user intercept, sd --intercept)

and the learner sees it plus N(0, --noise^2). Regret is pseudo-regret (best noise-free
candidate minus the chosen one). Families: mlp (tanh units), mixed (linear plus sinusoids),
relu, bumps (sums of Gaussian bumps), quadratic, fourier (random cosines: hard), linear.

Needs Debian's python3-grpcio, python3-protobuf, python3-numpy and protobuf-compiler-grpc
(protoc and grpc_python_plugin); the stubs are generated into a temporary folder at start.

    tools/outside_task.py --family=mlp --seeds=1,2,3           # default model, 3 seeds
    tools/outside_task.py --policies=EK_UCB,BATCHED_NYSTROM_UCB --seeds=7

Prints one line per (seed, policy) and a mean per policy; --json writes every figure. Every
server listens on 127.0.0.1 on a free port and is stopped by its PID; each run is bounded by
--rounds and --max_seconds.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CANDIDATES = 20
ALPHAS = (0.01, 0.03, 0.1, 0.3, 1.0)


def load_stubs(workdir):
    plugin = shutil.which("grpc_python_plugin")
    if shutil.which("protoc") is None or plugin is None:
        raise SystemExit("needs protoc and grpc_python_plugin: apt-get install "
                         "protobuf-compiler protobuf-compiler-grpc")
    proto_root = os.path.join(ROOT, "proto")
    out = os.path.join(workdir, "stubs")
    os.makedirs(out)
    subprocess.run(["protoc", "-I" + proto_root, "--python_out=" + out, "--grpc_out=" + out,
                    "--plugin=protoc-gen-grpc=" + plugin,
                    os.path.join(proto_root, "graphbandit/v1/bandit.proto"),
                    os.path.join(proto_root, "graphbandit/v1/config.proto")], check=True)
    sys.path.insert(0, out)
    import grpc  # noqa: E402 (after the stubs exist)
    from graphbandit.v1 import bandit_pb2, bandit_pb2_grpc
    return grpc, bandit_pb2, bandit_pb2_grpc


def block_function(rng, family, dim):
    if family == "mlp":
        w = rng.normal(size=(6, dim)) * 1.2 / np.sqrt(dim)
        c = rng.normal(size=6) * 0.5
        a = rng.normal(size=6)
        return lambda x: np.tanh(x @ w.T + c) @ a
    if family == "mixed":
        v = rng.normal(size=dim) / np.sqrt(dim)
        w = rng.normal(size=(4, dim)) * 1.5 / np.sqrt(dim)
        a = rng.normal(size=4) * 0.5
        return lambda x: x @ v + np.sin(x @ w.T) @ a
    if family == "relu":
        w = rng.normal(size=(10, dim)) / np.sqrt(dim)
        c = rng.normal(size=10) * 0.3
        a = rng.normal(size=10)
        return lambda x: np.maximum(x @ w.T + c, 0.0) @ a
    if family == "bumps":
        centres = rng.normal(size=(5, dim))
        a = rng.normal(size=5)
        return lambda x: np.exp(-0.25 * ((x[:, None, :] - centres[None]) ** 2).sum(-1)) @ a
    if family == "quadratic":
        q = rng.normal(size=(dim, dim)) / dim
        q = q + q.T
        v = rng.normal(size=dim) * 0.3
        return lambda x: np.einsum("ni,ij,nj->n", x, q, x) + x @ v
    if family == "fourier":
        w = rng.normal(size=(6, dim)) * 0.8
        c = rng.uniform(0.0, 2.0 * np.pi, 6)
        a = rng.normal(size=6)
        return lambda x: np.cos(x @ w.T + c) @ a
    if family == "linear":
        v = rng.normal(size=dim)
        return lambda x: x @ v
    raise SystemExit("unknown --family %r" % family)


class Task:
    def __init__(self, args, seed):
        rng = np.random.default_rng(seed)
        self.users = args.users
        block = rng.integers(0, args.blocks, size=args.users)
        self.edges = [(a, b) for a in range(args.users) for b in range(a + 1, args.users)
                      if rng.random() < (args.p_in if block[a] == block[b] else args.p_out)]
        functions = [block_function(rng, args.family, args.dim) for _ in range(args.blocks)]
        sample = rng.normal(size=(4000, args.dim))
        moments = [(f(sample).mean(), f(sample).std()) for f in functions]
        theta = rng.normal(size=(args.users, args.dim)) * args.user_linear / np.sqrt(args.dim)
        intercept = rng.normal(size=args.users) * args.intercept
        self.rounds = []
        for _ in range(args.rounds):
            u = int(rng.integers(0, args.users))
            x = rng.normal(size=(CANDIDATES, args.dim))
            m, s = moments[block[u]]
            mean = (functions[block[u]](x) - m) / s + x @ theta[u] + intercept[u]
            self.rounds.append((u, x * args.scale, mean, rng.normal(size=CANDIDATES) * args.noise))


def windows(per_round, size=1000):
    return [float(np.sum(per_round[i:i + size])) for i in range(0, len(per_round), size)]


def linucb(task, alpha, lam=1.0):
    """Per-user LinUCB with an intercept (features [x, 1]), ridge lam."""
    d = task.rounds[0][1].shape[1] + 1
    a_inv = np.stack([np.eye(d) / lam] * task.users)
    b = np.zeros((task.users, d))
    regret = []
    for u, x, mean, noise in task.rounds:
        xa = np.hstack([x, np.ones((len(x), 1))])
        width = np.sqrt(np.einsum("ni,ij,nj->n", xa, a_inv[u], xa))
        k = int(np.argmax(xa @ (a_inv[u] @ b[u]) + alpha * width))
        z = a_inv[u] @ xa[k]
        a_inv[u] -= np.outer(z, z) / (1.0 + xa[k] @ z)
        b[u] += (mean[k] + noise[k]) * xa[k]
        regret.append(mean.max() - mean[k])
    return regret


def random_choice(task, seed):
    rng = np.random.default_rng(seed + 1_000_003)
    return [mean.max() - mean[rng.integers(0, len(mean))] for _, _, mean, _ in task.rounds]


def read_ports(path):
    try:
        with open(path) as f:
            return f.read().split()
    except FileNotFoundError:
        return []


def play_server(task, policy, args, rpc, workdir):
    grpc, pb, pbg = rpc
    run_dir = tempfile.mkdtemp(prefix="run-", dir=workdir)
    config = os.path.join(run_dir, "config.txt")
    with open(config, "w") as f:
        if policy or args.config_extra:
            f.write('models { name: "default" %s %s }\n' %
                    ("policy: " + policy if policy else "", args.config_extra))
    ports = os.path.join(run_dir, "ports")
    command = [os.path.join(args.build, "server", "graphbandit-server"), "--listen=127.0.0.1:0",
               "--metrics_listen=", "--port_file=" + ports,
               "--state_dir=" + os.path.join(run_dir, "state")]
    if policy or args.config_extra:
        command.append("--config=" + config)
    log = open(os.path.join(run_dir, "server.log"), "w")
    server = subprocess.Popen(command, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while not read_ports(ports):
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("server did not start; see " + log.name)
            time.sleep(0.05)
        channel = grpc.insecure_channel("127.0.0.1:" + read_ports(ports)[0])
        bandit, admin = pbg.BanditServiceStub(channel), pbg.AdminServiceStub(channel)
        admin.AddUsers(pb.AddUsersRequest(user_ids=["u%d" % u for u in range(task.users)]))
        if task.edges:
            admin.AddEdges(pb.AddEdgesRequest(edges=[
                pb.Edge(user_a="u%d" % a, user_b="u%d" % b, weight=1.0) for a, b in task.edges]))
        regret, acknowledged, refused = [], 0, {}
        started = time.monotonic()
        for u, x, mean, noise in task.rounds:
            if time.monotonic() - started > args.max_seconds:
                break
            decision = bandit.SelectArm(pb.SelectArmRequest(
                user_id="u%d" % u,
                candidates=[pb.Arm(id=str(i), features=x[i].tolist()) for i in range(len(x))]))
            k = decision.arms[0].candidate_index
            regret.append(mean.max() - mean[k])
            try:
                answer = bandit.ReportReward(pb.ReportRewardRequest(
                    event_id=decision.event_id, reward=float(mean[k] + noise[k])))
                acknowledged += answer.outcome == pb.ACCEPTED
            except grpc.RpcError as e:  # e.g. an exact GP past its size limit
                refused[e.code().name] = refused.get(e.code().name, 0) + 1
        seconds = time.monotonic() - started
        # Let the writer catch up before comparing what it learned with what it acknowledged.
        deadline = time.monotonic() + 120
        while True:
            description = admin.DescribeModel(pb.DescribeModelRequest())
            if description.rewards_learned >= acknowledged or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if len(regret) < len(task.rounds):
            print("warning: stopped after %d of %d rounds (--max_seconds); ratios compare the "
                  "same rounds" % (len(regret), len(task.rounds)), file=sys.stderr)
        return dict(regret=float(np.sum(regret)), rounds=len(regret), windows=windows(regret),
                    acknowledged=acknowledged, learned=description.rewards_learned,
                    refused=refused, dictionary=description.dictionary_size, seconds=seconds)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="1", help="comma-separated task seeds")
    p.add_argument("--family", default="mlp")
    p.add_argument("--rounds", type=int, default=5000)
    p.add_argument("--users", type=int, default=30)
    p.add_argument("--blocks", type=int, default=3)
    p.add_argument("--p_in", type=float, default=0.4)
    p.add_argument("--p_out", type=float, default=0.02)
    p.add_argument("--dim", type=int, default=8)
    p.add_argument("--scale", type=float, default=1.0, help="feature scale the server sees")
    p.add_argument("--noise", type=float, default=0.3)
    p.add_argument("--user_linear", type=float, default=0.2)
    p.add_argument("--intercept", type=float, default=0.0)
    p.add_argument("--policies", default="", help="comma-separated; empty: the default model")
    p.add_argument("--config_extra", default="",
                   help="text-format ModelConfig fields added to the model, e.g. 'exploration: 1'")
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--max_seconds", type=float, default=1800, help="per run")
    p.add_argument("--json", default="", help="write every figure here")
    args = p.parse_args()

    workdir = tempfile.mkdtemp(prefix="graphbandit-outside-")
    try:
        rpc = load_stubs(workdir)
        results = []
        print("%5s %-22s %9s %9s %9s %9s %9s %6s %15s" % (
            "seed", "policy", "regret", "LinUCB", "random", "/LinUCB", "/random", "m",
            "learned/acked"))
        for seed in [int(s) for s in args.seeds.split(",")]:
            task = Task(args, seed)
            tuned = {alpha: linucb(task, alpha) for alpha in ALPHAS}
            best = min(tuned, key=lambda a: sum(tuned[a]))
            random_regret = random_choice(task, seed)
            for policy in args.policies.split(",") if args.policies else [""]:
                run = play_server(task, policy, args, rpc, workdir)
                played = run["rounds"]  # the baselines over the same rounds
                run.update(linucb=float(np.sum(tuned[best][:played])), linucb_alpha=best,
                           linucb_windows=windows(tuned[best][:played]),
                           random=float(np.sum(random_regret[:played])), seed=seed,
                           policy=policy or "default")
                results.append(run)
                print("%5d %-22s %9.1f %9.1f %9.1f %9.3f %9.3f %6d %7d/%-7d%s" % (
                    seed, run["policy"], run["regret"], run["linucb"], run["random"],
                    run["regret"] / run["linucb"], run["regret"] / run["random"],
                    run["dictionary"], run["learned"], run["acknowledged"],
                    "  refused: %s" % run["refused"] if run["refused"] else ""), flush=True)
        print("mean of per-seed ratios:")
        for policy in dict.fromkeys(r["policy"] for r in results):
            mine = [r for r in results if r["policy"] == policy]
            print("  %-22s /LinUCB %.3f  /random %.3f  (%d seeds; every acknowledged reward "
                  "learned: %s)" % (
                      policy, np.mean([r["regret"] / r["linucb"] for r in mine]),
                      np.mean([r["regret"] / r["random"] for r in mine]), len(mine),
                      all(r["learned"] == r["acknowledged"] for r in mine)))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(dict(args=vars(args), runs=results), f, indent=1)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()

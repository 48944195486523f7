#!/usr/bin/python3
"""The Python client against the real C++ server (ctest `python_client`).

usage: python_client_test.py BUILD_DIR [unittest options]

Needs the generated package in BUILD_DIR/python (target graphbandit_python), Debian's
python3-grpcio and python3-protobuf, and the openssl command. Every server is started on
127.0.0.1 with free ports and a temporary state directory, and killed at the end (also if this
process dies: the children get SIGKILL through PR_SET_PDEATHSIG).

- Interop: Python decides and rewards 1,200 rounds of a synthetic contextual task; the model's
  counters match what was sent and the choices improve clearly (environment: GB_TEST_SEED,
  GB_TEST_NOISE and GB_TEST_FIRST_FIT vary the task, see below).
- Named features: dicts of namespaces become FeatureNamespaces; a task whose best arm depends on
  a categorical context feature is learned from named features alone.
- Errors: malformed requests raise GraphbanditError with the server's status code.
- TLS and tokens: a CA, server and client certificates (and a rogue CA) are made with openssl at
  run time; TLS, plaintext refusal, mutual TLS, admin and bandit tokens, secrets kept out of the
  server's output and metrics, and graphbandit-cli over TLS with a token.
"""

import ctypes
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
    sys.exit("usage: python_client_test.py BUILD_DIR [unittest options]")
BUILD = os.path.abspath(sys.argv.pop(1))
sys.path.insert(0, os.path.join(BUILD, "python"))

import grpc  # noqa: E402

from graphbandit import Client, GraphbanditError, bandit_pb2, named_features  # noqa: E402

SERVER = os.path.join(BUILD, "server", "graphbandit-server")
CLI = os.path.join(BUILD, "client", "graphbandit-cli")
WORK = tempfile.mkdtemp(prefix="gb-python-test-")
SERVERS = []

_libc = ctypes.CDLL(None, use_errno=True)


def _die_with_parent():
    _libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Server:
    """graphbandit-server on 127.0.0.1 with free ports; stderr kept in a file."""

    def __init__(self, name, *flags):
        self.dir = os.path.join(WORK, name)
        os.makedirs(self.dir)
        port_file = os.path.join(self.dir, "ports")
        self.log_path = os.path.join(self.dir, "server.log")
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [SERVER, "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
             f"--state_dir={self.dir}/state", f"--port_file={port_file}", *flags],
            stdout=self.log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        SERVERS.append(self)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server {name} exited: {self.output()}")
            if os.path.exists(port_file) and os.path.getsize(port_file) > 0:
                break
            time.sleep(0.05)
        else:
            raise AssertionError(f"server {name} did not write its port file: {self.output()}")
        with open(port_file) as f:
            grpc_port, metrics_port = f.read().split()
        self.target = f"127.0.0.1:{grpc_port}"
        self.port = int(grpc_port)
        self.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"

    def output(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def stop(self):
        """SIGTERM, wait for the clean exit; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


def tearDownModule():
    for server in SERVERS:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait()
    shutil.rmtree(WORK, ignore_errors=True)


# ---- interop: a contextual task the model has to learn ------------------------------------

ARMS = 5
# Arm a has the one-hot feature vector e_a. The context is one number c in [-1, 1]. Arm 0 is
# best for c > 0, arm 1 for c < 0, arm 2 is the best single arm overall (0.5), so picking well
# needs the context: an oracle earns about 0.653, the best fixed arm 0.5, uniform choice 0.38.
def expected_reward(c, arm):
    return (0.45 + 0.4 * c, 0.45 - 0.4 * c, 0.5, 0.2, 0.3)[arm]


RANDOM_MEAN = 0.38
BEST_FIXED_ARM = 0.5
NOISE = float(os.environ.get("GB_TEST_NOISE", "0.2"))  # standard deviation of the reward noise
ROUNDS = 1200
FIRST_WINDOW = 50
LAST_WINDOW = 300
# The model's first hyper-parameter fit waits for this many rewards (0: the server's default,
# 32, and then at least 10 rewards per fitted parameter: 100 for one length-scale per input kind,
# 140 for one per dimension). Before that minimum, about one seed in 50 of this task locked in:
# an early fit made unrelated arms look alike, the policy kept the best fixed arm, and no later
# fit was applied (regret ~0.15 for 1,000+ rounds; docs/model.md, "Known limitations"). With
# it, none of two passes over seeds 1-100 did; one run of the 200 learned late (seed 15: regret
# per round 0.090 over the last 300 rounds, which passes; at most 0.011 in every other run).
FIRST_FIT = int(os.environ.get("GB_TEST_FIRST_FIT", "0"))


class InteropTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        flags = []
        if FIRST_FIT:
            config = os.path.join(WORK, "interop.textproto")
            with open(config, "w") as f:
                f.write('models { name: "default" '
                        f'hyperparameters {{ first_fit: {FIRST_FIT} }} }}\n')
            flags.append(f"--config={config}")
        cls.server = Server("plain", *flags)
        cls.client = Client(cls.server.target, timeout=10)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        status = cls.server.stop()
        if status != 0:
            raise AssertionError(f"server exited with {status}: {cls.server.output()}")

    def test_1_health_and_models(self):
        self.assertEqual(self.client.health(), "SERVING")
        models = self.client.list_models()
        self.assertEqual(list(models.models), ["default"])
        self.assertEqual(models.default_model, "default")

    def test_2_learns_a_contextual_task(self):
        seed = int(os.environ.get("GB_TEST_SEED", "1"))
        rng = random.Random(seed)
        users = [f"user{i}" for i in range(5)]
        arms = [(f"arm{a}", [1.0 if j == a else 0.0 for j in range(ARMS)]) for a in range(ARMS)]
        c = self.client

        # The users form a ring (they share one reward function, so the graph helps).
        edges = c.add_edges([(users[i], users[(i + 1) % 5], 1.0) for i in range(5)])
        self.assertEqual((edges.added, edges.users_added, edges.edges), (5, 5, 5))
        self.assertEqual(c.add_users(users + ["loner"]).added, 1)
        removed = c.remove_edges([(users[0], users[1]), ("loner", users[2])])
        self.assertEqual((removed.removed, removed.not_found, removed.edges), (1, 1, 4))

        expected, regret, observed = [], [], []
        started = time.monotonic()
        for t in range(ROUNDS):
            context = rng.uniform(-1, 1)
            user = rng.choice(users)
            # Half the decisions carry the caller's own event id, half get the server's.
            event_id = f"py-{t}" if t % 2 else ""
            decision = c.select(user, arms, [context], event_id=event_id)
            self.assertEqual(len(decision.arms), 1)
            if event_id:
                self.assertEqual(decision.event_id, event_id)
            arm = decision.arms[0].candidate_index
            self.assertEqual(decision.arms[0].arm_id, f"arm{arm}")
            mean = expected_reward(context, arm)
            y = mean + rng.gauss(0, NOISE)
            outcome = c.reward(decision.event_id, y)
            self.assertEqual(outcome.outcome, bandit_pb2.ACCEPTED)
            expected.append(mean)
            regret.append(max(expected_reward(context, a) for a in range(ARMS)) - mean)
            observed.append(y)
        elapsed = time.monotonic() - started

        # A reward reported twice is DUPLICATE and not learned again; an unknown event is
        # UNKNOWN_EVENT (an answer, not an error).
        self.assertEqual(c.reward(decision.event_id, 1.0).outcome, bandit_pb2.DUPLICATE)
        self.assertEqual(c.reward("no-such-event", 1.0).outcome, bandit_pb2.UNKNOWN_EVENT)

        # Rewards are learned asynchronously: wait (bounded) until the writer caught up.
        deadline = time.monotonic() + 20
        while True:
            d = c.describe_model()
            if d.queued_operations == 0 and d.rewards_learned >= ROUNDS:
                break
            self.assertLess(time.monotonic(), deadline, f"model did not catch up: {d}")
            time.sleep(0.05)
        self.assertEqual(d.name, "default")
        self.assertEqual(d.decisions, ROUNDS)
        self.assertEqual(d.rewards_learned, ROUNDS)
        self.assertEqual(d.history_size, ROUNDS)
        self.assertEqual(d.pending_decisions, 0)
        self.assertEqual(d.users, 6)
        self.assertEqual(d.edges, 4)
        self.assertTrue(d.dimensions_fixed)
        self.assertEqual((d.context_dim, d.arm_feature_dim), (1, ARMS))
        self.assertGreater(d.dictionary_size, 0)
        if FIRST_FIT:
            self.assertEqual(d.config.hyperparameters.first_fit, FIRST_FIT)

        # The same counts in the server's Prometheus metrics.
        metrics = urllib.request.urlopen(self.server.metrics_url, timeout=10).read().decode()
        self.assertIn(f'graphbandit_rewards_total{{model="default",outcome="accepted"}} {ROUNDS}',
                      metrics)
        self.assertIn(f'graphbandit_rewards_learned{{model="default"}} {ROUNDS}', metrics)

        # Judged on the expected reward of each chosen arm (the noise-free part), and on the
        # regret: what the best arm for that context would have earned more in expectation
        # (which does not depend on how lucky a window's contexts were).
        def window(values, start, stop):
            part = values[start:stop]
            return sum(part) / len(part)

        first = window(expected, 0, FIRST_WINDOW)
        last = window(expected, -LAST_WINDOW, None)
        first_regret = window(regret, 0, FIRST_WINDOW)
        last_regret = window(regret, -LAST_WINDOW, None)
        print(f"\n  interop seed {seed}: {ROUNDS} rounds in {elapsed:.1f} s; expected reward of "
              f"the chosen arm (regret): first {FIRST_WINDOW} rounds {first:.3f} "
              f"({first_regret:.3f}), last {LAST_WINDOW} {last:.3f} ({last_regret:.3f}); "
              f"observed last {window(observed, -LAST_WINDOW, None):.3f}; uniform choice "
              f"{RANDOM_MEAN}, best fixed arm {BEST_FIXED_ARM}; dictionary {d.dictionary_size}; "
              f"signal-to-noise {d.learning.signal_to_noise:.3g}, fits applied "
              f"{d.hyperparameters.fits_applied}",
              file=sys.stderr)
        trajectory = [round(window(expected, i, i + 100), 3) for i in range(0, ROUNDS, 100)]
        diagnosis = (f"per 100 rounds: {trajectory}; hyper-parameters in use: "
                     f"{d.hyperparameters}".replace("\n", " "))
        self.assertLess(last_regret, 0.5 * first_regret, "regret did not halve; " + diagnosis)
        self.assertLess(last_regret, 0.10, "regret is high; " + diagnosis)
        self.assertGreater(last, RANDOM_MEAN + 0.15, "not clearly better than uniform choice; "
                           + diagnosis)
        self.assertGreater(last, BEST_FIXED_ARM + 0.05, "the context was not used; " + diagnosis)
        self.assertTrue(decision.logged)
        # A model that learned the task passes every learning check.
        self.assertTrue(d.learning.healthy, str(d.learning))
        self.assertEqual([c.name for c in d.learning.checks],
                         ["keeps_up", "signal", "fits", "reward_trend"])
        self.assertGreater(d.learning.signal_to_noise, 0.05)
        # Read-your-writes: a decision asking for the reward's version is made from a state
        # that has learned it.
        probe = c.select(users[0], arms, [0.0])
        learned = c.reward(probe.event_id, 0.5)
        self.assertGreater(learned.model_version, probe.model_version)
        after = c.select(users[0], arms, [0.0], min_model_version=learned.model_version)
        self.assertGreaterEqual(after.model_version, learned.model_version)
        # An explanation: its parts add up to the mean.
        explained = c.select(users[0], arms, [0.0], explain=True)
        arm = explained.arms[0]
        self.assertTrue(arm.HasField("explanation"))
        parts = arm.explanation
        self.assertAlmostEqual(parts.shared + parts.own + parts.neighbours, arm.mean, delta=1e-9)
        self.assertAlmostEqual(parts.exploration_bonus, arm.score - arm.mean, delta=1e-12)
        self.assertGreater(len(parts.top_decisions), 0)

    def test_3_errors_carry_the_status_code(self):
        # Requests of the shape test_2 fixed for the default model (1 context value, 5 arm
        # features); run alone, the first request below fixes the same shape.
        c = self.client
        arms = [(f"arm{a}", [1.0 if j == a else 0.0 for j in range(ARMS)]) for a in range(ARMS)]
        ctx = [0.0]
        c.select("u", arms, ctx)
        with self.assertRaises(GraphbanditError) as e:
            c.select("u", arms, ctx, model="errors")  # an unknown model
        self.assertEqual(e.exception.code, grpc.StatusCode.NOT_FOUND)
        self.assertIn("errors", e.exception.message)
        self.assertEqual(e.exception.method, "SelectArm")

        cases = [
            ("no candidates", lambda: c.select("u", [], ctx)),
            ("empty user id", lambda: c.select("", arms, ctx)),
            ("NaN feature", lambda: c.select("u", [("a", [float("nan")] * ARMS)], ctx)),
            ("infinite context", lambda: c.select("u", arms, [float("inf")])),
            ("duplicate arm ids", lambda: c.select("u", [arms[0], arms[0]], ctx)),
            ("k above candidates", lambda: c.select("u", arms, ctx, k=ARMS + 1)),
            ("wrong feature dimension", lambda: c.select("u", [("a", [1.0, 0.0])], ctx)),
            ("wrong context dimension", lambda: c.select("u", arms, [0.0, 1.0])),
            ("self-loop", lambda: c.add_edges([("x", "x", 1.0)])),
            ("negative weight", lambda: c.add_edges([("x", "y", -1.0)])),
            ("infinite reward", lambda: c.reward("some-event", float("inf"))),
        ]
        for name, call in cases:
            with self.subTest(name), self.assertRaises(GraphbanditError) as e:
                call()
            self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT,
                             f"{name}: {e.exception}")
            self.assertTrue(e.exception.message, name)

        # Reusing an event id for a different request.
        first = c.select("dup-user", arms, ctx, event_id="dup-event")
        with self.assertRaises(GraphbanditError) as e:
            c.select("dup-user", arms[:2], ctx, event_id="dup-event")
        self.assertEqual(e.exception.code, grpc.StatusCode.ALREADY_EXISTS)
        # while the same request again is a replay of the stored decision
        again = c.select("dup-user", arms, ctx, event_id="dup-event")
        self.assertEqual(again.arms[0].arm_id, first.arms[0].arm_id)
        self.assertTrue(again.replayed)

        with self.assertRaises(GraphbanditError) as e:
            c.describe_model("missing")
        self.assertEqual(e.exception.code, grpc.StatusCode.NOT_FOUND)
        self.assertIn("NOT_FOUND", str(e.exception))

        # Apprentice mode needs the evaluation share, which the default model does not have.
        with self.assertRaises(GraphbanditError) as e:
            c.set_serving_mode("apprentice")
        self.assertEqual(e.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn("evaluation.epsilon", e.exception.message)
        served = c.set_serving_mode("serving")
        self.assertFalse(served.changed)
        self.assertFalse(served.apprentice.apprentice)
        with self.assertRaises(ValueError):
            c.set_serving_mode("boss")


# ---- TLS, mutual TLS and bearer tokens ----------------------------------------------------

OPENSSL_CONFIG = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
authorityKeyIdentifier = keyid
[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
authorityKeyIdentifier = keyid
"""


def make_pki(directory):
    """A CA with a server and a client certificate, and a rogue CA with its own client."""
    os.makedirs(directory)
    config = os.path.join(directory, "openssl.cnf")
    with open(config, "w") as f:
        f.write(OPENSSL_CONFIG)

    def path(name):
        return os.path.join(directory, name)

    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=30)

    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for ca in ("ca", "rogue-ca"):
        run("req", "-x509", "-new", *key, "-keyout", path(f"{ca}.key"), "-out", path(f"{ca}.crt"),
            "-days", "1", "-subj", f"/CN=graphbandit test {ca}", "-config", config,
            "-extensions", "ca")
    for name, ca, kind in (("server", "ca", "server"), ("client", "ca", "client"),
                           ("rogue-client", "rogue-ca", "client")):
        run("req", "-new", *key, "-keyout", path(f"{name}.key"), "-out", path(f"{name}.csr"),
            "-subj", f"/CN={'localhost' if kind == 'server' else name}", "-config", config)
        run("x509", "-req", "-in", path(f"{name}.csr"), "-CA", path(f"{ca}.crt"),
            "-CAkey", path(f"{ca}.key"), "-CAcreateserial", "-out", path(f"{name}.crt"),
            "-days", "1", "-extfile", config, "-extensions", kind)
    return path


def refused(test, client, call="health"):
    """Asserts the call fails at the connection (UNAVAILABLE) and returns the error."""
    with test.assertRaises(GraphbanditError) as e:
        if call == "health":
            client.health(timeout=5)
        else:
            client.describe_model(timeout=5)
    test.assertEqual(e.exception.code, grpc.StatusCode.UNAVAILABLE, str(e.exception))
    return e.exception


class TlsAndTokenTest(unittest.TestCase):
    """TLS (server certificate only) with an admin token and a bandit token."""

    @classmethod
    def setUpClass(cls):
        cls.pki = staticmethod(make_pki(os.path.join(WORK, "pki")))
        # Distinctive random tokens, so that finding them in the output means they leaked.
        cls.admin_token = "adm-" + secrets.token_hex(16)
        cls.bandit_token = "bnd-" + secrets.token_hex(16)
        cls.wrong_token = "wrong-" + secrets.token_hex(16)
        cls.admin_file = os.path.join(WORK, "admin.token")
        cls.bandit_file = os.path.join(WORK, "bandit.token")
        with open(cls.admin_file, "w") as f:
            f.write(f"  {cls.admin_token}\n")  # surrounding whitespace is not part of it
        with open(cls.bandit_file, "w") as f:
            f.write(cls.bandit_token + "\n")
        os.chmod(cls.admin_file, 0o600)
        os.chmod(cls.bandit_file, 0o600)
        cls.server = Server(
            "tls", f"--tls_cert_file={cls.pki('server.crt')}",
            f"--tls_key_file={cls.pki('server.key')}", f"--admin_token_file={cls.admin_file}",
            f"--bandit_token_file={cls.bandit_file}")

    @classmethod
    def tearDownClass(cls):
        status = cls.server.stop()
        output = cls.server.output()
        if status != 0:
            raise AssertionError(f"server exited with {status}: {output}")
        for secret in (cls.admin_token, cls.bandit_token, cls.wrong_token):
            if secret in output:
                raise AssertionError(f"a token appeared in the server's output: {output}")
        if "admin token required, bandit token required" not in output:
            raise AssertionError(f"the server did not say it requires tokens: {output}")

    def client(self, **kwargs):
        options = dict(tls_ca_file=self.pki("ca.crt"), timeout=10)
        options.update(kwargs)
        return Client(self.server.target, **options)

    def test_tls_and_server_name(self):
        with self.client() as c:
            self.assertEqual(c.health(), "SERVING")
        # The certificate names 127.0.0.1 and localhost; checking another name fails, and
        # --tls_server_name-like overrides work.
        with self.client(server_name="localhost") as c:
            self.assertEqual(c.health(), "SERVING")
        with self.client(server_name="not-this-server.example") as c:
            refused(self, c)
        # The CA as bytes instead of a file.
        with open(self.pki("ca.crt"), "rb") as f:
            ca = f.read()
        with Client(self.server.target, root_certificates=ca) as c:
            self.assertEqual(c.health(), "SERVING")
        # A client that trusts another CA does not accept this server.
        with self.client(tls_ca_file=self.pki("rogue-ca.crt")) as c:
            refused(self, c)

    def test_plaintext_is_refused(self):
        with Client(self.server.target, timeout=5) as c:
            refused(self, c)
        with Client(self.server.target, timeout=5, admin_token=self.admin_token) as c:
            refused(self, c, call="admin")

    def test_admin_token(self):
        def describe(**kwargs):
            with self.client(**kwargs) as c:
                return c.describe_model()

        for name, kwargs in (("no token", {}), ("wrong token", {"admin_token": self.wrong_token}),
                             ("bandit token", {"admin_token": self.bandit_token})):
            with self.subTest(name), self.assertRaises(GraphbanditError) as e:
                describe(**kwargs)
            self.assertEqual(e.exception.code, grpc.StatusCode.UNAUTHENTICATED, name)
            self.assertNotIn(self.admin_token, e.exception.message)
        self.assertEqual(describe(admin_token=self.admin_token).name, "default")
        self.assertEqual(describe(admin_token_file=self.admin_file).name, "default")
        with self.client(admin_token=self.admin_token) as c:
            self.assertEqual(c.add_edges([("t1", "t2", 1.0)]).added, 1)
            self.assertEqual(list(c.list_models().models), ["default"])
            # The admin token does not open the bandit service.
            with self.assertRaises(GraphbanditError) as e:
                c.select("t1", [("a", [1.0])])
            self.assertEqual(e.exception.code, grpc.StatusCode.UNAUTHENTICATED)

    def test_bandit_token(self):
        arms = [("a", [1.0, 0.0]), ("b", [0.0, 1.0])]
        for name, kwargs in (("no token", {}), ("wrong token", {"token": self.wrong_token}),
                             ("admin token", {"token": self.admin_token})):
            with self.subTest(name), self.client(**kwargs) as c:
                with self.assertRaises(GraphbanditError) as e:
                    c.select("tok-user", arms)
                self.assertEqual(e.exception.code, grpc.StatusCode.UNAUTHENTICATED, name)
                with self.assertRaises(GraphbanditError) as e:
                    c.reward("whatever", 1.0)
                self.assertEqual(e.exception.code, grpc.StatusCode.UNAUTHENTICATED, name)
        with self.client(token_file=self.bandit_file, admin_token=self.admin_token) as c:
            before = c.describe_model().decisions
            decision = c.select("tok-user", arms)
            self.assertEqual(c.reward(decision.event_id, 1.0).outcome, bandit_pb2.ACCEPTED)
            self.assertEqual(c.describe_model().decisions, before + 1)
            # Health needs no token.
        with self.client() as c:
            self.assertEqual(c.health(), "SERVING")

    def test_cli_over_tls_with_tokens(self):
        base = [CLI, f"--target={self.server.target}", f"--tls_ca_file={self.pki('ca.crt')}"]
        out = subprocess.run(base + [f"--admin_token_file={self.admin_file}", "DescribeModel"],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn('"name": "default"', out.stdout)
        out = subprocess.run(base + ["DescribeModel"], capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 2, out.stdout + out.stderr)
        self.assertIn("UNAUTHENTICATED", out.stderr)
        out = subprocess.run(base + [f"--token_file={self.bandit_file}", "select", "--user=cli",
                                     "a:1,0", "b:0,1"], capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn('"event_id"', out.stdout)
        # With the CLI's --tls_server_name, through the name the certificate has.
        out = subprocess.run([CLI, f"--target=127.0.0.1:{self.server.port}",
                              f"--tls_ca_file={self.pki('ca.crt')}", "--tls_server_name=localhost",
                              "health"], capture_output=True, text=True, timeout=30)
        self.assertEqual((out.returncode, out.stdout.strip()), (0, "SERVING"), out.stderr)

    def test_tokens_not_in_metrics(self):
        with self.client(admin_token=self.wrong_token) as c:
            with self.assertRaises(GraphbanditError):
                c.describe_model()
        metrics = urllib.request.urlopen(self.server.metrics_url, timeout=10).read().decode()
        self.assertIn('code="UNAUTHENTICATED"', metrics)
        for secret in (self.admin_token, self.bandit_token, self.wrong_token):
            self.assertNotIn(secret, metrics)


class MutualTlsTest(unittest.TestCase):
    """Mutual TLS: a client certificate signed by --tls_client_ca_file is required."""

    @classmethod
    def setUpClass(cls):
        cls.pki = staticmethod(make_pki(os.path.join(WORK, "pki-mtls")))
        cls.server = Server(
            "mtls", f"--tls_cert_file={cls.pki('server.crt')}",
            f"--tls_key_file={cls.pki('server.key')}",
            f"--tls_client_ca_file={cls.pki('ca.crt')}")

    @classmethod
    def tearDownClass(cls):
        status = cls.server.stop()
        if status != 0:
            raise AssertionError(f"server exited with {status}: {cls.server.output()}")

    def test_good_client_certificate(self):
        with Client(self.server.target, tls_ca_file=self.pki("ca.crt"),
                    tls_cert_file=self.pki("client.crt"), tls_key_file=self.pki("client.key")) as c:
            self.assertEqual(c.health(), "SERVING")
            self.assertEqual(c.describe_model().name, "default")
            decision = c.select("mtls-user", [("a", [1.0]), ("b", [2.0])])
            self.assertEqual(c.reward(decision.event_id, 0.5).outcome, bandit_pb2.ACCEPTED)
        # and the C++ CLI
        out = subprocess.run([CLI, f"--target={self.server.target}",
                              f"--tls_ca_file={self.pki('ca.crt')}",
                              f"--tls_cert_file={self.pki('client.crt')}",
                              f"--tls_key_file={self.pki('client.key')}", "DescribeModel"],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn('"decisions": "1"', out.stdout)

    def test_no_client_certificate_is_refused(self):
        with Client(self.server.target, tls_ca_file=self.pki("ca.crt")) as c:
            refused(self, c)
        out = subprocess.run([CLI, f"--target={self.server.target}",
                              f"--tls_ca_file={self.pki('ca.crt')}", "DescribeModel"],
                             capture_output=True, text=True, timeout=30)
        self.assertNotEqual(out.returncode, 0, out.stdout)

    def test_rogue_client_certificate_is_refused(self):
        with Client(self.server.target, tls_ca_file=self.pki("ca.crt"),
                    tls_cert_file=self.pki("rogue-client.crt"),
                    tls_key_file=self.pki("rogue-client.key")) as c:
            refused(self, c)

    def test_plaintext_is_refused(self):
        with Client(self.server.target, timeout=5) as c:
            refused(self, c)


class NamedFeaturesTest(unittest.TestCase):
    """The dict form of named features (graphbandit.named_features) against a real server."""

    def test_dicts_become_namespaces(self):
        spaces = named_features({"timeOfDay": "Morning", "device": {"os": "ios", "inches": 6.1,
                                                                     "screen": {"dark": True}},
                                 "tags": ["a", "b"]})
        self.assertEqual([ns.name for ns in spaces], ["", "device"])
        default = {f.name: f.value for f in spaces[0].features}
        self.assertEqual(default["timeOfDay"].text, "Morning")
        self.assertEqual(list(default["tags"].strings.values), ["a", "b"])
        device = {f.name: f.value for f in spaces[1].features}
        self.assertEqual(device["os"].text, "ios")
        self.assertEqual(device["inches"].number, 6.1)
        self.assertEqual(device["screen.dark"].number, 1.0)
        with self.assertRaises(TypeError):
            named_features({"n": {"bad": [1, 2]}})
        with self.assertRaises(TypeError):
            named_features(["not", "a", "dict"])

    def test_learns_a_categorical_task_from_named_features(self):
        server = Server("named")
        devices, items = ["phone", "tablet", "desktop"], ["news", "video", "game"]
        best_late, rounds, late = 0, 240, 60
        try:
            with Client(server.target, timeout=10) as c:
                for t in range(rounds):
                    d = t % 3
                    candidates = {item: {"item": {"kind": item, "tags": [item[0]]}}
                                  for item in items}
                    context = {"device": {"type": devices[d], "inches": [6, 10, 24][d]}}
                    decision = c.select("anyone", candidates, context)
                    chosen = items.index(decision.arms[0].arm_id)
                    if t >= rounds - late and chosen == d:
                        best_late += 1
                    c.reward(decision.event_id, 0.9 if chosen == d else 0.2)
                description = c.describe_model()
                with self.assertRaises(GraphbanditError) as e:
                    c.select("anyone", {"news": {"item": {"kind": 3}}}, {"device": {"type": "x"}})
                self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
                self.assertIn('"kind"', e.exception.message)
                # Dense and named together: the model's dense dimensions are 0 here.
                with self.assertRaises(GraphbanditError) as e:
                    c.select("anyone", {"news": ([1.0], {"item": {"kind": "news"}})})
                self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        finally:
            self.assertEqual(server.stop(), 0, server.output())
        self.assertGreaterEqual(best_late, late * 8 // 10, f"{best_late} of {late}")
        self.assertEqual(description.decisions, rounds)
        self.assertEqual(description.context_features.namespaces[0].name, "device")
        self.assertEqual(description.arm_features.distinct_keys, 6)  # 3 kinds, 3 tags


class ModelHeaderTest(unittest.TestCase):
    """The client names the model in the x-graphbandit-model header, which a proxy in front of a
    cluster routes by (deploy/cluster/nginx.conf); the default model sends none."""

    def test_model_header(self):
        from concurrent import futures

        from graphbandit.v1 import bandit_pb2_grpc

        seen = []

        class Recorder(bandit_pb2_grpc.BanditServiceServicer):
            def SelectArm(self, request, context):
                seen.append(("SelectArm", dict(context.invocation_metadata())))
                return bandit_pb2.SelectArmResponse(event_id="e")

            def ReportReward(self, request, context):
                seen.append(("ReportReward", dict(context.invocation_metadata())))
                return bandit_pb2.ReportRewardResponse()

        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        bandit_pb2_grpc.add_BanditServiceServicer_to_server(Recorder(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        try:
            with Client(f"127.0.0.1:{port}", timeout=5, model="news") as c:
                c.select("u", {"a": [1.0]})
                c.select("u", {"a": [1.0]}, model="ads")
                c.reward("e", 1.0)
            with Client(f"127.0.0.1:{port}", timeout=5) as c:
                c.select("u", {"a": [1.0]})
        finally:
            server.stop(None)
        headers = [meta.get("x-graphbandit-model") for _, meta in seen]
        self.assertEqual(headers, ["news", "ads", "news", None])


if __name__ == "__main__":
    unittest.main(verbosity=2)

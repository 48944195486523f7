#!/usr/bin/python3
"""A real Prometheus against a real graphbandit-server.

usage: prometheus_test.py BUILD_DIR SOURCE_DIR [--part=metrics|dashboard|all] [--dashboard=JSON]

Starts graphbandit-server on loopback (free ports, a temporary state directory, a configuration
with the default model and a "tiny" model whose ledger holds 4 decisions) and Debian's
`prometheus` scraping it every second with deploy/prometheus/alerts.yml loaded.

--part=metrics: makes a known number of calls with graphbandit-cli (accepted, duplicate and
  unknown-event rewards, INVALID_ARGUMENT and RESOURCE_EXHAUSTED failures) and asserts through
  Prometheus's HTTP API that the target is up and that every counter and histogram count equals
  exactly the calls made; that every alerting rule is loaded and evaluates cleanly, and that the
  alerts these calls provoke (client errors, server errors, ledger near full) and only those are
  pending; and that `promtool check metrics` finds nothing to say about a raw scrape.
--part=dashboard: checks deploy/grafana/graphbandit.json (or --dashboard) against the live
  server: every panel query, with its template variables substituted, parses and runs in
  Prometheus and returns data; every metric name it references is one the server exports; the
  required panels exist.

Only the Python standard library is used (Debian's /usr/bin/python3).
"""
import argparse
import ctypes
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

SCRAPE_SECONDS = 2  # interval and timeout: one slow scrape on a busy machine must not fail
JOB = "graphbandit"


class TestFailure(Exception):
    pass


def check(condition, message):
    if not condition:
        raise TestFailure(message)


def wait_for(what, predicate, timeout, interval=0.2):
    """Calls predicate() until it returns a true value (returned) or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    last_error = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except (TestFailure, OSError, ValueError, KeyError) as e:
            last_error = e
        time.sleep(interval)
    raise TestFailure(f"timed out after {timeout}s waiting for {what}"
                      + (f" (last error: {last_error})" if last_error else ""))


def die_with_parent():
    """In the child: get SIGKILL if the test process dies (e.g. killed by a ctest timeout)."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode()


class Environment:
    """The server and Prometheus, in a temporary directory; stopped and removed on exit."""

    def __init__(self, build, source):
        self.build = build
        self.source = source
        self.server_bin = os.path.join(build, "server", "graphbandit-server")
        self.cli_bin = os.path.join(build, "client", "graphbandit-cli")
        self.rules = os.path.join(source, "deploy", "prometheus", "alerts.yml")
        self.work = tempfile.mkdtemp(prefix="gb-prometheus-test.")
        self.server = None
        self.prometheus = None
        self.calls = 0

    def __enter__(self):
        try:
            self._start_server()
            self._start_prometheus()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        for name, proc in (("prometheus", self.prometheus), ("server", self.server)):
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                print(f"{name} did not stop on SIGTERM; killing it", file=sys.stderr)
                proc.kill()
                proc.wait()
        for f in ("server.log", "prometheus.log"):
            if exc and exc[0] is not None:
                self.dump_log(f)
        shutil.rmtree(self.work, ignore_errors=True)
        return False

    def dump_log(self, name, tail=40):
        path = os.path.join(self.work, name)
        if os.path.exists(path):
            with open(path, errors="replace") as f:
                lines = f.readlines()[-tail:]
            for line in lines:
                print(f"  {name}: {line.rstrip()}", file=sys.stderr)

    def _start_server(self):
        config = os.path.join(self.work, "models.textproto")
        with open(config, "w") as f:
            f.write('models { name: "default" }\n'
                    'models { name: "tiny" ledger { max_decisions: 4 } }\n')
        port_file = os.path.join(self.work, "ports")
        log = open(os.path.join(self.work, "server.log"), "w")
        self.server = subprocess.Popen(
            [self.server_bin, "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
             f"--state_dir={os.path.join(self.work, 'state')}", f"--port_file={port_file}",
             f"--config={config}"],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
        log.close()

        def ports():
            check(self.server.poll() is None, "graphbandit-server exited at start")
            with open(port_file) as f:
                fields = f.read().split()
            return fields if len(fields) == 2 else None

        grpc_port, metrics_port = wait_for("the server's port file", ports, 20)
        self.target = f"127.0.0.1:{grpc_port}"
        self.metrics_address = f"127.0.0.1:{metrics_port}"
        self.metrics_url = f"http://{self.metrics_address}/metrics"

    def _start_prometheus(self):
        prometheus = shutil.which("prometheus")
        check(prometheus, "`prometheus` not found: apt-get install prometheus")
        config = os.path.join(self.work, "prometheus.yml")
        with open(config, "w") as f:
            f.write(f"""global:
  scrape_interval: {SCRAPE_SECONDS}s
  scrape_timeout: {SCRAPE_SECONDS}s
  evaluation_interval: {SCRAPE_SECONDS}s
rule_files:
  - {json.dumps(self.rules)}
scrape_configs:
  - job_name: {JOB}
    static_configs:
      - targets: ["{self.metrics_address}"]
""")
        port = free_port()
        self.prom_url = f"http://127.0.0.1:{port}"
        log = open(os.path.join(self.work, "prometheus.log"), "w")
        self.prometheus = subprocess.Popen(
            [prometheus, f"--config.file={config}",
             f"--storage.tsdb.path={os.path.join(self.work, 'tsdb')}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL, cwd=self.work,
            preexec_fn=die_with_parent)
        log.close()

        def ready():
            check(self.prometheus.poll() is None, "prometheus exited at start")
            return http_get(self.prom_url + "/-/ready", timeout=2) is not None

        wait_for("prometheus to be ready", ready, 30)
        wait_for("the first scrape of the server", lambda: self.query(f'up{{job="{JOB}"}}'), 30)

    # ---- graphbandit-cli ----

    def cli(self, *args, expect=None):
        """Runs graphbandit-cli; returns its JSON output, or checks it failed with `expect`."""
        self.calls += 1
        result = subprocess.run([self.cli_bin, f"--target={self.target}", *args],
                                capture_output=True, text=True, timeout=30)
        if expect is None:
            check(result.returncode == 0,
                  f"graphbandit-cli {' '.join(args)} failed: {result.stderr.strip()}")
            return json.loads(result.stdout)
        check(result.returncode == 2 and f"error: {expect}:" in result.stderr,
              f"graphbandit-cli {' '.join(args)}: expected {expect}, got exit "
              f"{result.returncode}: {result.stderr.strip() or result.stdout.strip()}")
        return None

    # ---- Prometheus HTTP API ----

    def api(self, path, **params):
        url = self.prom_url + path + ("?" + urllib.parse.urlencode(params) if params else "")
        try:
            body = http_get(url)
        except urllib.error.HTTPError as e:
            body = e.read().decode()
        reply = json.loads(body)
        check(reply.get("status") == "success",
              f"{path} {params}: {reply.get('errorType')}: {reply.get('error')}")
        return reply["data"]

    def query(self, expr):
        data = self.api("/api/v1/query", query=expr)
        check(data["resultType"] == "vector", f"{expr}: result type {data['resultType']}")
        return data["result"]

    def value(self, expr):
        result = self.query(expr)
        check(len(result) == 1, f"{expr}: expected one series, got {len(result)}: {result}")
        return float(result[0]["value"][1])

    def wait_for_scrape_after(self, when):
        """Waits until Prometheus holds a successful scrape of the server that started after
        `when` (a scrape that timed out on a busy machine does not count)."""
        # timestamp() must take the raw series: after `== 1` it would give the query's time.
        up = f'up{{job="{JOB}"}}'

        def scraped():
            return self.value(f"timestamp({up})") > when and self.value(up) == 1
        wait_for(f"a successful scrape after t={when:.3f}", scraped, 30)

    def scrape(self):
        return http_get(self.metrics_url)


# ------------------------------------------------------------------------------------------
# --part=metrics


def alert_names(rules_path):
    with open(rules_path) as f:
        return set(re.findall(r"^\s*-\s*alert:\s*(\S+)\s*$", f.read(), re.M))


def test_metrics(env):
    N_SELECT, N_REWARD, N_BAD_SELECT, N_BAD_REWARD = 6, 4, 3, 3
    TINY_CAPACITY = 4
    bad_select = '{"user_id":"someone","candidates":[]}'
    bad_reward = '{"event_id":""}'
    cands = ["a:1,0", "b:0,1", "c:0.7,0.7"]

    # Phase 1: one call of every kind, so that each series exists in Prometheus before the rest
    # of the calls increase it (rate() in the alert rules needs two samples of a series).
    events = [env.cli("select", "--user=u0", *cands)["event_id"]]
    env.cli("reward", f"--event_id={events[0]}", "--reward=1")
    env.cli("SelectArm", bad_select, expect="INVALID_ARGUMENT")
    env.cli("ReportReward", bad_reward, expect="INVALID_ARGUMENT")
    for i in range(TINY_CAPACITY):  # fills the tiny ledger: nothing is rewarded there
        env.cli("select", "--model=tiny", f"--user=t{i}", *cands)
    env.cli("select", "--model=tiny", "--user=t9", *cands, expect="RESOURCE_EXHAUSTED")
    env.wait_for_scrape_after(time.time())

    # Phase 2: the rest.
    for i in range(1, N_SELECT):
        events.append(env.cli("select", f"--user=u{i}", *cands)["event_id"])
    for event in events[1:N_REWARD]:
        env.cli("reward", f"--event_id={event}", "--reward=0.5")
    duplicate = env.cli("reward", f"--event_id={events[0]}", "--reward=1")
    check(duplicate["outcome"] == "DUPLICATE", f"repeated reward: {duplicate}")
    unknown = env.cli("ReportReward", '{"event_id":"no-such-event","reward":1}')
    check(unknown["outcome"] == "UNKNOWN_EVENT", f"reward for an unknown event: {unknown}")
    for _ in range(N_BAD_SELECT - 1):
        env.cli("SelectArm", bad_select, expect="INVALID_ARGUMENT")
    for _ in range(N_BAD_REWARD - 1):
        env.cli("ReportReward", bad_reward, expect="INVALID_ARGUMENT")
    env.cli("select", "--model=tiny", "--user=t9", *cands, expect="RESOURCE_EXHAUSTED")
    env.cli("DescribeModel")

    # Rewards are learned (and their freshness observed) just after they are acknowledged.
    def learned():
        text = env.scrape()
        return (f'graphbandit_rewards_learned{{model="default"}} {N_REWARD}\n' in text and
                f'graphbandit_state_freshness_seconds_count{{model="default"}} {N_REWARD}\n' in text)

    wait_for("the server to learn every accepted reward", learned, 20)
    env.wait_for_scrape_after(time.time())

    # Everything below reads the same (newest) scrape: it must be exact, not eventually right.
    sel = f'job="{JOB}", instance="{env.metrics_address}"'
    expected_rpcs = {
        ("SelectArm", "OK"): N_SELECT + TINY_CAPACITY,
        ("SelectArm", "INVALID_ARGUMENT"): N_BAD_SELECT,
        ("SelectArm", "RESOURCE_EXHAUSTED"): 2,
        ("ReportReward", "OK"): N_REWARD + 2,  # + the duplicate and the unknown event
        ("ReportReward", "INVALID_ARGUMENT"): N_BAD_REWARD,
        ("DescribeModel", "OK"): 1,
    }
    check(sum(expected_rpcs.values()) == env.calls, "test bookkeeping: calls != expected RPCs")
    expectations = [
        (f'up{{{sel}}}', 1),
        (f'sum(graphbandit_rpc_requests_total{{{sel}}})', env.calls),
        (f'count(graphbandit_rpc_requests_total{{{sel}}})', len(expected_rpcs)),
        (f'count(graphbandit_rpc_duration_seconds_count{{{sel}}})', len(expected_rpcs)),
        (f'graphbandit_decisions_total{{{sel}, model="default"}}', N_SELECT),
        (f'graphbandit_decisions_total{{{sel}, model="tiny"}}', TINY_CAPACITY),
        (f'graphbandit_rewards_total{{{sel}, model="default", outcome="accepted"}}', N_REWARD),
        (f'graphbandit_rewards_total{{{sel}, model="default", outcome="duplicate"}}', 1),
        (f'graphbandit_rewards_total{{{sel}, model="", outcome="unknown_event"}}', 1),
        (f'count(graphbandit_rewards_total{{{sel}}})', 3),
        (f'graphbandit_rewards_learned{{{sel}, model="default"}}', N_REWARD),
        (f'graphbandit_rewards_learned{{{sel}, model="tiny"}}', 0),
        (f'graphbandit_state_freshness_seconds_count{{{sel}, model="default"}}', N_REWARD),
        (f'graphbandit_state_freshness_seconds_bucket{{{sel}, model="default", le="+Inf"}}',
         N_REWARD),
        (f'graphbandit_state_freshness_seconds_count{{{sel}, model="tiny"}}', 0),
        (f'graphbandit_pending_decisions{{{sel}, model="default"}}', N_SELECT - N_REWARD),
        (f'graphbandit_pending_decisions{{{sel}, model="tiny"}}', TINY_CAPACITY),
        (f'graphbandit_ledger_decisions{{{sel}, model="default"}}', N_SELECT),
        (f'graphbandit_ledger_capacity{{{sel}, model="tiny", aggregation="FIRST"}}',
         TINY_CAPACITY),
        (f'graphbandit_ledger_capacity{{{sel}, model="default", aggregation="FIRST"}}', 1000000),
        (f'graphbandit_queued_operations{{{sel}, model="default"}}', 0),
    ]
    for (method, code), n in sorted(expected_rpcs.items()):
        labels = f'{sel}, method="{method}", code="{code}"'
        expectations += [
            (f'graphbandit_rpc_requests_total{{{labels}}}', n),
            (f'graphbandit_rpc_duration_seconds_count{{{labels}}}', n),
            (f'graphbandit_rpc_duration_seconds_bucket{{{labels}, le="+Inf"}}', n),
        ]
    for expr, want in expectations:
        got = env.value(expr)
        check(got == want, f"{expr} = {got}, expected {want}")
        print(f"ok  {expr} = {got:g}")
    # Durable state: every accepted reward waited for an fdatasync of its record.
    syncs = env.value(f'graphbandit_log_syncs_total{{{sel}, model="default"}}')
    check(syncs >= 1, f"no log sync recorded for model default ({syncs})")
    print(f"ok  graphbandit_log_syncs_total{{model=\"default\"}} = {syncs:g} (>= 1)")

    # The alerting rules: all loaded, all evaluated without error.
    want_names = alert_names(env.rules)
    check(len(want_names) >= 6, f"alerts.yml declares only {sorted(want_names)}")

    def rules_evaluated():
        rules = [r for g in env.api("/api/v1/rules")["groups"] for r in g["rules"]]
        return rules if all(r["health"] != "unknown" for r in rules) else None

    rules = wait_for("every rule to be evaluated", rules_evaluated, 30)
    loaded = {r["name"] for r in rules if r["type"] == "alerting"}
    check(loaded == want_names, f"prometheus loaded alerts {sorted(loaded)}, "
                                f"alerts.yml declares {sorted(want_names)}")
    for r in rules:
        check(r["health"] == "ok", f"rule {r['name']}: {r['health']}: {r.get('lastError')}")
    print(f"ok  {len(loaded)} alerting rules loaded and evaluated: {', '.join(sorted(loaded))}")

    # What these calls must provoke: pending (their for: is minutes) and nothing else.
    want_alerts = {
        ("GraphbanditClientErrors", "SelectArm", "INVALID_ARGUMENT", ""),
        ("GraphbanditClientErrors", "ReportReward", "INVALID_ARGUMENT", ""),
        ("GraphbanditServerErrors", "SelectArm", "RESOURCE_EXHAUSTED", ""),
        ("GraphbanditLedgerNearFull", "", "", "tiny"),
    }

    def active():
        return {(a["labels"]["alertname"], a["labels"].get("method", ""),
                 a["labels"].get("code", ""), a["labels"].get("model", "")): a
                for a in env.api("/api/v1/alerts")["alerts"]}

    alerts = wait_for("the expected alerts to become active",
                      lambda: (lambda a: a if set(a) >= want_alerts else None)(active()), 30)
    check(set(alerts) == want_alerts,
          f"active alerts {sorted(alerts)}, expected exactly {sorted(want_alerts)}")
    for key, a in sorted(alerts.items()):
        check(a["state"] == "pending", f"alert {key} is {a['state']}, expected pending")
        check(a["labels"].get("severity") in ("warning", "critical"), f"alert {key}: no severity")
        check(a["labels"].get("instance") == env.metrics_address, f"alert {key}: {a['labels']}")
        print(f"ok  alert {key[0]} {' '.join(k for k in key[1:] if k)} pending "
              f"(severity {a['labels']['severity']})")

    # promtool check metrics on a raw scrape.
    promtool = shutil.which("promtool")
    check(promtool, "`promtool` not found: apt-get install prometheus")
    text = env.scrape()
    result = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                            text=True, timeout=60)
    check(result.returncode == 0 and not result.stdout.strip() and not result.stderr.strip(),
          f"promtool check metrics (exit {result.returncode}):\n{result.stdout}{result.stderr}")
    print(f"ok  promtool check metrics: clean ({len(text.splitlines())} lines)")


# ------------------------------------------------------------------------------------------
# --part=dashboard

PROMQL_WORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
                "group_right", "bool", "offset", "inf", "nan"}
# Series Prometheus makes for every target itself.
PROMETHEUS_SERIES = {"up", "scrape_duration_seconds", "scrape_samples_scraped",
                     "scrape_samples_post_metric_relabeling", "scrape_series_added"}


def metric_names(expr):
    """The metric names a PromQL expression selects (identifiers that are not functions,
    keywords, labels, durations or numbers)."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)
    s = re.sub(r"\{[^}]*\}", " ", s)  # label matchers
    s = re.sub(r"\[[^\]]*\]", " ", s)  # range and subquery durations
    s = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    s = re.sub(r"\boffset\s+-?\w+|@\s*\S+", " ", s)
    s = re.sub(r"(?<![\w:])(?:0x[0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+)", " ", s)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", s):
        if s[m.end():].lstrip().startswith("("):  # a function call
            continue
        if m.group(0).lower() in PROMQL_WORDS:
            continue
        names.add(m.group(0))
    return names


def exported_families(scrape_text):
    """{family name: type} from the # TYPE lines of an exposition."""
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", scrape_text, re.M))


def series_name_exported(name, families):
    """Whether `name` is a series name of the exposition (histograms: _bucket, _sum, _count)."""
    kind = families.get(name)
    if kind is not None:
        return kind not in ("histogram", "summary")  # the bare name of a histogram is no series
    for suffix, kinds in (("_bucket", ("histogram",)), ("_sum", ("histogram", "summary")),
                          ("_count", ("histogram", "summary"))):
        if name.endswith(suffix) and families.get(name[:-len(suffix)]) in kinds:
            return True
    return False


def substitute(expr, values):
    """Replaces Grafana variables ($x, ${x}, ${x:format}, [[x]]) by concrete values."""
    def one(m):
        name = m.group(1) or m.group(2) or m.group(3)
        check(name in values, f"unknown template variable ${name} in: {expr}")
        return values[name]
    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]", one, expr)


def all_panels(panels):
    for p in panels:
        yield p
        yield from all_panels(p.get("panels", []))


REQUIRED_PANELS = [  # (topic, title pattern, metric the panel must query)
    ("request rate by method", r"request rate", "graphbandit_rpc_requests_total"),
    ("p50/p99 latency by method", r"latency", "graphbandit_rpc_duration_seconds_bucket"),
    ("error codes", r"error.*code", "graphbandit_rpc_requests_total"),
    ("decisions", r"decisions/s|decisions per", "graphbandit_decisions_total"),
    ("rewards by outcome", r"rewards by outcome", "graphbandit_rewards_total"),
    ("reward rate", r"reward rate", "graphbandit_rewards_total"),
    ("dictionary size", r"dictionary", "graphbandit_dictionary_size"),
    ("users", r"users", "graphbandit_users"),
    ("freshness", r"freshness", "graphbandit_state_freshness_seconds_bucket"),
    ("pending decisions", r"pending", "graphbandit_pending_decisions"),
    ("queued operations", r"queued", "graphbandit_queued_operations"),
    ("snapshot age", r"snapshot age", "graphbandit_last_snapshot_timestamp_seconds"),
    ("log syncs", r"log syncs", "graphbandit_log_syncs_total"),
    ("policy value", r"policy value", "graphbandit_policy_value"),
]
# Panels that may show nothing on a fresh server (no snapshot is written before shutdown).
MAY_BE_EMPTY = {"Snapshot age"}


def test_dashboard(env, dashboard_path):
    with open(dashboard_path) as f:
        dashboard = json.load(f)

    # Some traffic, so that every series exists (including an error code).
    # (Eleven rewards: a policy value needs 10 effective decisions.)
    events = [env.cli("select", f"--user=d{i}", "a:1,0", "b:0,1")["event_id"] for i in range(12)]
    for event in events[:11]:
        env.cli("reward", f"--event_id={event}", "--reward=1")
    env.cli("SelectArm", '{"user_id":"x","candidates":[]}', expect="INVALID_ARGUMENT")
    env.cli("SelectArm", '{"user_id":"x","candidates":[]}', expect="INVALID_ARGUMENT")
    env.wait_for_scrape_after(time.time() + 3 * SCRAPE_SECONDS)  # enough samples for rate()

    scrape = env.scrape()
    families = exported_families(scrape)
    check(len(families) > 10, "the scrape has almost no metric families")
    up = env.query(f'up{{job="{JOB}"}}')
    check(up and up[0]["value"][1] == "1", f"target not up: {up}")

    # Template variables.
    variables = {v["name"]: v for v in dashboard.get("templating", {}).get("list", [])}
    for name in ("datasource", "job", "instance", "model"):
        check(name in variables, f"dashboard has no ${name} variable")
    check(variables["datasource"]["type"] == "datasource"
          and variables["datasource"]["query"] == "prometheus",
          "$datasource is not a Prometheus data source variable")
    values = {"datasource": "prometheus", "job": JOB, "instance": env.metrics_address,
              "model": "default", "__rate_interval": f"{10 * SCRAPE_SECONDS}s",
              "__interval": f"{SCRAPE_SECONDS}s", "__range": "5m", "__range_s": "300",
              "__interval_ms": str(SCRAPE_SECONDS * 1000)}

    problems = []
    queries = []  # (where, expr as written)
    for name, v in variables.items():
        if v["type"] != "query":
            continue
        q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\)\s*", q)
        if not m:
            problems.append(f"variable ${name}: unsupported query {q!r}")
            continue
        selector, label = m.groups()
        queries.append((f"variable ${name}", selector))
        # The variable must find values: the label exists on that metric for this server.
        found = env.query(f"count by ({label}) ({substitute(selector, values)})")
        if not any(label in r["metric"] for r in found):
            problems.append(f"variable ${name}: no {label} values from {selector}")

    panels = [p for p in all_panels(dashboard.get("panels", [])) if p.get("type") != "row"]
    check(panels, "dashboard has no panels")
    panel_metrics = {}
    for p in panels:
        title = p.get("title", "?")
        if (p.get("datasource") or {}).get("uid") not in ("${datasource}", "$datasource"):
            problems.append(f"panel {title!r}: data source is not $datasource")
        targets = p.get("targets", [])
        if not targets:
            problems.append(f"panel {title!r}: no queries")
        for t in targets:
            if (t.get("datasource") or p.get("datasource") or {}).get("uid") not in (
                    "${datasource}", "$datasource"):
                problems.append(f"panel {title!r} query {t.get('refId')}: data source is not "
                                "$datasource")
            expr = t.get("expr", "")
            queries.append((f"panel {title!r} query {t.get('refId')}", expr))
            panel_metrics.setdefault(title, set()).update(metric_names(expr))
            try:
                result = env.query(substitute(expr, values))
            except TestFailure as e:
                problems.append(f"panel {title!r}: query does not run: {e}")
                continue
            if not result and title not in MAY_BE_EMPTY:
                problems.append(f"panel {title!r}: no data for {substitute(expr, values)}")

    checked = set()
    for where, expr in queries:
        names = metric_names(expr)
        if not names:
            problems.append(f"{where}: selects no metric: {expr}")
        for name in sorted(names):
            checked.add(name)
            if name in PROMETHEUS_SERIES:
                continue
            if not series_name_exported(name, families):
                problems.append(f"{where}: metric {name} is not exported by the server")

    for topic, pattern, metric in REQUIRED_PANELS:
        if not any(re.search(pattern, title, re.I) and metric in names
                   for title, names in panel_metrics.items()):
            problems.append(f"no panel for {topic!r} (title matching /{pattern}/ querying "
                            f"{metric})")
    latency = [t["expr"] for p in panels if re.search("latency", p.get("title", ""), re.I)
               for t in p.get("targets", [])]
    for q in ("0.5", "0.99"):
        if not any(re.search(rf"histogram_quantile\(\s*{re.escape(q)}\s*,", e) for e in latency):
            problems.append(f"latency panel has no {q} quantile")

    # Provisioning: the data source uid the dashboard defaults to.
    ds_yaml = os.path.join(env.source, "deploy", "grafana", "provisioning", "datasources")
    uids = set()
    for f in os.listdir(ds_yaml):
        with open(os.path.join(ds_yaml, f)) as fh:
            uids.update(re.findall(r"^\s*uid:\s*\"?([\w-]+)\"?\s*$", fh.read(), re.M))
    default_uid = (variables["datasource"].get("current") or {}).get("value")
    if default_uid not in uids:
        problems.append(f"$datasource defaults to {default_uid!r}, provisioned uids: {uids}")

    if problems:
        raise TestFailure("dashboard problems:\n  " + "\n  ".join(problems))
    print(f"ok  {len(panels)} panels, {len(queries)} queries: all run in Prometheus; "
          f"{len(checked)} metric names, all exported: {', '.join(sorted(checked))}")
    print(f"ok  required panels present: {', '.join(t for t, _, _ in REQUIRED_PANELS)}")


def self_test():
    """The metric-name extraction on tricky expressions (no server needed)."""
    cases = {
        'sum by (method, le) (rate(a_bucket{job=~"$job", code!="OK"}[$__rate_interval]))':
            {"a_bucket"},
        'x / ignoring (code) group_left sum(rate(y_total[5m] offset 1h))': {"x", "y_total"},
        'time() - (z > 0) and on (model) w unless v': {"z", "w", "v"},
        'histogram_quantile(0.99, sum(rate(h_bucket[1m])) by (le)) > 1e3': {"h_bucket"},
        'clamp_min(deriv(g[5m]), 0) * -1.5e-3 + inf': {"g"},
    }
    for expr, want in cases.items():
        got = metric_names(expr)
        check(got == want, f"metric_names({expr!r}) = {got}, expected {want}")
    fam = {"h": "histogram", "c_total": "counter", "s": "summary"}
    for name, ok in (("h_bucket", True), ("h_count", True), ("h", False), ("c_total", True),
                     ("c_total_count", False), ("s_sum", True), ("s_bucket", False),
                     ("missing", False)):
        check(series_name_exported(name, fam) == ok, f"series_name_exported({name})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("build")
    parser.add_argument("source")
    parser.add_argument("--part", choices=("metrics", "dashboard", "all"), default="all")
    parser.add_argument("--dashboard", help="dashboard JSON (default: the source tree's)")
    args = parser.parse_args()
    # SIGTERM (e.g. from a test runner) unwinds normally: processes stopped, temp dir removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    build, source = os.path.abspath(args.build), os.path.abspath(args.source)
    dashboard = args.dashboard or os.path.join(source, "deploy", "grafana", "graphbandit.json")
    try:
        self_test()
        if args.part in ("metrics", "all"):
            with Environment(build, source) as env:
                test_metrics(env)
        if args.part in ("dashboard", "all"):
            with Environment(build, source) as env:
                test_dashboard(env, dashboard)
    except TestFailure as e:
        print(f"FAIL: {e}", file=sys.stderr)
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())

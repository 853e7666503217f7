"""Helpers for the deploy/ tests: read a Prometheus text exposition, pull metric and label
names out of PromQL, and run a throw-away Prometheus server (Debian package `prometheus`) on
loopback. Standard library only."""
import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request

# ---- exposition ------------------------------------------------------------------------------

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_exposition(text):
    """Returns [(name, {label: value}, value)] for every sample line."""
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            raise ValueError("not a sample line: " + line)
        labels = dict(_LABEL.findall(m.group(3) or ""))
        samples.append((m.group(1), labels, float(m.group(4))))
    return samples


def exported_names(text):
    """(sample names, label names) of an exposition; histogram series appear as _bucket/_sum/_count."""
    names, labels = set(), set()
    for name, lbls, _ in parse_exposition(text):
        names.add(name)
        labels.update(lbls)
    return names, labels


# ---- PromQL ----------------------------------------------------------------------------------

_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
             "unless", "offset", "inf", "nan",
             # aggregation operators, which may be followed by `by (...)` rather than `(`
             "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
             "bottomk", "topk", "quantile"}
_LABEL_LIST = re.compile(r'\b(by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)')
_MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)')
_IDENT = re.compile(r'[a-zA-Z_:][a-zA-Z0-9_:]*')


def promql_names(expr):
    """(metric names, label names) referenced by a PromQL expression. Grafana variables ($x,
    ${x}) and string literals are ignored; functions are identifiers followed by '('."""
    s = re.sub(r'\$\{?[a-zA-Z_]\w*\}?', ' ', expr)
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', s)
    s = re.sub(r'\[[^\]]*\]', ' ', s)  # range and subquery durations
    labels = set()
    for m in _LABEL_LIST.finditer(s):
        labels.update(x.strip() for x in m.group(2).split(",") if x.strip())
    s = _LABEL_LIST.sub(r' \1 ', s)
    for m in re.finditer(r'\{([^}]*)\}', s):
        labels.update(n for n, _ in _MATCHER.findall(m.group(1)))
    s = re.sub(r'\{[^}]*\}', ' ', s)
    s = re.sub(r'(?<![a-zA-Z0-9_:.])\d+(\.\d+)?([eE][+-]?\d+)?', ' ', s)  # numbers
    metrics = set()
    for m in _IDENT.finditer(s):
        name = m.group(0)
        rest = s[m.end():].lstrip()
        if name in _KEYWORDS or rest.startswith("("):
            continue
        metrics.add(name)
    return metrics, labels


# ---- a Prometheus server ---------------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    """`prometheus` scraping `targets` (host:port list) every second, in a temporary folder."""

    def __init__(self, targets, workdir, job="strata", rule_files=()):
        self.binary = shutil.which("prometheus")
        if not self.binary:
            raise FileNotFoundError("prometheus not installed (Debian package prometheus)")
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        os.makedirs(workdir, exist_ok=True)
        config = os.path.join(workdir, "prometheus.yml")
        rules = "".join("  - %s\n" % json.dumps(os.path.abspath(f)) for f in rule_files)
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "  evaluation_interval: 1s\n"
                    + ("rule_files:\n" + rules if rules else "")
                    + "scrape_configs:\n  - job_name: %s\n    static_configs:\n"
                      "      - targets: %s\n" % (json.dumps(job), json.dumps(list(targets))))
        self.log_path = os.path.join(workdir, "prometheus.log")
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [self.binary, "--config.file=" + config,
             "--storage.tsdb.path=" + os.path.join(workdir, "tsdb"),
             "--web.listen-address=127.0.0.1:%d" % self.port, "--log.level=warn"],
            stdout=self._log, stderr=subprocess.STDOUT)

    def log(self):
        with open(self.log_path) as f:
            return f.read()

    def api(self, path, **params):
        url = self.url + path + ("?" + urllib.parse.urlencode(params) if params else "")
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:  # 400/422: bad query, with an error body
            return json.load(e)

    def query(self, expr):
        """The /api/v1/query answer: {"status", "data": {"result": [...]}, "error"?}."""
        return self.api("/api/v1/query", query=expr)

    def wait_until(self, predicate, timeout_s, what):
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("prometheus exited:\n" + self.log())
            try:
                value = predicate()
                if value:
                    return value
            except (OSError, ValueError, LookupError):  # not up yet, or no sample yet
                pass
            time.sleep(0.2)
        raise TimeoutError("timed out after %ss waiting for %s\n%s" % (timeout_s, what, self.log()))

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

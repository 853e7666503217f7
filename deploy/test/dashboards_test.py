#!/usr/bin/env python3
"""Checks deploy/grafana/*.json and deploy/prometheus/*.yml against what Strata exports.

usage: dashboards_test.py EXPOSITION_BINARY [WORKDIR]

EXPOSITION_BINARY prints a /metrics exposition of server/metrics (strata_metrics_exposition).
1. The committed dashboards are what deploy/grafana/generate_dashboards.py writes.
2. Every dashboard is importable JSON (uid, title, panels with unique ids, grid positions,
   queries with refIds) and every metric and label in its queries, template variables and legends
   is one the exposition has.
3. Every metric in the rules is exported (or recorded by another rule); `promtool check rules` and
   `promtool test rules` pass.
4. A real Prometheus scrapes that exposition; every dashboard query, with Grafana's variables
   substituted, is accepted and returns series (so names, label matchers and syntax all hold).
"""
import glob
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import promlib  # noqa: E402

DEPLOY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRAFANA = os.path.join(DEPLOY, "grafana")
RULES = os.path.join(DEPLOY, "prometheus", "strata-rules.yml")
RULE_TESTS = os.path.join(DEPLOY, "prometheus", "strata-rules.test.yml")

failures = []


def check(ok, message):
    if not ok:
        failures.append(message)
    return ok


def dashboard_queries(dashboard):
    """(where, expr, legend) for every panel target and template variable query."""
    out = []
    for panel in dashboard["panels"]:
        for t in panel.get("targets", []):
            out.append(("%s / %s" % (dashboard["uid"], panel["title"]), t.get("expr", ""),
                        t.get("legendFormat", "")))
    for v in dashboard["templating"]["list"]:
        if v["type"] == "query":
            m = re.fullmatch(r'label_values\((.*),\s*([a-zA-Z_]\w*)\)', v["query"]["query"])
            if check(m, "%s: variable %s is not label_values(...)" % (dashboard["uid"], v["name"])):
                out.append(("%s / variable %s" % (dashboard["uid"], v["name"]), m.group(1),
                            "{{%s}}" % m.group(2)))
    return out


def check_structure(path, dashboard):
    name = os.path.basename(path)
    for key in ("uid", "title", "panels", "templating", "schemaVersion"):
        check(key in dashboard, "%s: no %s" % (name, key))
    ids = [p.get("id") for p in dashboard["panels"]]
    check(len(ids) == len(set(ids)) and None not in ids, "%s: panel ids not unique" % name)
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    check({"datasource", "model_name", "rank"} <= variables, "%s: missing variables" % name)
    for p in dashboard["panels"]:
        g = p.get("gridPos", {})
        check(all(k in g for k in "xywh") and g["x"] + g["w"] <= 24,
              "%s / %s: bad gridPos %s" % (name, p.get("title"), g))
        if p["type"] == "row":
            continue
        check(p.get("targets"), "%s / %s: no queries" % (name, p["title"]))
        refs = [t.get("refId") for t in p.get("targets", [])]
        check(len(refs) == len(set(refs)), "%s / %s: duplicate refIds" % (name, p["title"]))
        for t in p.get("targets", []):
            check('model_name=~"$model_name"' in t["expr"] and 'rank=~"$rank"' in t["expr"],
                  "%s / %s: query ignores the model/rank variables: %s"
                  % (name, p["title"], t["expr"]))


def check_names(where, expr, legend, names, labels, allowed_metrics=()):
    metrics, used_labels = promlib.promql_names(expr)
    check(metrics, "%s: no metric in %r" % (where, expr))
    for m in metrics:
        check(m in names or m in allowed_metrics, "%s: %s is not exported by Strata" % (where, m))
    for label in used_labels | set(re.findall(r"\{\{\s*(\w+)\s*\}\}", legend)):
        check(label in labels or label in ("job", "instance"),
              "%s: label %s is not exported by Strata" % (where, label))


def run(cmd, cwd=None):
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


class _Exposition(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


def substitute(expr):
    return (expr.replace("$__rate_interval", "1m").replace("$model_name", ".*")
            .replace("$rank", ".*"))


def check_queries_on_prometheus(exposition, queries, workdir):
    _Exposition.body = exposition.encode()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Exposition)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    target = "127.0.0.1:%d" % server.server_address[1]
    try:
        with promlib.Prometheus([target], workdir) as prom:
            # rate() needs two samples inside its window: wait for the third scrape (1 s apart;
            # the limit covers Prometheus starting on a loaded 2-core machine, where 20 s once
            # ran out in a fresh-clone run of the test command).
            prom.wait_until(lambda: float(prom.query(
                'count_over_time(up{job="strata"}[1m])')["data"]["result"][0]["value"][1]) >= 3,
                60, "three scrapes of the exposition")
            for where, expr, _ in queries:
                answer = prom.query(substitute(expr))
                if check(answer.get("status") == "success",
                         "%s: Prometheus rejects %r: %s" % (where, expr, answer.get("error"))):
                    check(answer["data"]["result"],
                          "%s: no series for %r" % (where, substitute(expr)))
    finally:
        server.shutdown()


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    workdir = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp(prefix="strata-dash-")
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir)
    for tool in ("promtool", "prometheus"):
        if not shutil.which(tool):
            print("SKIP: %s not installed (Debian package prometheus)" % tool)
            sys.exit(77)
    exposition = subprocess.run([sys.argv[1]], check=True, capture_output=True, text=True).stdout
    names, labels = promlib.exported_names(exposition)

    rc, out = run([sys.executable, os.path.join(GRAFANA, "generate_dashboards.py"), "--check"])
    check(rc == 0, "dashboards are stale: " + out)

    paths = sorted(glob.glob(os.path.join(GRAFANA, "*.json")))
    check({os.path.basename(p) for p in paths} >= {"overview.json", "caches.json", "moe.json"},
          "missing dashboards: %s" % paths)
    queries = []
    for path in paths:
        with open(path) as f:
            dashboard = json.load(f)
        check_structure(path, dashboard)
        queries += dashboard_queries(dashboard)
    for where, expr, legend in queries:
        check_names(where, expr, legend, names, labels)
    # Every metric Strata exports appears on some dashboard (histograms through a series).
    used = set().union(*(promlib.promql_names(e)[0] for _, e, _ in queries))
    families = {re.sub(r"_(bucket|sum|count)$", "", n) for n in names}
    for family in sorted(families):
        check(any(u == family or re.sub(r"_(bucket|sum|count)$", "", u) == family for u in used),
              "no dashboard shows %s" % family)

    # Rules: exported or recorded names only.
    import yaml  # Debian python3-yaml
    with open(RULES) as f:
        groups = yaml.safe_load(f)["groups"]
    recorded = {r["record"] for g in groups for r in g["rules"] if "record" in r}
    for g in groups:
        for r in g["rules"]:
            where = "rule %s" % (r.get("record") or r.get("alert"))
            check_names(where, r["expr"], "", names, labels | {"job", "instance"},
                        allowed_metrics=recorded | {"up"})
    alerts = {r["alert"] for g in groups for r in g["rules"] if "alert" in r}
    check({"StrataDown", "StrataQueueGrowing", "StrataKVCacheNearFull",
           "StrataTimeToFirstTokenHigh", "StrataExpertImbalanceHigh"} <= alerts,
          "missing alerts: %s" % alerts)
    rc, out = run(["promtool", "check", "rules", RULES])
    check(rc == 0, "promtool check rules: " + out)
    rc, out = run(["promtool", "test", "rules", os.path.basename(RULE_TESTS)],
                  cwd=os.path.dirname(RULE_TESTS))
    check(rc == 0, "promtool test rules: " + out)

    check_queries_on_prometheus(exposition, queries, os.path.join(workdir, "prometheus"))

    for f in failures:
        print("FAIL:", f)
    print("%d dashboard queries, %d rules, %d failures"
          % (len(queries), sum(len(g["rules"]) for g in groups), len(failures)))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# The monitoring pieces hold together: the alerting rules pass `promtool check rules` and their
# unit tests (`promtool test rules`); prometheusrule.yaml carries the same groups; the
# ServiceMonitor finds the agents through the Service, which selects the DaemonSet's pods; the
# Grafana dashboard is well-formed and every query in it parses (each checked by promtool as a
# recording rule); and every linerate_* series the rules and the dashboard name is one the agent
# serves (docs/USER_GUIDE.md's Metrics table). Run by .ci/run.
# Usage: deploy/prometheus/verify.sh
set -euo pipefail
dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$dir"
command -v promtool >/dev/null || { echo "promtool is missing (apt-get install prometheus)" >&2; exit 1; }
python3 -c 'import yaml' 2>/dev/null || { echo "python3 with PyYAML is missing (apt-get install python3-yaml)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

promtool check rules linerate.rules.yml
promtool test rules linerate.rules.test.yml

python3 - "$tmp/queries.yml" <<'PY'
import json, re, sys, yaml

fail = []
def check(ok, msg):
    if not ok:
        fail.append(msg)

rules = yaml.safe_load(open("linerate.rules.yml"))
pr = yaml.safe_load(open("prometheusrule.yaml"))
check(pr.get("apiVersion") == "monitoring.coreos.com/v1" and pr.get("kind") == "PrometheusRule",
      "prometheusrule.yaml: not a monitoring.coreos.com/v1 PrometheusRule")
check(pr.get("spec") == rules, "prometheusrule.yaml: spec differs from linerate.rules.yml (copy the groups over)")

sm = yaml.safe_load(open("servicemonitor.yaml"))
svc = yaml.safe_load(open("../kubernetes/metrics-service.yaml"))
ds = yaml.safe_load(open("../kubernetes/agent-daemonset.yaml"))
check(sm.get("apiVersion") == "monitoring.coreos.com/v1" and sm.get("kind") == "ServiceMonitor",
      "servicemonitor.yaml: not a monitoring.coreos.com/v1 ServiceMonitor")
want = sm["spec"]["selector"]["matchLabels"]
labels = svc["metadata"]["labels"]
check(all(labels.get(k) == v for k, v in want.items()), f"the ServiceMonitor's selector {want} misses the Service's labels {labels}")
check(svc["metadata"]["namespace"] in sm["spec"]["namespaceSelector"]["matchNames"], "the ServiceMonitor looks in another namespace")
check(labels.get(sm["spec"]["jobLabel"]) == "linerate", "job would not be \"linerate\", which the rules expect")
ports = {p["name"]: p for p in svc["spec"]["ports"]}
for e in sm["spec"]["endpoints"]:
    check(e["port"] in ports, f"the ServiceMonitor scrapes port {e['port']!r}, which the Service does not name")
pod = ds["spec"]["template"]
check(all(pod["metadata"]["labels"].get(k) == v for k, v in svc["spec"]["selector"].items()),
      "the Service's selector misses the DaemonSet's pods")
cports = {p["name"]: p["containerPort"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
for p in svc["spec"]["ports"]:
    check(p["targetPort"] in cports and cports[p["targetPort"]] == p["port"], f"Service port {p['name']} does not reach the container's")

d = json.load(open("grafana-dashboard.json"))
for k in ("uid", "title", "schemaVersion", "panels", "templating"):
    check(k in d, f"dashboard: no {k}")
variables = {v["name"] for v in d["templating"]["list"]}
exprs = []
ids = set()
for p in d["panels"]:
    check(p.get("id") not in ids, f"dashboard: panel id {p.get('id')} twice")
    ids.add(p.get("id"))
    check(p.get("type") in {"timeseries", "stat", "table", "gauge", "bargauge"}, f"dashboard: panel {p.get('title')}: type {p.get('type')}")
    g = p.get("gridPos", {})
    check(all(k in g for k in "xywh") and g["x"] + g["w"] <= 24, f"dashboard: panel {p.get('title')}: gridPos {g}")
    check(p.get("datasource", {}).get("uid") == "${datasource}", f"dashboard: panel {p.get('title')} does not use the datasource variable")
    refs = [t.get("refId") for t in p.get("targets", [])]
    check(refs and len(refs) == len(set(refs)), f"dashboard: panel {p.get('title')}: refIds {refs}")
    exprs += [t["expr"] for t in p.get("targets", [])]
for v in d["templating"]["list"]:
    if v["type"] == "query":
        m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", v["definition"])
        check(m is not None, f"dashboard: variable {v['name']}: {v['definition']}")
        if m:
            exprs.append(m.group(1))
for e in exprs:
    for used in re.findall(r"\$\{?(\w+)", e):
        check(used in variables or used.startswith("__"), f"dashboard: {e}: no variable {used}")
# Grafana's variables replaced by what a query may hold there, then each query parsed by promtool.
def concrete(e):
    e = e.replace("$__rate_interval", "5m").replace("$__interval", "1m")
    return re.sub(r"\$\{?\w+\}?", ".*", e)
queries = {"groups": [{"name": "dashboard", "rules": [{"record": f"dashboard:query:{i}", "expr": concrete(e)} for i, e in enumerate(exprs)]}]}
yaml.safe_dump(queries, open(sys.argv[1], "w"))

served = set(re.findall(r"`(linerate_\w+)`", open("../../docs/USER_GUIDE.md").read()))
alerts = [r["expr"] for g in rules["groups"] for r in g["rules"]]
for e in alerts + exprs:
    for name in re.findall(r"\blinerate_[a-z_]+\b", e):
        check(name in served, f"{name} (in {e!r}) is not a series the agent serves (docs/USER_GUIDE.md, Metrics)")
if fail:
    print("\n".join(dict.fromkeys(fail)), file=sys.stderr)
    sys.exit(1)
print(f"prometheusrule.yaml, servicemonitor.yaml, metrics-service.yaml: consistent; dashboard: {len(d['panels'])} panels, {len(exprs)} queries")
PY
echo "dashboard queries:"
promtool check rules "$tmp/queries.yml"

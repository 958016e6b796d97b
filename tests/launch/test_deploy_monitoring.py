"""Monitoring in deploy/: both routes' masters serve /slo/metrics on the port their Service
exposes, and the ServiceMonitor examples (comments in the manifests) select that Service and port;
every query of the Grafana dashboard names a metric slogate's exposition or vLLM 0.32 (a recorded
scrape) has; the PrometheusRule holds the alerting rules file's rules, which read only series and
states slogate exports (promtool and a real Prometheus run them: tests/e2e/test_prometheus_real.py)."""

from __future__ import annotations

import json
import re
import shlex
import textwrap
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import DATA
from tests.launch.test_deploy import (
    CHART,
    DEPLOY,
    OPERATOR,
    master_job,
    merged_values,
    operator_docs,
    parse,
    render_chart,
    tpl,
)

# ---------------------------------------------------------------- Prometheus: the metrics port, ServiceMonitors


def commented_service_monitor(path: Path) -> Any:
    """The ServiceMonitor example a manifest carries as a comment (from its `apiVersion:` line to the
    end of the file), uncommented and parsed."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("#") and "monitoring.coreos.com/v1" in line)
    assert all(line.startswith("#") for line in lines[start:])
    return yaml.safe_load(textwrap.dedent("\n".join(line[1:] for line in lines[start:])))


def test_helm_master_serves_metrics_through_the_charts_service() -> None:
    values = merged_values()
    pod = master_job(render_chart(values))["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    master = parse(container["args"])
    port = master.slo_metrics_port
    assert master.headless and port == values["service"]["targetPort"] == 8089  # a headless master leaves it free
    assert port in {p["containerPort"] for p in container["ports"]}
    annotations = pod["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(port) and annotations["prometheus.io/path"] == "/slo/metrics"
    svc_tpl = (CHART / "templates" / "master-service.yaml").read_text()
    assert "  - name: master-p3\n    port: {{ .Values.service.port }}\n" in svc_tpl
    assert "    targetPort: {{ .Values.service.targetPort }}\n" in svc_tpl.split("name: master-p3", 1)[1]
    assert '    component: "master"\n' in svc_tpl.split("spec:", 1)[0]  # the Service's own labels ...
    assert '{{ include "locust.selectorLabels" . }}' in (CHART / "templates" / "_helpers.tpl").read_text()
    service_labels = {"component": "master", **rendered_selector_labels(values)}  # ... with the selector labels
    (monitor,) = commented_service_monitor(DEPLOY / "helm" / "values.yaml")
    monitor = yaml.safe_load(tpl(yaml.safe_dump(monitor), values))
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1" and monitor["kind"] == "ServiceMonitor"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service_labels.items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "master-p3" and endpoint["path"] == "/slo/metrics"
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", monitor["metadata"]["name"])


def rendered_selector_labels(values: dict) -> dict:
    """locust.selectorLabels, rendered for the release `ttft-gate` (see render_chart's service_selector)."""
    return {k: v for k, v in render_chart(values)["service_selector"].items() if k != "component"}


def test_operator_master_serves_metrics_on_the_port_the_operator_exposes() -> None:
    objects = (OPERATOR / "objects.py.txt").read_text()
    assert 'MASTER_WEB_PORT_NAME = "master-web"' in objects
    assert "client.V1ContainerPort(container_port=8089, name=MASTER_WEB_PORT_NAME)" in objects
    test, _ = operator_docs()
    spec = test["spec"]
    master = parse(["--master", *shlex.split(spec["args"])])
    worker = parse(["--worker", "--master-host", "m", *shlex.split(spec["args"])])  # the workers ignore it
    assert master.headless and master.slo_metrics_port == 8089 and worker.slo_metrics_port == 8089
    annotations = spec["master"]["annotations"]
    assert annotations["prometheus.io/port"] == "8089" and annotations["prometheus.io/path"] == "/slo/metrics"
    monitor = commented_service_monitor(DEPLOY / "operator" / "locusttest.yaml")
    assert monitor["kind"] == "ServiceMonitor"
    # the operator's `<name>-webui` Service (controller.py ensure_webui_service, 6b50cad): labelled
    # locust.io/test-run=<name>, locust.io/component=master-webui; port `master-web` (8089)
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector == {"locust.io/test-run": test["metadata"]["name"], "locust.io/component": "master-webui"}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "master-web" and endpoint["path"] == "/slo/metrics"


DASHBOARD = DEPLOY / "grafana" / "slogate.json"
VLLM_NAMES = DATA / "vllm-0.32-metric-names.txt"
METRIC_NAME = re.compile(r"(?<![\w:$])(vllm:[A-Za-z0-9_:]+|slogate_[A-Za-z0-9_]+)")


def dashboard_queries(dashboard: dict) -> list[str]:
    """Every PromQL expression: the panels' targets and the template variables' queries."""
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    return exprs + [v["definition"] for v in dashboard["templating"]["list"] if v["type"] == "query"]


def test_every_dashboard_query_names_a_metric_slogate_or_vllm_exports() -> None:
    """Names against what /slo/metrics serves (an exposition of a full report) and against vLLM
    0.32's names from a real scrape (tests/data/vllm-0.32-metric-names.txt)."""
    from tests.outputs.test_prometheus import sample_names

    dashboard = json.loads(DASHBOARD.read_text())
    ours = sample_names()
    vllm = {n for n in VLLM_NAMES.read_text().splitlines() if n and not n.startswith("#")}
    used: set[str] = set()
    for expr in dashboard_queries(dashboard):
        names = METRIC_NAME.findall(expr)
        assert names, f"a query without a metric: {expr}"
        unknown = [n for n in names if n not in (vllm if n.startswith("vllm:") else ours)]
        assert not unknown, f"{expr}: {unknown} exported by neither slogate nor vLLM 0.32"
        assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}"), expr
        used.update(names)
    assert {
        "vllm:time_to_first_token_seconds_bucket", "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total",
        "vllm:kv_cache_usage_perc", "vllm:num_requests_waiting", "vllm:num_requests_running",
        "slogate_time_to_first_token_seconds_bucket", "slogate_requests_total", "slogate_failures_total",
        "slogate_unfinished_total", "slogate_dropped_total", "slogate_objective_state", "slogate_verdict",
    } <= used  # fmt: skip


def test_the_dashboard_is_an_importable_grafana_dashboard() -> None:
    """Standard dashboard JSON: a Prometheus datasource variable every panel and query uses, unique
    ids, panels on the 24-column grid without overlap, client TTFT beside vLLM's."""
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["schemaVersion"] >= 36 and dashboard["uid"] and dashboard["title"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ds = {"type": "prometheus", "uid": "${datasource}"}
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, f"{p['title']} overlaps another panel"
        cells |= mine
        if p["type"] == "row":
            continue
        assert p["datasource"] == ds and p["targets"], p["title"]
        assert all(t["datasource"] == ds for t in p["targets"]), p["title"]
        assert len({t["refId"] for t in p["targets"]}) == len(p["targets"]), p["title"]
    by_title = {p["title"]: p for p in panels}
    client = by_title["Client TTFT p50 / p95 / p99 per class (slogate)"]["gridPos"]
    server = by_title["Server TTFT p50 / p95 / p99 (vLLM)"]["gridPos"]
    assert client["y"] == server["y"] and client["x"] + client["w"] == server["x"]  # side by side


def test_the_vllm_name_list_is_that_of_the_recorded_vllm_scrapes() -> None:
    """tests/data/vllm-0.32-metric-names.txt has exactly the `vllm:` sample names of the real vLLM
    0.32 scrapes recorded in tests/data/metrics/ (record_vllm.py and record_vllm_lora.py there): every
    scrape has them all, but for the LoRA gauge, which only a server serving adapters has."""
    from prometheus_client.parser import text_string_to_metric_families

    listed = {n for n in VLLM_NAMES.read_text().splitlines() if n and not n.startswith("#")}
    scrapes = sorted((VLLM_NAMES.parent / "metrics").glob("vllm-0.32.*.prom"))
    assert scrapes and any("lora" in s.name for s in scrapes)
    for scrape in scrapes:
        families = text_string_to_metric_families(scrape.read_text())
        names = {s.name for f in families for s in f.samples if s.name.startswith("vllm:")}
        lora_only = set() if "lora" in scrape.name else {"vllm:lora_requests_info"}
        assert names == listed - lora_only, scrape.name


# ---------------------------------------------------------------- Prometheus: the alerting rules

RULES = DEPLOY / "prometheus"
ALERTS = {"SlogateSLOBreach", "SlogateRunInconclusive", "SlogateClientSaturated"}


def alerting_rules() -> dict[str, dict]:
    groups = yaml.safe_load((RULES / "slogate-rules.yaml").read_text())["groups"]
    return {r["alert"]: r for g in groups for r in g["rules"]}


def test_the_prometheusrule_holds_the_same_rules_as_the_rules_file() -> None:
    """deploy/prometheus/prometheusrule.yaml is slogate-rules.yaml for the Prometheus Operator:
    the same groups, nothing added (tests/e2e/test_prometheus_real.py runs promtool on both)."""
    resource = yaml.safe_load((RULES / "prometheusrule.yaml").read_text())
    assert resource["apiVersion"] == "monitoring.coreos.com/v1" and resource["kind"] == "PrometheusRule"
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", resource["metadata"]["name"])
    assert resource["spec"] == yaml.safe_load((RULES / "slogate-rules.yaml").read_text())
    assert set(alerting_rules()) == ALERTS


def test_every_alerting_rule_reads_series_and_states_slogate_exports() -> None:
    """Each rule's metric names against an exposition of a full report, and the states and verdicts
    its selectors name against slogate's own (a renamed state would silence an alert, not fail it)."""
    from slogate.slo.gate.verdict import Outcome, Verdict

    from tests.outputs.test_prometheus import sample_names

    ours = sample_names()
    values = {"state": {str(o) for o in Outcome}, "verdict": {str(v) for v in Verdict}}
    for name, rule in alerting_rules().items():
        names = METRIC_NAME.findall(rule["expr"])
        assert names and set(names) <= ours, f"{name}: {set(names) - ours} not exported by slogate"
        for label, value in re.findall(r'(\w+)="([^"]*)"', rule["expr"]):
            assert value in values[label], f"{name}: {label}={value!r} is no slogate {label}"
        assert rule["labels"]["severity"] in ("critical", "warning") and rule["annotations"]["summary"], name

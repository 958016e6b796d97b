"""deploy/ against the pinned upstreams (vendored in tests/data/k8s/, see ORIGIN.md there).

No Helm binary and no API server are available to the test suite (kubectl is there, but
`kubectl apply --dry-run=client` needs a server for discovery), so:
- the operator's LocustTest is validated against the CRD's openAPIV3Schema by `validate()` below,
  a small structural-schema checker (type, properties with unknown fields rejected as the API
  server's strict field validation does, required, enum, minimum, oneOf, items,
  additionalProperties, x-kubernetes-int-or-string); it stands in for the API server's admission;
- the Helm values are checked key by key against the chart's values.yaml, and the master and
  worker containers are rendered by `render_chart()`, a transcription of the few template lines
  that matter (each is asserted to still be in the vendored template); it stands in for
  `helm template`. Other template output (labels, annotations, probes) is not rendered;
- every container command is run through slogate's own Locust parser, with no `-f` supplied.
- Prometheus: both routes' masters serve /slo/metrics on the port their Service exposes, and the
  ServiceMonitor examples (comments in the manifests) select that Service and port; every query of
  the Grafana dashboard names a metric slogate's exposition or vLLM 0.32 (a recorded scrape) has;
  the PrometheusRule holds the alerting rules file's rules, which read only series and states
  slogate exports (promtool and a real Prometheus run them: tests/e2e/test_prometheus_real.py).
"""

from __future__ import annotations

import json
import re
import shlex
import textwrap
from pathlib import Path
from typing import Any

import pytest
import slogate.locustfiles.load.options
import slogate.slo.plugin  # noqa: F401  (registers the SLO options)
import yaml
from locust.argument_parser import get_parser

from tests.conftest import DATA, ROOT

DEPLOY = ROOT / "deploy"
K8S = DATA / "k8s"
CHART = K8S / "deliveryhero-locust-0.35.0"
OPERATOR = K8S / "locust-operator-0.1.6"


def parse(argv: list[str]) -> Any:
    return get_parser().parse_args(argv)


# ---------------------------------------------------------------- the operator (CRD check)

TYPES = {"object": dict, "array": list, "string": str, "boolean": bool}


def validate(value: Any, schema: dict, path: str = "") -> list[str]:
    """Errors of `value` against an openAPIV3Schema (the subset the pinned CRD uses)."""
    errors: list[str] = []
    where = path or "<root>"
    if schema.get("x-kubernetes-int-or-string"):
        if not isinstance(value, int | str) or isinstance(value, bool):
            errors.append(f"{where}: must be an integer or a string")
        return errors
    kind = schema.get("type")
    if kind == "integer":
        if not isinstance(value, int) or isinstance(value, bool):
            return [f"{where}: must be an integer, got {type(value).__name__}"]
    elif kind == "number":
        if not isinstance(value, int | float) or isinstance(value, bool):
            return [f"{where}: must be a number, got {type(value).__name__}"]
    elif kind in TYPES and not isinstance(value, TYPES[kind]):
        return [f"{where}: must be {kind}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: must be one of {schema['enum']}")
    if "minimum" in schema and value < schema["minimum"]:
        errors.append(f"{where}: must be >= {schema['minimum']}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                errors.append(f"{where}: field '{key}' is required")
        for key, item in value.items():
            if key in props:
                errors += validate(item, props[key], f"{path}.{key}")
            elif isinstance(schema.get("additionalProperties"), dict):
                errors += validate(item, schema["additionalProperties"], f"{path}.{key}")
            elif path not in ("", ".metadata"):
                errors.append(f"{path}.{key}: unknown field")
        if "oneOf" in schema:
            matches = [s for s in schema["oneOf"] if all(k in value for k in s.get("required", []))]
            if len(matches) != 1:
                errors.append(f"{where}: must match exactly one of {[s.get('required') for s in schema['oneOf']]}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            errors += validate(item, schema["items"], f"{path}[{i}]")
    return errors


def crd_schema() -> dict:
    crd = yaml.safe_load((OPERATOR / "locusttest-crd.yaml").read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return version["schema"]["openAPIV3Schema"]


def operator_docs() -> tuple[dict, dict]:
    docs = list(yaml.safe_load_all((DEPLOY / "operator" / "locusttest.yaml").read_text()))
    (test,) = [d for d in docs if d["kind"] == "LocustTest"]
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    return test, cm


def test_operator_manifest_matches_the_pinned_crd() -> None:
    test, _ = operator_docs()
    assert test["apiVersion"] == "locust.io/v1"
    assert validate({k: v for k, v in test.items() if k != "apiVersion" and k != "kind"}, crd_schema()) == []


def test_the_crd_check_rejects_the_old_manifest() -> None:
    """The defects of the previous deploy/operator/locusttest.yaml, each caught."""
    old = {
        "metadata": {"name": "ttft-gate"},
        "spec": {
            "workers": 4,
            "locustfile": {"path": "/opt/slogate/locustfiles/chat.py"},
            "args": ["--headless", "--run-time=10m"],
            "env": [{"name": "SLACK_WEBHOOK_URL", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
        },
    }
    errors = "\n".join(validate(old, crd_schema()))
    assert ".spec.args: must be string" in errors
    assert ".spec.locustfile.path: unknown field" in errors
    assert ".spec.locustfile: must match exactly one of" in errors
    assert ".spec.env[0].valueFrom: unknown field" in errors
    assert "workers" in validate({"spec": {}}, crd_schema())[0]


def test_operator_containers_parse_as_the_operator_builds_them() -> None:
    """objects.py: master args = ["--master", *shlex.split(args)], workers ["--worker", "--master-host", svc, ...]."""
    objects = (OPERATOR / "objects.py.txt").read_text()
    assert 'args=["--master", *shlex.split(args)]' in objects
    assert 'args=["--worker", "--master-host", master_svc, *shlex.split(args)]' in objects
    assert "mount_path=LOCUST_BASE_PATH" in objects and 'LOCUST_BASE_PATH = "/home/locust"' in objects
    test, cm = operator_docs()
    spec = test["spec"]
    master = parse(["--master", *shlex.split(spec["args"])])
    worker = parse(["--worker", "--master-host", "ttft-gate-master", *shlex.split(spec["args"])])
    assert master.master and master.headless and worker.worker
    # the locustfile and the SLO file are keys of the ConfigMap the operator mounts at /home/locust
    assert spec["locustfile"]["configMap"]["name"] == cm["metadata"]["name"]
    for path in (master.locustfile, master.slo_file):
        assert Path(path).parent == Path("/home/locust") and Path(path).name in cm["data"]
    assert "slogate.locustfiles.chat" in cm["data"]["locustfile.py"]
    yaml.safe_load(cm["data"]["slo.yaml"])["slos"]
    # /home/locust is a read-only mount: the reports go to the image's own writable directory
    assert not master.slo_report_dir.startswith("/home/locust") and master.slo_report_dir == "/opt/slogate/reports"
    assert master.expect_workers == spec["workers"] and master.run_time
    assert all(set(e) <= {"name", "value"} for e in spec.get("env", []))


# ---------------------------------------------------------------- the Helm chart

FREE_FORM = {  # values the chart takes as whole maps/lists (toYaml, range): their keys are ours
    ("loadtest", "environment"),
    ("loadtest", "environment_external_secret"),
    ("extraConfigMaps",),
    ("extraObjects",),
    ("worker", "resources"),
    ("master", "resources"),
    ("master", "command"),
    ("worker", "command"),
    ("worker", "args"),
    ("master", "args"),
    ("master", "readinessProbe"),
}


def leaf_paths(d: dict, prefix: tuple = ()) -> list[tuple]:
    out = []
    for key, value in d.items():
        path = (*prefix, key)
        if isinstance(value, dict) and path not in FREE_FORM:
            out += leaf_paths(value, path)
        else:
            out.append(path)
    return out


def upstream_has(path: tuple, values: dict) -> bool:
    node: Any = values
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    return True


def our_values() -> dict:
    return yaml.safe_load((DEPLOY / "helm" / "values.yaml").read_text())


def upstream_values() -> dict:
    return yaml.safe_load((CHART / "values.yaml").read_text())


def test_helm_values_use_only_the_charts_keys() -> None:
    upstream = upstream_values()
    unknown = [".".join(p) for p in leaf_paths(our_values()) if not upstream_has(p, upstream)]
    assert unknown == []
    assert upstream_has(("loadtest", "environment_secret"), upstream)  # the checker sees nested keys


def merged_values() -> dict:
    """Helm's coalesce of our values over the chart's (maps merge, null deletes)."""

    def merge(base: Any, over: Any) -> Any:
        if isinstance(base, dict) and isinstance(over, dict):
            out = dict(base)
            for key, value in over.items():
                if value is None:
                    out.pop(key, None)
                else:
                    out[key] = merge(base.get(key), value)
            return out
        return over

    return merge(upstream_values(), our_values())


def tpl(text: str, values: dict, release: str = "ttft-gate") -> str:
    """The template expressions our extraObjects use, as Helm's `tpl` renders them with
    fullnameOverride=<release> (deploy/run-gate.sh sets it)."""
    subst = {
        '{{ include "locust.fullname" . }}': release,
        '{{ include "locust.name" . }}': "locust",
        "{{ .Release.Name }}": release,
        "{{ .Values.loadtest.name }}": values["loadtest"]["name"],
        "{{ .Values.loadtest.locust_host }}": values["loadtest"]["locust_host"],
        "{{ .Values.image.repository }}": values["image"]["repository"],
        "{{ .Values.image.tag }}": values["image"]["tag"],
    }
    for key, value in subst.items():
        text = text.replace(key, value)
    assert "{{" not in text, f"a template expression the test does not know: {text}"
    return text


def render_chart(values: dict) -> dict:
    """The chart's worker container and Service, from templates/worker-deployment.yaml and
    master-service.yaml, and the extraObjects (templates/extra-manifests.yaml: tpl (toYaml .))."""
    worker_tpl = (CHART / "templates" / "worker-deployment.yaml").read_text()
    for line in (
        "        args:\n          - --worker\n",
        '            value: "{{ .Values.loadtest.locust_locustfile_path }}/{{ .Values.loadtest.locust_locustfile }}"',
        "          - name: LOCUST_MASTER_NODE_HOST",
        "{{- if .Values.loadtest.locust_locustfile_configmap}}",
        "{{- range $key, $values := .Values.loadtest.environment_external_secret }}",
    ):
        assert line in worker_tpl, f"the chart's worker template changed: {line!r}"
    assert "{{ tpl (toYaml .) $ }}" in (CHART / "templates" / "extra-manifests.yaml").read_text()
    svc_tpl = (CHART / "templates" / "master-service.yaml").read_text()
    assert '  selector:\n    component: master\n    {{- include "locust.selectorLabels" . | nindent 4 }}' in svc_tpl
    lt = values["loadtest"]
    mounts = []
    if lt["locust_locustfile_configmap"]:
        mounts.append(lt["locust_locustfile_path"])
    if lt["locust_lib_configmap"]:
        mounts.append(lt["locust_locustfile_path"] + "/lib")
    env = {"LOCUST_LOCUSTFILE": f"{lt['locust_locustfile_path']}/{lt['locust_locustfile']}"}
    secret_env = {}
    for secret, keys in lt.get("environment_external_secret", {}).items():
        for key in keys:
            secret_env[key] = secret
    objects = [yaml.safe_load(tpl(yaml.safe_dump(o), values)) for o in values.get("extraObjects", [])]
    return {
        "worker": {
            "command": values["worker"]["command"],
            "args": ["--worker", *values["worker"]["args"]],
            "mounts": mounts,
            "env": env,
            "secret_env": secret_env,
        },
        "service_selector": {
            "component": "master",
            "app.kubernetes.io/name": "locust",
            "app.kubernetes.io/instance": "ttft-gate",
            "load_test": lt["name"],
        },
        "objects": objects,
    }


def master_job(rendered: dict) -> dict:
    (job,) = [o for o in rendered["objects"] if o["kind"] == "Job"]
    return job


def test_helm_locustfile_is_a_directory_plus_a_name_and_nothing_is_mounted_over_it() -> None:
    values = merged_values()
    rendered = render_chart(values)
    assert rendered["worker"]["mounts"] == []
    assert rendered["worker"]["env"]["LOCUST_LOCUSTFILE"] == "/opt/slogate/locustfiles/chat.py"


def test_helm_worker_and_master_commands_parse() -> None:
    values = merged_values()
    rendered = render_chart(values)
    worker = rendered["worker"]
    assert worker["command"] == ["/opt/slogate/entrypoint.sh"]
    opts = parse(["-f", worker["env"]["LOCUST_LOCUSTFILE"], *worker["args"]])
    assert opts.worker and opts.processes == 4
    (container,) = master_job(rendered)["spec"]["template"]["spec"]["containers"]
    master = parse(container["args"])  # no -f supplied: the Job names its own locustfile
    assert master.master and master.headless and master.locustfile == "/opt/slogate/locustfiles/chat.py"
    assert master.host == values["loadtest"]["locust_host"] and master.run_time == 600
    assert master.expect_workers == values["worker"]["replicas"] * opts.processes
    assert master.expect_workers_max_wait > 0


def test_helm_master_is_a_job_that_runs_once_and_the_deployment_is_gone() -> None:
    values = merged_values()
    assert values["master"]["replicas"] == 0
    assert "readinessProbe" not in values["master"]  # null removes the chart's web-port probe
    rendered = render_chart(values)
    job = master_job(rendered)
    assert job["apiVersion"] == "batch/v1" and job["metadata"]["name"] == "ttft-gate-master"
    spec = job["spec"]
    assert spec["backoffLimit"] == 0 and spec["ttlSecondsAfterFinished"] > 0 and spec["activeDeadlineSeconds"] > 0
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    (container,) = pod["containers"]
    assert "readinessProbe" not in container  # Ready as soon as it runs: the Service reaches it headless
    # the chart's Service selects this pod, so the chart's workers find the master
    assert rendered["service_selector"].items() <= spec["template"]["metadata"]["labels"].items()
    assert {p["containerPort"] for p in container["ports"]} >= {5557, 5558}


def test_helm_secrets_come_from_a_kubernetes_secret() -> None:
    values = merged_values()
    assert not values["loadtest"]["environment_secret"]  # it would put the values themselves in the pod spec
    assert render_chart(values)["worker"]["secret_env"] == {"OPENAI_API_KEY": "slogate-secrets"}
    (container,) = master_job(render_chart(values))["spec"]["template"]["spec"]["containers"]
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"]["name"] for e in container["env"]}
    assert refs == {"OPENAI_API_KEY": "slogate-secrets", "SLACK_WEBHOOK_URL": "slogate-secrets"}
    assert all("value" not in e for e in container["env"])


def test_helm_reports_go_to_a_writable_volume_and_the_slo_file_is_mounted() -> None:
    values = merged_values()
    pod = master_job(render_chart(values))["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    master = parse(container["args"])
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"]}
    assert "emptyDir" in mounts[master.slo_report_dir]
    assert mounts[str(Path(master.slo_file).parent)]["configMap"]["name"] in values["extraConfigMaps"]
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["fsGroup"] == 1000


def test_every_manifest_is_kubernetes_shaped() -> None:
    """What `kubectl apply --dry-run=client` checks without a server: apiVersion, kind, metadata.name."""
    docs = list(yaml.safe_load_all((DEPLOY / "operator" / "locusttest.yaml").read_text()))
    docs += master_job_list()
    for doc in docs:
        assert doc["apiVersion"] and doc["kind"]
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", doc["metadata"]["name"])


def master_job_list() -> list[dict]:
    return render_chart(merged_values())["objects"]


def test_a_misspelt_option_would_be_caught() -> None:
    with pytest.raises(SystemExit):
        parse(["-f", "x.py", "--slo-flie=/x.yaml"])


def test_the_rendered_kubernetes_objects_match_the_kubernetes_schemas() -> None:
    """The Job (from extraObjects, as rendered above) and the operator's ConfigMap against the
    Kubernetes 1.32 OpenAPI schemas, strictly (unknown fields rejected), by `kubernetes-validate`
    (PyPI; bundled schemas, offline). Skipped when it is not installed: pip install kubernetes-validate."""
    kv = pytest.importorskip("kubernetes_validate")
    docs = [*master_job_list(), *(d for d in yaml.safe_load_all((DEPLOY / "operator" / "locusttest.yaml").read_text()))]
    checked = 0
    for doc in docs:
        if doc["kind"] == "LocustTest":
            continue  # a custom resource: test_operator_manifest_matches_the_pinned_crd
        kv.validate(doc, "1.32", strict=True)
        checked += 1
    assert checked == 2
    bad = master_job_list()[0]
    bad["spec"]["backofLimit"] = 0
    with pytest.raises(kv.ValidationError):
        kv.validate(bad, "1.32", strict=True)


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


# ---------------------------------------------------------------- the Grafana dashboard

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
    0.32 scrapes recorded in tests/data/metrics/ (record_vllm.py there)."""
    from prometheus_client.parser import text_string_to_metric_families

    listed = {n for n in VLLM_NAMES.read_text().splitlines() if n and not n.startswith("#")}
    scrapes = sorted((VLLM_NAMES.parent / "metrics").glob("vllm-0.32.*.prom"))
    assert scrapes
    for scrape in scrapes:
        families = text_string_to_metric_families(scrape.read_text())
        assert {s.name for f in families for s in f.samples if s.name.startswith("vllm:")} == listed, scrape.name


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

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
  ServiceMonitor examples (comments in the manifests) select that Service and port (the dashboard
  and the alerting rules, the metrics port and ServiceMonitors: tests/launch/test_deploy_monitoring.py).
"""

from __future__ import annotations

import re
import shlex
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

"""The Kubernetes manifests parse, and every Locust argument in them is one our parser accepts."""

from pathlib import Path

import pytest
import slogate.locustfiles.options
import slogate.slo.locust_plugin  # noqa: F401  (registers the SLO options)
import yaml
from locust.argument_parser import get_parser

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"


def parse(args: list[str]) -> object:
    return get_parser().parse_args(["-f", "locustfiles/chat.py", *args])


def test_helm_values_args_are_valid_options() -> None:
    values = yaml.safe_load((DEPLOY / "helm" / "values.yaml").read_text())
    opts = parse(values["master"]["args"] + values["worker"]["args"])
    assert opts.slo_file == "/mnt/slo/slo.yaml" and opts.shared_prefix_tokens == 2048 and opts.processes == 4
    assert "SLACK_WEBHOOK_URL" in values["loadtest"]["environment_secret"]


def test_operator_manifest_args_are_valid_options() -> None:
    manifest = yaml.safe_load((DEPLOY / "operator" / "locusttest.yaml").read_text())
    assert manifest["kind"] == "LocustTest" and manifest["spec"]["workers"] >= 1
    opts = parse(manifest["spec"]["args"])
    assert opts.headless and opts.stop_timeout == 60 and opts.max_tokens == 128
    assert Path(manifest["spec"]["locustfile"]["path"]).name == "chat.py"


def test_a_misspelt_option_would_be_caught() -> None:
    with pytest.raises(SystemExit):
        parse(["--slo-flie=/x.yaml"])


def test_the_image_installs_the_package() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert "FROM locustio/locust:2.47.0" in dockerfile and "pip install --no-cache-dir /opt/slogate" in dockerfile

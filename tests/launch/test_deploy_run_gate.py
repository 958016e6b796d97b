"""deploy/run-gate.sh against a fake `kubectl` and `helm` that play a passing, a failing and a
hanging master Job (and the operator's Job that is deleted the moment it ends). The fakes record
every call, so the tests also check the apply and the clean-up."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT

SCRIPT = ROOT / "deploy" / "run-gate.sh"

FAKE_KUBECTL = r"""#!/usr/bin/env bash
echo "kubectl $*" >> "$FAKE_DIR/calls"
args=" $* "
log() {
  case "$FAKE_SCENARIO" in
    pass) code=0; verdict=PASS;;
    fail|gone) code=1; verdict=FAIL;;
    noreport) echo "slogate: exit code 1"; return;;
    *) return;;
  esac
  [ "$FAKE_SCENARIO" = nomarker ] && return
  echo "locust output..."
  echo "----- BEGIN slogate slo-summary.md -----"
  echo "## slogate: $verdict"
  echo "----- END slogate slo-summary.md -----"
  echo "----- BEGIN slogate slo-report.json -----"
  echo "{\"verdict\": \"$verdict\"}"
  echo "----- END slogate slo-report.json -----"
  echo "slogate: exit code $code"
}
case "$args" in
  *" get job "*)
    n=$(grep -c " get job " "$FAKE_DIR/calls")
    case "$FAKE_SCENARIO" in
      pass) [ "$n" -ge 2 ] && echo -n "1/" || echo -n "/";;
      fail|nomarker|noreport) [ "$n" -ge 2 ] && echo -n "/1" || echo -n "/";;
      hang) echo -n "/";;
      gone) [ "$n" -ge 2 ] && { echo "Error from server (NotFound)" >&2; exit 1; } || echo -n "/";;
    esac;;
  *" logs -f "*) log; [ "$FAKE_SCENARIO" = hang ] && exec sleep 60;;
  *" logs "*) [ "$FAKE_SCENARIO" = gone ] && exit 1; log;;
  *" get pods "*) [ "$FAKE_SCENARIO" = nomarker ] && echo -n 2;;
esac
exit 0
"""

FAKE_HELM = """#!/usr/bin/env bash
echo "helm $*" >> "$FAKE_DIR/calls"
"""


def run_gate(tmp_path: Path, scenario: str, mode: str = "helm", timeout_s: int = 30) -> tuple[int, str, list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("kubectl", FAKE_KUBECTL), ("helm", FAKE_HELM)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "calls").write_text("")
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "FAKE_DIR": str(tmp_path),
        "FAKE_SCENARIO": scenario,
        "SLOGATE_MODE": mode,
        "SLOGATE_POLL_S": "0.2",
        "SLOGATE_TIMEOUT_S": str(timeout_s),
        "SLOGATE_OUT": str(tmp_path / "out"),
    }
    proc = subprocess.run(
        ["bash", str(SCRIPT), "--set", "image.tag=abc"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    return proc.returncode, proc.stdout + proc.stderr, (tmp_path / "calls").read_text().splitlines()


def test_a_passing_job_exits_0_with_the_reports(tmp_path: Path) -> None:
    rc, out, calls = run_gate(tmp_path, "pass")
    assert rc == 0, out
    assert "## slogate: PASS" in out
    assert json.loads((tmp_path / "out" / "slo-report.json").read_text()) == {"verdict": "PASS"}
    assert "slogate: exit code 0" in (tmp_path / "out" / "master.log").read_text()
    (install,) = [c for c in calls if c.startswith("helm upgrade --install")]
    assert "ttft-gate deliveryhero/locust --version 0.35.0" in install and "--set fullnameOverride=ttft-gate" in install
    assert install.endswith("--set image.tag=abc") and "-f deploy/helm/values.yaml" in install
    assert calls[-2:] == [
        "helm uninstall ttft-gate -n default --wait=false",
        "kubectl -n default delete job ttft-gate-master --ignore-not-found --wait=false",
    ]


def test_a_failing_job_exits_with_the_gates_code(tmp_path: Path) -> None:
    rc, out, calls = run_gate(tmp_path, "fail")
    assert rc == 1, out
    assert "## slogate: FAIL" in out and "master job ttft-gate-master: failed" in out
    assert any(c.startswith("helm uninstall") for c in calls)


def test_a_hanging_job_times_out_inconclusive_and_is_cleaned_up(tmp_path: Path) -> None:
    rc, out, calls = run_gate(tmp_path, "hang", timeout_s=2)
    assert rc == 3, out
    assert "no result within 2s" in out
    assert any(c.startswith("helm uninstall ttft-gate") for c in calls)


def test_without_the_log_marker_the_pods_exit_code_is_used(tmp_path: Path) -> None:
    rc, out, _ = run_gate(tmp_path, "nomarker")
    assert rc == 2, out


def test_operator_mode_reads_the_code_from_the_log_after_the_job_is_deleted(tmp_path: Path) -> None:
    rc, out, calls = run_gate(tmp_path, "gone", mode="operator")
    assert rc == 1, out
    assert "master job ttft-gate-master: ended" in out
    assert "kubectl -n default apply -f deploy/operator/locusttest.yaml" in calls
    assert calls[-1] == "kubectl -n default delete -f deploy/operator/locusttest.yaml --ignore-not-found --wait=false"
    assert not any(c.startswith("helm") for c in calls)


@pytest.mark.parametrize("mode", ["kustomize"])
def test_an_unknown_mode_is_a_usage_error(tmp_path: Path, mode: str) -> None:
    rc, out, calls = run_gate(tmp_path, "pass", mode=mode)
    assert rc == 2 and "SLOGATE_MODE" in out and calls == []


def test_a_master_that_ends_without_a_report_is_inconclusive(tmp_path: Path) -> None:
    """e.g. Locust gave up waiting for workers (--expect-workers-max-wait): exit 1, but no verdict."""
    rc, out, _ = run_gate(tmp_path, "noreport")
    assert rc == 3 and "no slo-report.json" in out, out

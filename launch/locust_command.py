"""The one builder of `python -m locust` command lines (the CLI, the GPU sweep and the tests use it).

The locustfiles are part of the installed package (`slogate.locustfiles`), so a pip user without
a checkout finds them here, by name; `slogate locustfile NAME` prints the path.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import slogate.locustfiles

LOCUSTFILE_DIR = Path(slogate.locustfiles.__file__).resolve().parent
LOCUSTFILES = {
    "chat": "chat.py",
    "open-loop": "chat_open_loop.py",
    "openai": "chat_openai.py",
    "trace": "chat_trace.py",
}


def locustfile_path(name: str) -> Path:
    """The installed locustfile called `name` (a key of `LOCUSTFILES`)."""
    if name not in LOCUSTFILES:
        raise ValueError(f"no locustfile named {name!r} (choose one of {', '.join(LOCUSTFILES)})")
    return LOCUSTFILE_DIR / LOCUSTFILES[name]


def locust_argv(
    host: str,
    *,
    locustfile: str | Path = "chat",
    config: str | Path | None = None,
    slo_file: str | Path | None = None,
    report_dir: str | Path = "slogate-report",
    headless: bool = True,
    extra: Sequence[str] = (),
) -> list[str]:
    """`locustfile` is a name of `LOCUSTFILES` or, as a `Path`, any locustfile. `extra` (more
    Locust or workload options) goes last: an option repeated there wins."""
    path = locustfile_path(locustfile) if isinstance(locustfile, str) else locustfile
    argv = [sys.executable, "-m", "locust", "-f", str(path)]
    if config:
        argv += ["--config", str(config)]
    argv += ["--host", host, *(["--headless"] if headless else []), "--slo-report-dir", str(report_dir)]
    if slo_file:
        argv += ["--slo-file", str(slo_file)]
    return [*argv, *extra]

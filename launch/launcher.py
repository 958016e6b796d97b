"""Start a profile's server: find vLLM, check the profile with it, make the model directory if the
profile generates one, build the exact command line and environment, start it, wait for health.

`start_profile` is the one way to do all of it (the CLI, the GPU sweep and the test fixture use
it); `plan` and `command_vllm` also serve `--dry-run`, which starts nothing and works on any
machine: where the profile's build is not installed, its command names a placeholder interpreter.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from slogate.launch.adapters import adapter_dirs, lora_args, make_adapters
from slogate.launch.installation import (
    InstallError,
    VllmInstall,
    cpu_venv_dir,
    ensure_cpu_vllm,
    find_vllm,
    slogate_home,
)
from slogate.launch.model import make_model
from slogate.launch.profile import Profile, ProfileError, load_profile
from slogate.launch.server import ServerProcess, ServerStartError
from slogate.launch.validate import ProfileInvalid
from slogate.launch.validate import validate as validate_profiles
from slogate.slo.gate import exitcodes

# Why a server could not be launched, as exit codes: a bad profile, vLLM missing, a server that
# did not start (`start_profile` raises each).
LAUNCH_ERRORS: dict[type[Exception], int] = {
    ProfileError: exitcodes.USAGE,
    ProfileInvalid: exitcodes.USAGE,
    InstallError: exitcodes.SETUP_FAILED,
    ServerStartError: exitcodes.INCONCLUSIVE,
}


def launch_exit_code(e: Exception) -> int:
    """The exit code of a launch error (a key of `LAUNCH_ERRORS`)."""
    return next(code for kind, code in LAUNCH_ERRORS.items() if isinstance(e, kind))


@dataclass(frozen=True)
class LaunchPlan:
    """Everything needed to start the server, printable for `--dry-run`."""

    profile: Profile
    argv: list[str]
    env: dict[str, str]
    host: str
    port: int
    adapters: int = 0  # LoRA adapters of the generated model served beside it (launch/adapters.py)

    def shell(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return f"{env} {shlex.join(self.argv)}".strip()


@dataclass(frozen=True)
class Launched:
    """A healthy server and how it got there (the GPU sweep records all of it)."""

    server: ServerProcess
    plan: LaunchPlan
    vllm: VllmInstall
    vllm_version: str | None  # from the installed vLLM's parser; None when not validated
    healthy_after_s: float


def locate_vllm(profile: Profile, install: bool, on_progress: Callable[[str], None] | None = None) -> VllmInstall:
    """The vLLM to start `profile` with; with `install`, the CPU build installed first where none is
    (`on_progress` told when it begins)."""
    found = find_vllm()
    if found is None and install and profile.build in ("cpu", "any"):
        found = ensure_cpu_vllm(on_install=on_progress)
    if found is None:
        hint = "run `slogate setup-cpu`" if profile.build != "gpu" else "pip install 'slogate[gpu]'"
        raise InstallError(f"vLLM is not installed ({hint})")
    if profile.build not in ("any", found.build):
        raise InstallError(
            f"profile {profile.name!r} is for the {profile.build} build, but the {found.build} build is installed"
        )
    return found


# The GPU build's command where it is not installed: `python` of the environment that has it.
GPU_PLACEHOLDER_PYTHON = Path("python")


def command_vllm(profile: Profile, found: VllmInstall | None) -> tuple[VllmInstall, str | None]:
    """The vLLM whose interpreter a dry run's command names, and a note when it is a placeholder:
    the installed one when it is the profile's build, else where that build would be."""
    if found is not None and profile.build in ("any", found.build):
        return found, None
    if profile.build == "gpu":
        note = (
            "the gpu build of vLLM is not installed here: `python` in the command stands for the "
            "interpreter of an environment that has it (pip install 'slogate[gpu]')"
        )
        return VllmInstall(GPU_PLACEHOLDER_PYTHON, "gpu"), note
    python = cpu_venv_dir() / "bin" / "python"
    note = f"the cpu build of vLLM is not installed here: the command uses {python}, where `slogate setup-cpu` puts it"
    return VllmInstall(python, "cpu"), note


def plan(profile: Profile, vllm: VllmInstall, host: str, port: int, adapters: int = 0) -> LaunchPlan:
    """The command that serves `profile`, and `adapters` LoRA adapters of its generated model (named
    a, b, ...; made offline at the start, launch/adapters.py)."""
    argv = [*vllm.server_argv(profile.model_path), *profile.server_args(), "--host", host, "--port", str(port)]
    if adapters:
        argv += lora_args(adapter_dirs(profile.model_path, adapters))
    return LaunchPlan(profile, argv, dict(profile.env), host, port, adapters)


def ensure_model(profile: Profile, adapters: int = 0) -> None:
    if profile.generate_model and not (Path(profile.model_path) / "config.json").exists():
        make_model(profile.model_path, profile.generate_model)
    if adapters:
        make_adapters(profile.model_path, adapters)


def start(launch_plan: LaunchPlan, log_path: Path | None = None) -> ServerProcess:
    """Start the planned server without waiting for it (`start_profile` waits)."""
    ensure_model(launch_plan.profile, launch_plan.adapters)
    log_path = log_path or slogate_home() / "logs" / f"{launch_plan.profile.name}-{launch_plan.port}.log"
    server = ServerProcess(
        launch_plan.argv, host=launch_plan.host, port=launch_plan.port, log_path=log_path, env=launch_plan.env
    )
    server.start()
    return server


def start_profile(
    profile: Profile | str,
    host: str,
    port: int,
    *,
    install: bool,
    validate: bool = True,
    log_path: Path | None = None,
    on_progress: Callable[[str], None] | None = None,
    adapters: int = 0,
) -> Launched:
    """Find vLLM (installing the CPU build first if `install`), check the profile with its parser
    (`validate=False` when the caller already checked it), start the server and wait until
    `/health` answers, up to the profile's `health_timeout_s`.

    Raises `ProfileError`, `ProfileInvalid`, `InstallError`, or `ServerStartError`; a server that
    exited, did not become healthy in time or was interrupted while starting is stopped first.
    `on_progress` gets one line per step; `adapters`: LoRA adapters of a generated model to serve too.
    """
    say = on_progress or (lambda _: None)
    profile = load_profile(profile) if isinstance(profile, str) else profile
    vllm = locate_vllm(profile, install=install, on_progress=say)
    version = validate_profiles(vllm, profile) if validate else None
    launch_plan = plan(profile, vllm, host, port, adapters)
    say(f"starting {profile.name} ({f'vLLM {version}, ' if version else ''}{vllm.build} build): {launch_plan.shell()}")
    server = start(launch_plan, log_path)
    say(f"waiting for {server.url}/health (up to {profile.health_timeout_s:.0f} s; log {server.log_path})")
    try:
        took = server.wait_healthy(profile.health_timeout_s)
    except BaseException:  # also Ctrl-C while waiting: the server runs in its own session, never leave it
        server.stop()
        raise
    say(f"{profile.name} healthy after {took:.0f} s at {server.url}")
    return Launched(server, launch_plan, vllm, version, took)

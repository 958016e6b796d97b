"""Start a profile's server: find vLLM, make the model directory if the profile generates one,
build the exact command line and environment, and hand back a `ServerProcess`."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from slogate.launch.installation import InstallError, VllmInstall, ensure_cpu_vllm, find_vllm, slogate_home
from slogate.launch.profile import Profile
from slogate.launch.server import ServerProcess


@dataclass(frozen=True)
class LaunchPlan:
    """Everything needed to start the server, printable for `--dry-run`."""

    profile: Profile
    argv: list[str]
    env: dict[str, str]
    host: str
    port: int

    def shell(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return f"{env} {shlex.join(self.argv)}".strip()


def locate_vllm(profile: Profile, install: bool) -> VllmInstall:
    found = find_vllm()
    if found is None and install and profile.build in ("cpu", "any"):
        found = ensure_cpu_vllm()
    if found is None:
        hint = "run `slogate setup-cpu`" if profile.build != "gpu" else "pip install 'slogate[gpu]'"
        raise InstallError(f"vLLM is not installed ({hint})")
    if profile.build not in ("any", found.build):
        raise InstallError(
            f"profile {profile.name!r} is for the {profile.build} build, but the {found.build} build is installed"
        )
    return found


def plan(profile: Profile, vllm: VllmInstall, host: str, port: int) -> LaunchPlan:
    argv = [*vllm.server_argv(profile.model_path), *profile.server_args(), "--host", host, "--port", str(port)]
    return LaunchPlan(profile, argv, dict(profile.env), host, port)


def ensure_model(profile: Profile) -> None:
    if profile.generate_model and not (Path(profile.model_path) / "config.json").exists():
        from slogate.model import make_model

        make_model(profile.model_path, profile.generate_model)


def start(launch_plan: LaunchPlan, log_path: Path | None = None) -> ServerProcess:
    ensure_model(launch_plan.profile)
    log_path = log_path or slogate_home() / "logs" / f"{launch_plan.profile.name}-{launch_plan.port}.log"
    server = ServerProcess(
        launch_plan.argv, host=launch_plan.host, port=launch_plan.port, log_path=log_path, env=launch_plan.env
    )
    server.start()
    return server

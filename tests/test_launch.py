"""Profiles, launch plans, and the server process lifecycle (no orphans, ever)."""

import os
import sys
import time
from pathlib import Path

import pytest
from slogate.launch import launcher
from slogate.launch.installation import VllmInstall
from slogate.launch.profile import ProfileError, load_profile
from slogate.launch.server import ServerProcess, ServerStartError, free_port


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / f"{name}.yaml"
    p.write_text(text)
    return p


def test_builtin_profiles_load_and_inherit() -> None:
    demo, base = load_profile("cpu-demo"), load_profile("cpu-demo-baseline")
    assert demo.args["enable-prefix-caching"] is True and base.args["enable-prefix-caching"] is False
    assert base.model == demo.model and base.env == demo.env
    assert "--no-enable-prefix-caching" in base.server_args()
    assert base.server_args()[:2] == ["--served-model-name", "demo"]


def test_a_user_profile_extends_a_file_and_removes_flags(tmp_path: Path) -> None:
    write(tmp_path, "parent", "model: m\nargs: {max-model-len: 4096, enforce-eager: true}\nenv: {A: 1}\n")
    child = write(tmp_path, "child", "extends: parent.yaml\nargs: {enforce-eager: null, seed: 3}\nenv: {B: two}\n")
    p = load_profile(str(child))
    assert p.args == {"max-model-len": 4096, "seed": 3}
    assert p.env == {"A": "1", "B": "two"}
    assert p.server_args() == ["--max-model-len", "4096", "--seed", "3"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("args: {x: 1}\n", "field 'model': required"),
        ("model: m\nbuild: tpu\n", "field 'build': must be one of cpu, gpu, any"),
        ("model: m\nhealth_timeout: 3\n", "unknown field 'health_timeout'"),
        ("model: m\nargs: [a]\n", "field 'args': must be a mapping"),
        ("model: m\nargs: {--port: 1}\n", "field 'args': write flag names without dashes"),
        ("model: m\nhealth_timeout_s: -1\n", "field 'health_timeout_s': must be a positive number"),
        ("model: [unclosed\n", "not valid YAML at line"),
    ],
)
def test_malformed_profiles_name_the_file_and_field(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, "bad", text)
    with pytest.raises(ProfileError) as err:
        load_profile(str(path))
    assert str(err.value).startswith(str(path.resolve()) if "YAML" not in expected else str(path)[:5])
    assert expected in str(err.value)


def test_extends_cycles_are_refused(tmp_path: Path) -> None:
    write(tmp_path, "a", "extends: b.yaml\nmodel: m\n")
    write(tmp_path, "b", "extends: a.yaml\nmodel: m\n")
    with pytest.raises(ProfileError, match="cycle"):
        load_profile(str(tmp_path / "a.yaml"))


def test_unknown_profile_lists_the_builtins() -> None:
    with pytest.raises(ProfileError, match=r"built-in: .*cpu-demo"):
        load_profile("no-such-profile")


def test_plan_puts_the_exact_command_together() -> None:
    install = VllmInstall(Path("/venv/bin/python"), "cpu")
    plan = launcher.plan(load_profile("cpu-demo"), install, "127.0.0.1", 9000)
    assert plan.argv[:4] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model"]
    assert plan.argv[-4:] == ["--host", "127.0.0.1", "--port", "9000"]
    assert plan.shell().startswith("HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=2 /venv/bin/python")


def group_alive(pgid: int) -> bool:
    """Any live (non-zombie) process left in the group? Zombies may linger where PID 1 does not reap."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, pgrp = fields[0], int(fields[2])
        if pgrp == pgid and state != "Z":
            return True
    return False


# A stand-in process tree: a parent that ignores SIGTERM with a child, like vLLM's API server and engine.
STUBBORN = (
    "import signal, subprocess, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
    "time.sleep(600)\n"
)


def test_stop_kills_the_whole_group_after_the_grace_period(tmp_path: Path) -> None:
    server = ServerProcess(
        [sys.executable, "-c", STUBBORN], host="127.0.0.1", port=free_port(), log_path=tmp_path / "log"
    )
    server.start()
    time.sleep(0.5)
    assert server.proc is not None
    pgid = server.proc.pid
    started = time.monotonic()
    server.stop(grace_s=1)
    assert time.monotonic() - started < 10
    time.sleep(0.2)
    assert not group_alive(pgid)


def test_startup_timeout_stops_the_server_and_reports_the_log(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "print('loading weights', flush=True); import time; time.sleep(600)"]
    server = ServerProcess(argv, host="127.0.0.1", port=free_port(), log_path=tmp_path / "log")
    server.start()
    assert server.proc is not None
    pgid = server.proc.pid
    with pytest.raises(ServerStartError, match="not healthy after 2 s") as err:
        server.wait_healthy(2, poll_s=0.2)
    assert "loading weights" in err.value.log_tail
    assert not group_alive(pgid)


def test_a_taken_port_is_a_clear_error(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        server = ServerProcess([sys.executable, "-c", "pass"], host="127.0.0.1", port=port, log_path=tmp_path / "log")
        with pytest.raises(ServerStartError, match=f"port {port} on 127.0.0.1 is already in use"):
            server.start()


@pytest.mark.vllm
def test_real_vllm_that_fails_at_startup_leaves_no_orphans(tmp_path: Path) -> None:
    profile = load_profile("cpu-tiny")
    try:
        install = launcher.locate_vllm(profile, install=False)
    except Exception as e:
        if os.environ.get("SLOGATE_REQUIRE_VLLM") == "1":
            raise
        pytest.skip(str(e))
    launcher.ensure_model(profile)
    plan = launcher.plan(profile, install, "127.0.0.1", free_port())
    plan.argv.extend(["--max-model-len", "not-a-number"])
    server = launcher.start(plan, log_path=tmp_path / "vllm.log")
    assert server.proc is not None
    pgid = server.proc.pid
    with pytest.raises(ServerStartError, match="exited with code") as err:
        server.wait_healthy(240)
    assert "max-model-len" in err.value.log_tail or "max_model_len" in err.value.log_tail
    assert not group_alive(pgid)

"""Profiles, launch plans, starting a profile, Locust command lines, and the server process
lifecycle (no orphans, ever)."""

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import slogate.locustfiles
from slogate.launch import launcher
from slogate.launch.installation import InstallError, VllmInstall
from slogate.launch.locust_command import locust_argv, locustfile_path
from slogate.launch.profile import ProfileError, load_profile
from slogate.launch.server import ServerProcess, ServerStartError, free_port, is_healthy

from slogate import cli


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
    assert str(err.value).startswith(f"{path.resolve()}: ")
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


@pytest.mark.parametrize(
    ("name", "found", "python", "placeholder"),
    [
        ("tuned", VllmInstall(Path("/gpu/bin/python"), "gpu"), "/gpu/bin/python", False),
        ("tuned", VllmInstall(Path("/cpu/bin/python"), "cpu"), "python", True),
        ("tuned", None, "python", True),
        ("cpu-demo", VllmInstall(Path("/cpu/bin/python"), "cpu"), "/cpu/bin/python", False),
        ("cpu-demo", VllmInstall(Path("/gpu/bin/python"), "gpu"), "{venv}/bin/python", True),
        ("cpu-demo", None, "{venv}/bin/python", True),
    ],
)
def test_a_dry_run_command_names_the_profiles_build_installed_or_not(
    name: str, found: VllmInstall | None, python: str, placeholder: bool, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("SLOGATE_VLLM_VENV", str(tmp_path / "venv"))
    profile = load_profile(name)
    vllm, note = launcher.command_vllm(profile, found)
    assert vllm.python == Path(python.format(venv=tmp_path / "venv")) and vllm.build == profile.build
    assert (note is not None) == placeholder
    if placeholder:
        assert note.startswith(f"the {profile.build} build of vLLM is not installed here")
    argv = launcher.plan(profile, vllm, "127.0.0.1", 9000).argv
    assert argv[:5] == [str(vllm.python), "-m", "vllm.entrypoints.openai.api_server", "--model", profile.model_path]


def test_a_real_launch_still_needs_the_profiles_own_build(monkeypatch) -> None:
    monkeypatch.setattr(launcher, "find_vllm", lambda: VllmInstall(Path(sys.executable), "cpu"))
    with pytest.raises(InstallError, match="profile 'tuned' is for the gpu build, but the cpu build is installed"):
        launcher.locate_vllm(load_profile("tuned"), install=False)
    monkeypatch.setattr(launcher, "find_vllm", lambda: None)
    with pytest.raises(InstallError, match=r"vLLM is not installed \(pip install 'slogate\[gpu\]'\)"):
        launcher.locate_vllm(load_profile("tuned"), install=False)


# A stand-in for vLLM's OpenAI server module: answers /health, or exits at once with FAKE_VLLM_EXIT.
FAKE_VLLM = """
import argparse, http.server, os, sys
if os.environ.get("FAKE_VLLM_EXIT"):
    sys.exit("engine core failed to start")
ap = argparse.ArgumentParser()
ap.add_argument("--host")
ap.add_argument("--port", type=int)
args, _ = ap.parse_known_args()
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
http.server.HTTPServer((args.host, args.port), Health).serve_forever()
"""


def fake_vllm_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **env: str) -> Path:
    """A profile served by the stand-in, with this interpreter found as the installed vLLM."""
    module = tmp_path / "fake" / "vllm" / "entrypoints" / "openai" / "api_server.py"
    module.parent.mkdir(parents=True)
    module.write_text(FAKE_VLLM)
    monkeypatch.setattr(launcher, "find_vllm", lambda: VllmInstall(Path(sys.executable), "cpu"))
    env_yaml = ", ".join(f"{k}: {v}" for k, v in {"PYTHONPATH": str(tmp_path / "fake"), **env}.items())
    return write(tmp_path, "fake", f"model: m\nenv: {{{env_yaml}}}\nhealth_timeout_s: 30\n")


def test_start_profile_returns_a_healthy_server_and_says_each_step(tmp_path: Path, monkeypatch) -> None:
    path, port, said = fake_vllm_profile(tmp_path, monkeypatch), free_port(), []
    launched = launcher.start_profile(
        str(path), "127.0.0.1", port, install=False, validate=False, log_path=tmp_path / "log", on_progress=said.append
    )
    try:
        assert is_healthy(launched.server.url) and launched.server.url == f"http://127.0.0.1:{port}"
        assert launched.plan.argv[-4:] == ["--host", "127.0.0.1", "--port", str(port)]
        assert launched.vllm_version is None and launched.healthy_after_s < 30
        assert said[0] == f"starting fake (cpu build): {launched.plan.shell()}"
        assert said[-1].startswith("fake healthy after ") and len(said) == 3
    finally:
        launched.server.stop()
    assert not is_healthy(launched.server.url)


def test_start_profile_reports_a_server_that_exits_with_its_log(tmp_path: Path, monkeypatch) -> None:
    path = fake_vllm_profile(tmp_path, monkeypatch, FAKE_VLLM_EXIT="1")
    with pytest.raises(ServerStartError, match="server exited with code 1 during startup") as err:
        launcher.start_profile(
            str(path), "127.0.0.1", free_port(), install=False, validate=False, log_path=tmp_path / "log"
        )
    assert "engine core failed to start" in err.value.log_tail


def test_locust_argv_puts_the_options_in_one_order() -> None:
    argv = locust_argv(
        "http://h:8000", locustfile="open-loop", config="w.conf", slo_file="s.yaml", report_dir="r", extra=["-u", "2"]
    )
    assert argv == [
        sys.executable, "-m", "locust", "-f", str(locustfile_path("open-loop")), "--config", "w.conf",
        "--host", "http://h:8000", "--headless", "--slo-report-dir", "r", "--slo-file", "s.yaml", "-u", "2",
    ]  # fmt: skip
    bare = locust_argv("http://h", locustfile=Path("x.py"), headless=False)
    assert bare[3:] == ["-f", "x.py", "--host", "http://h", "--slo-report-dir", "slogate-report"]


@pytest.mark.parametrize(
    ("args", "user_class"),
    [
        ([], "ChatStreamUser"),
        (["chat"], "ChatStreamUser"),
        (["open-loop"], "OpenLoopChatUser"),
        (["openai"], "OpenAIChatUser"),
    ],
)
def test_slogate_locustfile_prints_the_installed_path(args: list[str], user_class: str, capsys) -> None:
    assert cli.main(["locustfile", *args]) == 0
    path = Path(capsys.readouterr().out.strip())
    assert path.is_absolute() and path.parent == Path(slogate.locustfiles.__file__).resolve().parent
    assert f'__all__ = ["{user_class}"]' in path.read_text()


def group_size(pgid: int) -> int:
    """Live (non-zombie) processes in the group. Zombies may linger where PID 1 does not reap."""
    alive = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        alive += int(fields[2]) == pgid and fields[0] != "Z"
    return alive


def group_alive(pgid: int) -> bool:
    return group_size(pgid) > 0


def wait_until(condition: Callable[[], bool], timeout_s: float = 10) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


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
    assert server.proc is not None
    pgid = server.proc.pid
    assert wait_until(lambda: group_size(pgid) == 2)  # the child exists, so SIGTERM is already ignored
    started = time.monotonic()
    server.stop(grace_s=1)
    assert 1 <= time.monotonic() - started < 10  # SIGTERM ignored for the grace period, then SIGKILL
    assert wait_until(lambda: not group_alive(pgid), timeout_s=5)


def test_a_second_interrupt_during_the_grace_period_kills_the_group_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = ServerProcess(
        [sys.executable, "-c", STUBBORN], host="127.0.0.1", port=free_port(), log_path=tmp_path / "log"
    )
    server.start()
    assert server.proc is not None
    pgid, wait = server.proc.pid, server.proc.wait
    assert wait_until(lambda: group_size(pgid) == 2)
    waits: list[float | None] = []

    def interrupted(timeout: float | None = None) -> int:  # Ctrl-C pressed again while stop() waits
        waits.append(timeout)
        if len(waits) == 1:
            raise KeyboardInterrupt
        return wait(timeout)

    monkeypatch.setattr(server.proc, "wait", interrupted)
    with pytest.raises(KeyboardInterrupt):
        server.stop(grace_s=60)
    assert waits == [60, 5] and wait_until(lambda: not group_alive(pgid), timeout_s=5)  # not left running


def test_startup_timeout_stops_the_server_and_reports_the_log(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "print('loading weights', flush=True); import time; time.sleep(600)"]
    server = ServerProcess(argv, host="127.0.0.1", port=free_port(), log_path=tmp_path / "log")
    server.start()
    assert server.proc is not None
    pgid = server.proc.pid
    with pytest.raises(ServerStartError, match="not healthy after 1 s") as err:
        server.wait_healthy(1, poll_s=0.1)
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


def test_real_vllm_that_fails_at_startup_leaves_no_orphans(tmp_path: Path) -> None:
    profile = load_profile("cpu-tiny")
    try:
        install = launcher.locate_vllm(profile, install=False)
    except Exception as e:
        if os.environ.get("SLOGATE_REQUIRE_VLLM") == "1":
            raise
        pytest.skip(str(e))
    plan = launcher.plan(profile, install, "127.0.0.1", free_port())
    plan.argv.extend(["--max-model-len", "not-a-number"])
    # Niced (`nice` execs vLLM: the same process, the group's leader): its ~15 CPU-s of importing vLLM
    # run beside the parallel tests, which time their runs.
    plan.argv[:0] = ["nice", "-n", "10"]
    server = launcher.start(plan, log_path=tmp_path / "vllm.log")
    assert server.proc is not None
    pgid = server.proc.pid
    with pytest.raises(ServerStartError, match="exited with code") as err:
        server.wait_healthy(240)
    assert "max-model-len" in err.value.log_tail or "max_model_len" in err.value.log_tail
    assert not group_alive(pgid)

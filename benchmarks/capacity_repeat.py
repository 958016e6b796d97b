"""Proof by repetition: N `slogate capacity` searches against the fault server, whose knee at the
SLO is known, and how often the interval covers it, how wide it is and how long a search takes.

The fault server's `slots=c,ttft_ms=T,tokens=k,itl_ms=I` serves at most c streams at once (an
asyncio semaphore: first come first served), each holding its slot for S = T + (k - 1) x I ms,
and writes its first content token T ms after it got its slot: with Poisson arrivals it is an
M/D/c FCFS queue whose TTFT is the queue wait plus T. With `lognormal=s` every request's T and
each I are multiplied by one factor F drawn from a lognormal of mean 1 (mu = -s^2/2, sigma s):
an M/G/c queue whose service is F x S and whose TTFT is the wait plus F x T. The true knee at
"p95 TTFT <= target" is the rate whose steady-state p95 TTFT is the target, computed
independently of slogate by simulating that queue (benchmarks/queue_model.py: bisection in
`true_knee`, with the same random numbers at every rate, so the p95 is monotone in the rate).

Each search is the CLI as a user runs it, no tuning flag (`--rate-start`, `--step-s`, ... at their
defaults), with the workload after `--`; `--parallel K` runs K searches at once, each against a
fault server of its own (`--cpus-per-search C`: the server and the search pinned with `taskset` to
C cores of their own, cores 0..C-1 for the first). The summary (coverage, widths, durations, every
interval) goes to `summary.json` and `summary.md` in `--out`:

    .venv/bin/python benchmarks/capacity_repeat.py [--searches 20 | --simulate 40] [--parallel 4
        --cpus-per-search 3] [--search-timeout-s 500] [--slots 8 --ttft-ms 200 --tokens 5 --itl-ms 50]
        [--lognormal 0.5 --target-ms 600] [--target-ms 320] [--out DIR] [-- extra slogate capacity options]
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from queue_model import Shape, add_shape_arguments, true_knee
from slogate.launch import fault_server
from slogate.launch.capacity_at import judge_at_rate
from slogate.launch.knee import SearchSettings, search
from slogate.launch.knee_batch import AUTO, STOP_WHEN_DECIDED, STOP_WHEN_FAILED, batch_length, steps_stop_early
from slogate.launch.knee_interval import StepJudge
from slogate.slo.gate.early_stop import DEFAULT_CONFIDENCE, certain_verdict, look, waits_for
from slogate.slo.gate.facts import DECIDED, RunStop
from slogate.slo.gate.judge import judge
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.record import RequestRecord
from slogate.slo.gate.report import Report, RunInfo
from slogate.slo.gate.spec import SloSpec, parse_spec

STARTUP_S = 2.0  # a step's Locust start and stop, measured: a 5 + 30 s step took 36.9 s of wall time


class SimulatedStep:
    """A `RunStep` against the shape's queue simulated in-process (`--simulate`): Poisson arrivals
    into an empty queue (as a step starts), `warmup_s` not judged, the early stop (`early`: the option,
    `--slo-stop-when-decided` or `-failed`, and on batches: `--slo-correlated-requests`) emulated by a
    look a second (on the requests whose first token had come), those waiting at the stop counted
    with the time they had waited; `wall_s` adds up what the steps would take. No abort (without the
    early stop a step runs whole)."""

    def __init__(
        self,
        shape: Shape,
        spec: SloSpec,
        warmup_s: float,
        early: tuple[str | None, bool],
        seed: int,
        confidence: float = DEFAULT_CONFIDENCE,
    ) -> None:
        self.shape, self.spec, self.warmup_s, (self.early_stop, self.correlated) = shape, spec, warmup_s, early
        self.confidence = confidence
        self.rng = np.random.default_rng(seed)
        self.wall_s = 0.0

    def ttfts(self, rate: float, span_s: float) -> tuple[np.ndarray, np.ndarray]:
        """Send times (s) and TTFTs (ms) of the arrivals in `span_s` seconds from an empty queue."""
        n = self.rng.poisson(rate * span_s)
        sent = np.sort(self.rng.uniform(0, span_s, n)) * 1000
        factor = self.shape.factors(self.rng, n)
        return sent / 1000, self.shape.waits_ms(sent, factor) + factor * self.shape.ttft_ms

    def __call__(self, rate: float, step_s: float, report_dir: Path, early_stop: bool = True) -> Report:
        sent, ttft = self.ttfts(rate, self.warmup_s + step_s)
        keep = sent >= self.warmup_s
        sent, ttft = sent[keep], ttft[keep]
        first = sent + ttft / 1000
        end, stop = self.warmup_s + step_s, None
        if self.early_stop and early_stop:
            store, added, order = MetricsStore(interval_s=1.0), 0, np.argsort(first)
            for at in np.arange(self.warmup_s + 1, end + 1e-9, 1.0):
                while added < len(order) and first[order[added]] <= at:
                    store.add(_record(sent[order[added]], ttft[order[added]]))
                    added += 1
                looks = look(self.spec, store, self.confidence, correlated=self.correlated)
                failed_only = self.early_stop == STOP_WHEN_FAILED
                verdict = certain_verdict(looks, waits_for(self.spec, (), False), (), failed_only)
                if verdict is not None:
                    end, looked, on_batches = float(at), tuple(looks), self.correlated
                    stop = RunStop(DECIDED, end, step_s, verdict, self.confidence, looked, correlated=on_batches)
                    break
        self.wall_s += STARTUP_S + end
        store = MetricsStore(interval_s=1.0)
        for t, ms in zip(sent.tolist(), ttft.tolist(), strict=True):
            if t < end:
                store.add(_record(t, min(ms, (end - t) * 1000)))
        return judge(self.spec, store, RunInfo(warmup_s=self.warmup_s, stopped=stop))


def _record(sent_s: float, ttft_ms: float) -> RequestRecord:
    us = int(ttft_ms * 1000)
    return RequestRecord("shared", 1000.0 + sent_s, e2e_us=us + 1000, ttft_us=us)


def simulate(args: argparse.Namespace, shape: Shape, knee: float, extra: list[str]) -> list[Row]:
    """`--simulate N`: N searches (or, `-- --min-capacity R`, tests at R) in-process against
    `SimulatedStep`s, with the CLI's search options."""
    ap = argparse.ArgumentParser(prog="simulated search options")
    ap.add_argument("--rate-start", type=float, default=1.0)
    ap.add_argument("--precision", type=float, default=0.1)
    ap.add_argument("--step-s", type=float, default=30.0)
    ap.add_argument("--warmup-s", type=float, default=5.0)
    ap.add_argument("--max-steps", type=int, default=12)
    ap.add_argument("--probe-s", type=float, default=3.0)
    ap.add_argument("--batch-s", type=batch_length, default=AUTO)
    ap.add_argument("--no-early-stop", dest="early_stop", action="store_false")
    ap.add_argument("--min-capacity", type=float, default=None, help="the test at R: covered = the right decision")
    ap.add_argument("--slo-confidence", type=float, default=DEFAULT_CONFIDENCE, help="of each step's decision")
    o = ap.parse_args(extra)
    spec = parse_spec({"slos": [{"name": "ttft-p95", "metric": "ttft", "percentile": 95, "max_ms": args.target_ms}]})
    settings = SearchSettings(o.rate_start, o.precision, o.step_s, o.max_steps, probe_s=o.probe_s)
    rows, at, where = [], o.min_capacity, Path("/nonexistent")
    judge = StepJudge(spec, o.slo_confidence, batch_s=o.batch_s)
    early = (steps_stop_early(o.early_stop, o.batch_s, knee=at is None), o.batch_s == AUTO)  # as the CLI
    one_run = early[0] == STOP_WHEN_DECIDED  # as the CLI: the test at R's runs stop when decided, one run
    for i in range(1, args.simulate + 1):
        step = SimulatedStep(shape, spec, o.warmup_s, early, seed=i, confidence=o.slo_confidence)
        probe = SimulatedStep(shape, spec, min(o.warmup_s, 1.0), early, seed=10_000 + i, confidence=o.slo_confidence)
        result = judge_at_rate(step, at, settings, where, judge, stops_when_decided=one_run) if at else None
        result = result or search(step, settings, where, judge=judge, probe_step=probe)
        low, high = result.interval_rps
        covered = right(low, high, knee, at, result.exit_code(at))
        width = (high - low) / knee if low is not None and high is not None else None
        wall = step.wall_s + probe.wall_s
        rows.append(Row(i, low, high, covered, width, round(wall, 1), len(result.steps), result.exit_code(at), None,
                        result.stopped_because))  # fmt: skip
    return rows


@dataclass(slots=True)
class Row:
    """One search as capacity.json and the clock saw it."""

    search: int
    low: float | None
    high: float | None
    covered: bool
    width: float | None  # (high - low) / the true knee
    wall_s: float
    steps: int | None
    exit_code: int | None
    cpus: str | None
    stopped_because: str = ""


def right(low: float | None, high: float | None, knee: float, at: float | None, exit_code: int | None) -> bool:
    """A search's interval covers the knee; with a minimum (`--min-capacity`), its exit is the right one."""
    if at is not None:
        return exit_code == (0 if at <= knee else 1)
    return low is not None and high is not None and low <= knee <= high


def run_search(
    i: int,
    url: str,
    slo: Path,
    where: Path,
    shape: Shape,
    knee: float,
    extra: list[str],
    cpus: str | None,
    limit_s: float | None = None,
) -> Row:
    """One `slogate capacity` search against `url`, pinned to `cpus` when given, stopped (SIGTERM,
    then SIGKILL 20 s later) after `limit_s`: a row without an interval then."""
    pin = ["taskset", "-c", cpus] if cpus else []
    pin = [*(["timeout", "--kill-after=20", f"{limit_s:g}"] if limit_s else []), *pin]
    started = time.monotonic()
    done = subprocess.run(
        [
            *pin, sys.executable, "-m", "slogate.cli", "capacity", "--host", url, "--slo-file", str(slo),
            "--out", str(where), *extra,
            "--", "--model", shape.model(seed=i), "--shared-prefix-tokens", "20", "--arrival-process", "poisson",
        ],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    wall = time.monotonic() - started
    where.mkdir(parents=True, exist_ok=True)
    (where / "capacity-stdout.txt").write_text(done.stdout + done.stderr)
    try:
        data = json.loads((where / "capacity.json").read_text())
    except (OSError, ValueError):
        data = {"exit_code": done.returncode, "stopped_because": (done.stderr.strip().splitlines() or [""])[-1]}
    low, high = data.get("interval_rps") or [None, None]
    at = None if "--search" in extra else data.get("min_capacity_rps")  # a test at R; with --search, the interval
    covered = right(low, high, knee, at, data.get("exit_code"))
    width = (high - low) / knee if low is not None and high is not None else None
    return Row(i, low, high, covered, width, round(wall, 1), data.get("steps_run"), data.get("exit_code"), cpus,
               data.get("stopped_because", ""))  # fmt: skip


def cpu_sets(parallel: int, per_search: int | None) -> list[str | None]:
    """The cores each of the `parallel` lanes is pinned to (`taskset -c` lists), or None each."""
    if not per_search:
        return [None] * parallel
    if shutil.which("taskset") is None:
        sys.exit("capacity_repeat: --cpus-per-search needs taskset (util-linux)")
    have = os.cpu_count() or 1
    if parallel * per_search > have:
        sys.exit(f"capacity_repeat: {parallel} x {per_search} cores asked, {have} here")
    return [f"{k * per_search}-{(k + 1) * per_search - 1}" for k in range(parallel)]


def summarize(
    rows: list[Row], shape: Shape, knee: float, target_ms: float, extra: list[str], load: dict, simulated: bool = False
) -> dict:
    widths = [r.width for r in rows if r.width is not None]
    walls = [r.wall_s for r in rows]
    return {
        "shape": {**asdict(shape), "queue": shape.kind(), "capacity_rps": shape.capacity_rps, "model": shape.model()},
        "target_p95_ttft_ms": target_ms,
        "true_knee_rps": round(knee, 3),
        "extra_options": extra,
        "simulated": simulated,  # --simulate: in-process against the simulated queue, wall times as accounted
        "searches": len(rows),
        "covered": sum(r.covered for r in rows),
        "width_median": float(np.median(widths)) if widths else None,
        "width_max": max(widths, default=None),
        "both_ends": len(widths),
        "wall_s_median": float(np.median(walls)) if walls else None,
        "wall_s_max": max(walls, default=None),
        "load": load,
        "rows": [asdict(r) for r in rows],
    }


def markdown(s: dict) -> str:
    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:.1%}"

    head = (
        f"{s['searches']} {'simulated ' if s['simulated'] else ''}searches against `{s['shape']['model']}` "
        f"({s['shape']['queue']}, capacity "
        f"{s['shape']['capacity_rps']:.3g} req/s; true knee at p95 TTFT <= {s['target_p95_ttft_ms']:g} ms: "
        f"{s['true_knee_rps']:.2f} req/s), options `{' '.join(s['extra_options']) or '(defaults)'}`: **covered "
        f"{s['covered']}/{s['searches']}**, width median {pct(s['width_median'])} max {pct(s['width_max'])} "
        f"({s['both_ends']} with both ends), wall median {s['wall_s_median'] or 0:.0f} s "
        f"max {s['wall_s_max'] or 0:.0f} s. "
        f"Load average before/after: {s['load']['before']} / {s['load']['after']}.\n\n"
    )
    lines = [
        "| search | interval (req/s) | covers | width | steps | wall (s) | exit | cpus |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in s["rows"]:
        lines.append(
            f"| {r['search']} | [{r['low']}, {r['high']}] | {'yes' if r['covered'] else 'no'} | {pct(r['width'])} "
            f"| {r['steps']} | {r['wall_s']:.0f} | {r['exit_code']} | {r['cpus'] or '-'} |"
        )
    return head + "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--searches", type=int, default=20)
    ap.add_argument("--parallel", type=int, default=1, help="searches at once, each with its own fault server")
    ap.add_argument("--cpus-per-search", type=int, default=None, help="pin each lane (server + search) to C cores")
    add_shape_arguments(ap)
    ap.add_argument("--search-timeout-s", type=float, default=None, help="stop a search after this long")
    ap.add_argument("--knee-only", action="store_true", help="print the true knee and stop")
    ap.add_argument("--simulate", type=int, default=0, help="N searches in-process against the simulated queue")
    ap.add_argument("--out", type=Path, default=None)
    args, extra = ap.parse_known_args()
    extra = [a for a in extra if a != "--"]

    shape = Shape.of(args)
    knee = true_knee(shape, args.target_ms)
    print(f"{shape.kind()}, service {shape.service_ms:g} ms (x lognormal {shape.lognormal:g}): capacity "
          f"{shape.capacity_rps:g} req/s, true knee at p95 TTFT <= {args.target_ms:g} ms: {knee:.2f} req/s",
          flush=True)  # fmt: skip
    if args.knee_only:
        return
    out = args.out or Path(tempfile.mkdtemp(prefix="capacity-repeat-"))
    out.mkdir(parents=True, exist_ok=True)
    if args.simulate:
        load = {"before": [round(x, 2) for x in os.getloadavg()], "after": None, "cpus": os.cpu_count()}
        report(out, summarize(simulate(args, shape, knee, extra), shape, knee, args.target_ms, extra, load, True))
        return
    slo = out / "slo.yaml"
    slo.write_text(f"slos:\n  - {{name: ttft-p95, metric: ttft, percentile: 95, max_ms: {args.target_ms:g}}}\n")
    lanes: queue.Queue[tuple[str, str | None]] = queue.Queue()
    servers = []
    load_before = [round(x, 2) for x in os.getloadavg()]
    try:
        for cpus in cpu_sets(args.parallel, args.cpus_per_search):
            proc, url = fault_server.spawn(prefix=["taskset", "-c", cpus] if cpus else [])
            servers.append(proc)
            lanes.put((url, cpus))

        def one(i: int) -> Row:
            url, cpus = lanes.get()
            try:
                row = run_search(i, url, slo, out / f"search-{i:02d}", shape, knee, extra, cpus, args.search_timeout_s)
            finally:
                lanes.put((url, cpus))
            print(f"search {i}: interval [{row.low}, {row.high}] covers {row.covered} width "
                  f"{'-' if row.width is None else f'{row.width:.1%}'} {row.wall_s:.0f} s {row.steps} steps "
                  f"exit {row.exit_code} cpus {cpus or '-'}", flush=True)  # fmt: skip
            return row

        with ThreadPoolExecutor(args.parallel) as pool:
            rows = list(pool.map(one, range(1, args.searches + 1)))
    finally:
        for proc in servers:
            proc.terminate()
            proc.wait(timeout=10)
    load = {"before": load_before, "after": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count()}
    report(out, summarize(rows, shape, knee, args.target_ms, extra, load))


def report(out: Path, summary: dict) -> None:
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "summary.md").write_text(markdown(summary))
    print("\n" + markdown(summary) + f"\nin {out}", flush=True)


if __name__ == "__main__":
    main()

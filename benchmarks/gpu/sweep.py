"""Before/after deployment profiles under the same load, the way the seed article would have
wanted it measured: for each profile, launch it, then run through slogate's Locust users

  1. an open-loop sweep (Poisson arrivals at each `--rates` value, latency from the schedule),
  2. one closed-loop run (`--concurrency` users, each waiting for its answer),
  3. the capacity at the SLO file's objectives: `slogate capacity`'s search (launch/capacity.py),
     started at the highest swept rate that passed, its steps in `<profile>/capacity/`,

and, on the last profile, a cross-check of one rate against `vllm bench serve` on the same server.
Every run's full slo-report.json is kept; `RESULTS.md`, `results.json`, `ttft_vs_rate.png` and
the per-profile comparison at one rate (`compare/`) are rebuilt from everything under `--out`, so
profiles measured in separate commands (one GPU command each) end up in one report and one tar.

On the H200 (benchmarks/gpu/README.md has the whole recipe):
    python3 benchmarks/gpu/sweep.py --out /tmp/gpu-results --profiles benchmarks/gpu/profiles/h200-baseline.yaml
On the local vLLM CPU server (same script, smaller numbers):
    .venv/bin/python benchmarks/gpu/sweep.py --out cpu-sweep --config benchmarks/gpu/cpu.conf \
        --slo-file benchmarks/gpu/cpu-slo.yaml \
        --profiles cpu-demo-baseline cpu-demo --rates 0.5,1 --concurrency 2 --run-time 20 --search-steps 2 \
        --cross-check-rate 1
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # benchmarks/gpu/ for sweep_report, benchmarks/ for ttft_accuracy

from slogate.launch import runner  # noqa: E402
from slogate.launch.capacity import locust_step  # noqa: E402
from slogate.launch.capacity_report import step_line, write_capacity, write_error  # noqa: E402
from slogate.launch.installation import InstallError, VllmInstall  # noqa: E402
from slogate.launch.knee import CapacityInputError, RunStep, SearchSettings, search  # noqa: E402
from slogate.launch.launcher import Launched  # noqa: E402
from slogate.launch.profile import Profile, load_profile  # noqa: E402
from slogate.launch.server import ServerStartError  # noqa: E402
from slogate.launch.validate import ProfileInvalid  # noqa: E402
from slogate.slo.gate.report import Report  # noqa: E402
from slogate.slo.gate.spec import load_spec  # noqa: E402
from slogate.slo.gate.verdict import Verdict  # noqa: E402
from sweep_report import write_report  # noqa: E402
from ttft_accuracy import VLLM_BENCH  # noqa: E402

CLASSES = ("shared", "unique", "all")


def say(message: str) -> None:
    print(f"[sweep {time.strftime('%H:%M:%S')}] {message}", flush=True)


def read_conf(path: Path) -> dict[str, str]:
    """The `key = value` lines of a locust.conf (the workload both clients must share)."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "=" in line:
            key, value = (part.strip() for part in line.split("=", 1))
            out[key] = value
    return out


SEARCH_ARGS = ["--arrival-process", "poisson", "--max-in-flight", "1024"]  # the sweep's and the search's
STEP_WARMUP_S = 5  # per capacity step: each is a fresh Locust run with fresh prompts
STOP_TIMEOUT_S = 30  # let requests in flight at the end finish (overloaded runs have seconds-long ones)


def run_locust(
    host: str, locustfile: str, config: Path, report_dir: Path, run_time: int, users: int, extra: list[str]
) -> Report | None:
    """One headless run of the installed locustfile `locustfile` ("open-loop" or "chat")."""
    run = ["--only-summary", "-u", str(users), "-r", str(users), "-t", f"{run_time}s",
           "--stop-timeout", str(STOP_TIMEOUT_S)]  # fmt: skip
    try:
        return runner.run_locust(host, report_dir, locustfile=locustfile, config=config, extra=[*run, *extra])
    except runner.NoReport as e:
        say(f"  {e}")
        return None


def summarize(report: Report) -> dict[str, Any]:
    """The figures the tables need, per class."""
    out: dict[str, Any] = {"verdict": str(report.verdict), "reasons": list(report.reasons)}
    metrics = report.metrics_summary()
    for cls in CLASSES:
        m = metrics.get(cls)
        if not m:
            continue
        out[cls] = {
            "requests": m["requests"],
            "failures": m["failures"],
            "dropped": m["dropped"],
            "unfinished": m.get("unfinished", 0),
            "ttft_ms": {p: m["ttft_ms"].get(p) for p in ("p50", "p95", "p99")},
            "tpot_p50_ms": m.get("tpot_ms", {}).get("p50"),
            "output_tokens_per_s": m["output_tokens_per_s"],
            "requests_per_s": m["requests_per_s"],
        }
    out["prefix_cache_hit_rate"] = report.server.prefix_cache_hit_rate if report.server is not None else None
    out["saturated"] = report.saturated
    return out


def ttft_target_ms(slo_file: Path) -> float | None:
    """The strictest p-anything TTFT target on all requests in the SLO file: the charts' line."""
    targets = [o.max for o in load_spec(slo_file).objectives if o.metric == "ttft" and o.request_class == "all"]
    return min((t for t in targets if t is not None), default=None)


class ProfileSweep:
    """One profile's runs; everything lands in `out/<profile>/`."""

    def __init__(self, args: argparse.Namespace, name: str, host: str, deadline: float) -> None:
        self.a, self.name, self.host, self.deadline = args, name, host, deadline
        self.dir = args.out / name
        self.runs: list[dict[str, Any]] = []

    def time_left(self) -> bool:
        return time.monotonic() + self.a.run_time + 15 < self.deadline

    def warm_up(self, rate: float, seconds: int) -> None:
        """A throw-away run: vLLM compiles and captures for the shapes it meets first, and the first
        measured run would carry that (seen on the H200: p95 428 ms at 4 req/s, 177 ms at 8)."""
        if seconds:
            say(f"  {self.name}: warm-up, {seconds} s at {rate:g} req/s (not measured)")
            extra = ["--arrival-rate", f"{rate:g}", "--server-metrics-interval", "0"]
            run_locust(self.host, "open-loop", self.a.config, self.dir / "warmup", seconds, 1, extra)

    def open_loop(self, rate: float, kind: str) -> dict[str, Any] | None:
        if not self.time_left():
            say(f"  skipping {kind} {rate:g} req/s: the command's time budget is spent")
            return None
        say(f"  {self.name}: open loop {rate:g} req/s ({kind})")
        extra = ["--arrival-rate", f"{rate:g}", *SEARCH_ARGS]
        report = run_locust(
            self.host, "open-loop", self.a.config, self.dir / f"{kind}-{rate:g}", self.a.run_time, 1,
            [*extra, "--slo-file", str(self.a.slo_file)],
        )  # fmt: skip
        return self._keep(kind, rate, None, report)

    def closed_loop(self, users: int) -> None:
        if not self.time_left():
            return
        say(f"  {self.name}: closed loop {users} users")
        report = run_locust(
            self.host, "chat", self.a.config, self.dir / f"closed-{users}", self.a.run_time, users,
            ["--slo-file", str(self.a.slo_file)],
        )  # fmt: skip
        self._keep("closed", None, users, report)

    def _keep(self, kind: str, rate: float | None, users: int | None, report: Report | None) -> dict | None:
        summary = summarize(report) if report else None
        self.runs.append({"kind": kind, "rate": rate, "users": users, "summary": summary})
        if summary and "all" in summary:
            t = summary["all"]["ttft_ms"]
            say(f"    TTFT p50/p95/p99 {t['p50']}/{t['p95']}/{t['p99']} ms, verdict {summary['verdict']}")
        return summary

    def search_start(self) -> float:
        """Where the capacity search starts: the highest swept rate that passed the SLO file (it
        doubles from there), else the lowest swept rate (it halves)."""
        swept = [r for r in self.runs if r["kind"] == "sweep" and r["summary"]]
        passed = [r["rate"] for r in swept if r["summary"]["verdict"] == Verdict.PASS]
        return max(passed, default=None) or min((r["rate"] for r in swept), default=None) or 1.0

    def search_capacity(self, run_step: RunStep) -> dict[str, Any] | None:
        """`slogate capacity`'s search on this server, the same SLO file and workload; None when
        `--search-steps` is 0 or the time budget is spent."""
        if self.a.search_steps < 2 or not self.time_left():
            return None
        settings = SearchSettings(self.search_start(), self.a.precision, self.a.run_time, self.a.search_steps)
        say(f"  {self.name}: capacity search from {settings.rate_start:g} req/s, {settings.max_steps} steps at most")
        out = self.dir / "capacity"
        try:
            result = search(run_step, settings, out, on_step=lambda st: say(f"    {step_line(st)}"))
        except CapacityInputError as e:  # a step that could not be judged: a result, with the steps before
            say(f"  {self.name}: capacity search stopped: {e}")
            write_error(out, e)
            partial = e.partial.to_json() if e.partial else {"capacity_rps": None, "first_failing_rps": None}
            return {**partial, "error": str(e)}
        write_capacity(result, out, self.name)
        return result.to_json()

    def save(self, extra: dict[str, Any]) -> None:
        data = {"profile": self.name, "runs": self.runs, **extra}
        (self.dir / "sweep.json").write_text(json.dumps(data, indent=2) + "\n")


def vllm_bench(vllm: VllmInstall, host: str, model: str, tokenizer: str, conf: dict[str, str], rate: float,
               seconds: int, out: Path) -> dict[str, Any] | None:  # fmt: skip
    """`vllm bench serve` on the same server with the same shape of workload: the shared prefixes
    (prefix_repetition), the user message as the suffix, the same output length, Poisson arrivals."""
    out.mkdir(parents=True, exist_ok=True)
    argv = [
        str(vllm.python), "-c", VLLM_BENCH, "--backend", "openai-chat", "--endpoint", "/v1/chat/completions",
        "--base-url", host, "--model", model, "--tokenizer", tokenizer,
        "--dataset-name", "prefix_repetition",
        "--prefix-repetition-prefix-len", conf["shared-prefix-tokens"],
        "--prefix-repetition-suffix-len", conf["user-message-tokens"],
        "--prefix-repetition-num-prefixes", conf["shared-prefixes"],
        "--prefix-repetition-output-len", conf["max-tokens"], "--ignore-eos",
        "--num-prompts", str(max(20, int(rate * seconds))), "--request-rate", f"{rate:g}", "--seed", "1",
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,95,99",
        "--save-result", "--result-dir", str(out), "--result-filename", "vllm-bench.json",
    ]  # fmt: skip
    with (out / "vllm-bench.log").open("w") as log:
        subprocess.call(argv, stdout=log, stderr=subprocess.STDOUT)
    path = out / "vllm-bench.json"
    if not path.exists():
        say(f"  vllm bench serve wrote no result; see {out / 'vllm-bench.log'}")
        return None
    r = json.loads(path.read_text())
    return {
        "requests": r.get("completed"),
        "ttft_ms": {p: r.get(f"{p}_ttft_ms") for p in ("p50", "p95", "p99")},
        "tpot_p50_ms": r.get("p50_tpot_ms") or r.get("median_tpot_ms"),
        "output_tokens_per_s": r.get("output_throughput"),
    }


def cross_check(args: argparse.Namespace, sweep: ProfileSweep, vllm: VllmInstall, profile: Profile) -> dict | None:
    conf = read_conf(args.cross_check_config)
    rate = args.cross_check_rate
    say(f"  {sweep.name}: cross-check at {rate:g} req/s, slogate then vllm bench serve")
    ours = run_locust(
        sweep.host, "open-loop", args.cross_check_config, sweep.dir / f"crosscheck-{rate:g}", args.run_time, 1,
        ["--arrival-rate", f"{rate:g}", "--arrival-process", "poisson", "--max-in-flight", "1024"],
    )  # fmt: skip
    model = profile.served_model_name or profile.model_path
    peer = vllm_bench(vllm, sweep.host, model, profile.model_path, conf, rate, args.run_time, sweep.dir / "vllm-bench")
    if ours is None:
        return None
    return {"rate": rate, "slogate": summarize(ours).get("all"), "vllm_bench_serve": peer}


def sweep_profile(
    a: argparse.Namespace, i: int, profile: Profile, up: Launched, rates: list[float], deadline: float
) -> None:
    """Every run of one launched profile, its results saved in `out/<profile>/`."""
    server, vllm = up.server, up.vllm
    info = {
        "vllm_version": up.vllm_version,
        "command": up.plan.shell(),
        "healthy_after_s": round(up.healthy_after_s, 1),
    }
    sweep = ProfileSweep(a, profile.name, server.url, deadline)
    started = time.time()
    sweep.warm_up(rates[0], a.warmup_s)
    for rate in rates:
        sweep.open_loop(rate, "sweep")
    if a.concurrency:
        sweep.closed_loop(a.concurrency)
    found = sweep.search_capacity(
        locust_step(
            server.url,
            slo_file=a.slo_file,
            warmup_s=STEP_WARMUP_S,
            config=a.config,
            locust_args=SEARCH_ARGS,
            early_stop=a.early_stop,
        )
    )
    if found is not None:
        if "error" in found:
            say(f"{profile.name}: capacity search failed: {found['error']}")
        else:
            say(f"{profile.name}: capacity {found['capacity_rps']}, first failing {found['first_failing_rps']}")
    check = None
    if a.cross_check_rate and i == len(a.profiles) - 1:
        if time.monotonic() + 2 * a.run_time + 60 < deadline:
            check = cross_check(a, sweep, vllm, profile)
        else:
            say("  skipping the cross-check: the command's time budget is spent")
    sweep.save({**info, "capacity": found, "cross_check": check, "started_at": started})


def keep_server_log(log: Path | None, where: Path) -> None:
    """The server log's head (the engine's choices: kernels, KV size) and tail, once it stopped."""
    if log and log.exists():
        where.mkdir(parents=True, exist_ok=True)
        lines = log.read_text().splitlines()
        (where / "server-log-head.txt").write_text("\n".join(lines[:150]) + "\n")
        (where / "server-log-tail.txt").write_text("\n".join(lines[-200:]) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profiles", nargs="*", default=[], help="launch profiles (names or YAML files), in order")
    ap.add_argument("--out", type=Path, required=True, help="results directory; a .tar.gz of it is written beside it")
    ap.add_argument("--config", type=Path, default=HERE / "workload.conf", help="the workload (a locust.conf)")
    ap.add_argument("--slo-file", type=Path, default=HERE / "slo.yaml")
    ap.add_argument("--rates", default="4,8,16,24", help="open-loop rates to sweep, requests/s")
    ap.add_argument("--concurrency", type=int, default=16, help="users in the closed-loop run (0: none)")
    ap.add_argument("--run-time", type=int, default=30, help="seconds per run")
    ap.add_argument("--warmup-s", type=int, default=10, help="an unmeasured run at the first rate before the sweep")
    ap.add_argument("--search-steps", type=int, default=6, help="the capacity search's --max-steps (0: no search)")
    ap.add_argument("--precision", type=float, default=0.1, help="the capacity search's --precision")
    ap.add_argument("--cross-check-rate", type=float, help="on the last profile, also run vllm bench serve here")
    ap.add_argument("--cross-check-config", type=Path, default=HERE / "crosscheck.conf")
    ap.add_argument("--compare-rate", type=float, help="the sweep rate whose reports `compare/` puts side by side")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--no-early-stop", dest="early_stop", action="store_false", help="capacity steps run to their end")
    ap.add_argument("--budget-s", type=float, default=540, help="start no run that would end after this")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + a.budget_s
    rates = [float(r) for r in a.rates.split(",") if r]
    code = 0
    for i, name in enumerate(a.profiles):
        profile = load_profile(name)
        profile_name = profile.name
        with contextlib.ExitStack() as stack:
            try:  # the installed vLLM's parser is the judge of the profile
                up = stack.enter_context(
                    runner.launched(profile, a.port, install=profile.build == "cpu", validate=True, on_progress=say)
                )
            except (ServerStartError, InstallError, ProfileInvalid) as e:  # a profile that does not serve is a result
                did_not_start(a.out / profile_name, profile_name, e)
                code = 1
                continue
            stack.callback(keep_server_log, up.server.log_path, a.out / profile_name)  # after the server stops
            sweep_profile(a, i, profile, up, rates, deadline)
    archive = write_report(a.out, ttft_target_ms(a.slo_file), a.compare_rate)
    print((a.out / "RESULTS.md").read_text())
    say(f"archive {archive}")
    return code


def did_not_start(where: Path, name: str, e: Exception) -> None:
    say(f"{name}: did not start: {e}")
    where.mkdir(parents=True, exist_ok=True)
    (where / "sweep.json").write_text(
        json.dumps(
            {
                "profile": name,
                "runs": [],
                "started_at": time.time(),
                "did_not_start": str(e),
                "server_log_tail": getattr(e, "log_tail", ""),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    sys.exit(main())

"""The before/after comparison: the table and chart from reports, and `slogate compare` on real vLLM."""

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from slogate.launch.compare import RATIO, comparison_rows, write_comparison
from slogate.launch.profile import Profile
from slogate.launch.runner import run_locust
from slogate.launch.server import free_port
from slogate.locustfiles.load.words import WORDS
from slogate.slo.gate.judge import judge
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.record import RequestRecord
from slogate.slo.gate.report import Report, RunInfo
from slogate.slo.gate.spec import parse_spec

from slogate.cli import main
from slogate.commands import compare as compare_command

SPEC = parse_spec({"slos": [{"metric": "ttft", "percentile": 95, "max_ms": 200, "class": "shared"}]})


def report_for(shared_ms: float, unique_ms: float) -> Report:
    store = MetricsStore()
    for i in range(40):
        store.add(RequestRecord("shared", 1.0 + i, e2e_us=int(shared_ms * 1000) + 9000, ttft_us=int(shared_ms * 1000)))
        store.add(RequestRecord("unique", 1.0 + i, e2e_us=int(unique_ms * 1000) + 9000, ttft_us=int(unique_ms * 1000)))
    return judge(SPEC, store, RunInfo())


def conversation_report(follow_up_ms: float, cached: int) -> Report:
    store = MetricsStore()
    for i in range(20):
        for turn, ttft_ms in ((1, 300.0), (2, follow_up_ms)):
            tags = ("first_turn", "turn_1") if turn == 1 else ("follow_up", "turn_2")
            rec = RequestRecord(
                "unique", 1.0 + i, e2e_us=int(ttft_ms * 1000) + 9000, ttft_us=int(ttft_ms * 1000),
                prompt_tokens=100, cached_tokens=cached if turn == 2 else 0, tags=tags,
            )  # fmt: skip
            store.add(rec)
    return judge(None, store, RunInfo())


def test_conversations_compare_first_turns_and_follow_ups_with_their_cached_share(tmp_path: Path) -> None:
    reports = {"no-cache": conversation_report(300, 0), "cache": conversation_report(30, 80)}
    rows = {(r["profile"], r["class"]): r for r in comparison_rows(reports)}
    assert rows[("cache", "follow_up")]["ttft_p95_vs_first"] == "0.10x"
    assert rows[("cache", "follow_up")]["prompt_cache_hit_rate"] == 0.8
    assert rows[("cache", "first_turn")]["prompt_cache_hit_rate"] == 0
    md = write_comparison(reports, tmp_path)["markdown"].read_text()
    assert "| cache | follow_up | 20 | 30.0 |" in md and "| 80.0% |" in md


def test_table_has_ratios_to_the_first_profile_and_verdicts(tmp_path: Path) -> None:
    reports = {"before": report_for(340, 340), "after": report_for(25, 340)}
    rows = {(r["profile"], r["class"]): r for r in comparison_rows(reports)}
    assert rows[("before", "shared")]["verdict"] == "fail" and rows[("after", "shared")]["verdict"] == "pass"
    assert rows[("after", "shared")]["ttft_p95_vs_first"] == "0.07x"
    assert rows[("after", "unique")]["ttft_p95_vs_first"] == "1.00x"
    paths = write_comparison(reports, tmp_path)
    md = paths["markdown"].read_text()
    assert "| after | shared | 40 | 25.0 |" in md and "before: failed ttft-p95-shared" in md
    assert json.loads(paths["json"].read_text())["profiles"] == ["before", "after"]
    html = paths["html"].read_text()
    assert "<script" in html and "before" in html and "after" in html and "ttft-p95-shared" in html
    png = paths["png"]
    assert png is not None and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# More than a 3 s run of one user sends: in float32 the tiny model answered 2-token requests 315
# times uncached in 6 s, so the answers are 16 tokens (each request several times longer).
LINES = 600


def salted_and_plain_datasets(tmp_path: Path) -> dict[bool, Path]:
    """The same chat requests (one ~1,000-token system prompt, a question of their own, 16-token
    answers), plain, and with a `cache_salt` of their own (vLLM: a salted request's blocks never match
    another's, so it misses the prefix cache as on a server without one). LINES lines, each sent
    once before any twice: more than a run sends, so no salted request repeats; the salts new to the
    server each time (a rerun of the test would find the first try's blocks cached)."""
    system = " ".join(WORDS[i % len(WORDS)] for i in range(420))  # ~1,000 of the tiny model's tokens
    run = uuid.uuid4().hex[:8]
    files = {}
    for salted in (False, True):
        lines = []
        for i in range(LINES):
            entry = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": f"question {i}"}]}
            entry |= {"max_tokens": 16, "ignore_eos": True} | ({"cache_salt": f"{run}-{i}"} if salted else {})
            lines.append(json.dumps(entry))
        files[salted] = tmp_path / f"{'salted' if salted else 'plain'}.jsonl"
        files[salted].write_text("\n".join(lines) + "\n")
    return files


def test_compare_runs_each_profile_in_turn_and_shows_the_prefix_caching_effect_on_real_vllm(
    vllm_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`slogate compare` of cpu-tiny without and with prefix caching, as a user runs it, with the
    launch left out (vLLM's parser and two server starts: 95 s on 2 cores; the session's server starts
    through the same `start_profile`, tests/launch/test_validate.py runs the parser): each profile's
    load goes to the session's server, where the profile without a prefix cache is a `cache_salt` on
    every request. The profiles' own arguments pick that: the rows tell the two apart by the server's
    cached tokens (exact: 0 and ~85 %), and the TTFT ratio is the rows' own."""
    (tmp_path / "no-cache.yaml").write_text("extends: cpu-tiny\nargs: {enable-prefix-caching: false}\n")
    (tmp_path / "cache.yaml").write_text("extends: cpu-tiny\n")
    slo = tmp_path / "slo.yaml"  # the demo's names class `shared`, which a dataset's requests are not
    slo.write_text("slos:\n  - {metric: ttft, percentile: 50, max_ms: 60000}\nmin_samples: 1\n")
    datasets = salted_and_plain_datasets(tmp_path)
    validated, ran = [], []

    def validate(vllm: object, *profiles: Profile) -> str:
        validated.extend(p.name for p in profiles)
        return "0.32.0"

    def run_profile(profile: Profile, port: int, report_dir: Path, **kw: Any) -> Report:
        ran.append((profile.name, port, kw["slo_file"], kw["extra"]))
        salted = "--no-enable-prefix-caching" in profile.server_args()
        extra = [*kw["extra"], "--dataset", str(datasets[salted])]
        return run_locust(vllm_server, report_dir, config=kw["config"], slo_file=kw["slo_file"], extra=extra)

    monkeypatch.setattr(compare_command, "validate", validate)
    monkeypatch.setattr(compare_command, "run_profile", run_profile)
    out, port = tmp_path / "cmp", free_port()
    code = main([
        "compare", str(tmp_path / "no-cache.yaml"), str(tmp_path / "cache.yaml"), "--out", str(out),
        "--port", str(port), "--run-time", "3s", "--slo-file", str(slo), "--", "--users", "1", "--slo-warmup-s", "0",
    ])  # fmt: skip
    assert code == 0
    locust_args = ["--run-time", "3s", "--users", "1", "--slo-warmup-s", "0"]  # the same workload for each
    assert validated == ["no-cache", "cache"]
    assert ran == [(name, port, str(slo), locust_args) for name in ("no-cache", "cache")]
    data = json.loads((out / "comparison.json").read_text())
    assert data["profiles"] == ["no-cache", "cache"]
    rows = {r["profile"]: r for r in data["rows"] if r["class"] == "all"}
    uncached, cached = rows["no-cache"], rows["cache"]
    # Measured (float32, 2026-12-06): 27 requests uncached in 3 s (TTFT p50 30.8 ms), 40 cached (16.8 ms);
    # in bfloat16 on the CI machine 7 uncached in 4 s (343 ms): 3 is a floor for a machine slower still.
    assert uncached["requests"] >= 3 and cached["requests"] >= 3, data["rows"]
    assert uncached["prompt_cache_hit_rate"] == 0 and cached["prompt_cache_hit_rate"] > 0.5, data["rows"]
    # What the cache saves in TTFT is a timing, which benchmarks show and tests do not assert: 3 s
    # of load after 3 s on a shared 2-core machine can order the two medians either way.
    assert cached[RATIO] == f"{cached['ttft_p95'] / uncached['ttft_p95']:.2f}x", data["rows"]
    assert (out / "no-cache" / "slo-report.json").exists() and (out / "cache" / "slo-report.json").exists()
    assert (out / "ttft.png").exists() and "| cache | all |" in (out / "comparison.md").read_text()

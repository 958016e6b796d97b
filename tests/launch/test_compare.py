"""The before/after comparison: the table and chart from reports, and end to end on real vLLM."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from slogate.launch.compare import comparison_rows, write_comparison
from slogate.launch.server import free_port
from slogate.slo.gate.judge import judge
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.record import RequestRecord
from slogate.slo.gate.report import Report, RunInfo
from slogate.slo.gate.spec import parse_spec

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


@pytest.mark.vllm
def test_compare_shows_the_prefix_caching_effect_on_real_vllm(tmp_path: Path) -> None:
    """cpu-tiny without and with prefix caching, same workload: shared-prefix TTFT drops."""
    (tmp_path / "no-cache.yaml").write_text("extends: cpu-tiny\nargs: {enable-prefix-caching: false}\n")
    (tmp_path / "cache.yaml").write_text("extends: cpu-tiny\n")
    out = tmp_path / "cmp"
    proc = subprocess.run(
        [
            sys.executable, "-m", "slogate.cli", "compare",
            str(tmp_path / "no-cache.yaml"), str(tmp_path / "cache.yaml"),
            "--out", str(out), "--port", str(free_port()), "--run-time", "8s",
            "--", "--shared-prefix-tokens", "2000", "--shared-fraction", "0.5", "--slo-warmup-s", "1",
            "--users", "2", "--max-tokens", "2",  # answers of 2 tokens: TTFT is most of each request
        ],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((out / "comparison.json").read_text())
    rows = {(r["profile"], r["class"]): r for r in data["rows"]}
    cached, uncached = rows[("cache", "shared")], rows[("no-cache", "shared")]
    assert (out / "ttft.png").exists() and (out / "no-cache" / "slo-report.json").exists()
    assert cached["requests"] >= 1 and uncached["requests"] >= 1, data["rows"]
    # 8 s: 2 users with 2-token answers send dozens of shared requests a profile; with 32-token answers
    # and 1 user, a busy CI machine got 4 (TTFT ~390 ms with and without the cache) and skipped. A
    # machine where the CPU server answers a handful still cannot show the effect.
    if min(cached["requests"], uncached["requests"]) < 10:
        pytest.skip(f"the CPU server answered {uncached['requests']} shared requests in 8 s: too slow to compare")
    assert cached["ttft_p50"] < uncached["ttft_p50"], data["rows"]

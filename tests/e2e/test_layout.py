"""The tree says what may import what: only `slo/plugin/` (and the load library and locustfiles)
import Locust or gevent; the gate imports neither the outputs nor the plugin; every package says
in its docstring what it holds; no module grows past the size one can read in one sitting."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

LOCUST = {"locust", "gevent", "geventhttpclient"}
PACKAGES = {"slo": "slogate.slo", "launch": "slogate.launch", "locustfiles": "slogate.locustfiles"}
MAX_LINES = 400
DATA_MODULES = {"locustfiles/load/words.py"}  # a word list, not code


def modules(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def dotted(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    name = ".".join([PACKAGES[parts[0]], *parts[1:]])
    return name.removesuffix(".__init__")


def imported(path: Path) -> set[str]:
    """Every module `path` imports (absolute names; slogate's relative to its top-level name)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{alias.name}" for alias in node.names)
    return out


def test_only_the_plugin_and_the_load_imports_locust_or_gevent() -> None:
    for path in [*modules("slo"), *modules("launch")]:
        if dotted(path).startswith("slogate.slo.plugin"):
            continue
        bad = sorted(m for m in imported(path) if m.split(".")[0] in LOCUST)
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}: only slo/plugin/ may"


@pytest.mark.parametrize(
    ("folder", "forbidden"),
    [
        ("slo/gate", ("slogate.slo.outputs", "slogate.slo.plugin", "slogate.slo.rejudge", "slogate.launch",
                      "slogate.locustfiles")),
        ("slo/outputs", ("slogate.slo.plugin", "slogate.slo.rejudge", "slogate.launch", "slogate.locustfiles")),
        ("launch", ("slogate.slo.plugin", "slogate.locustfiles.load")),
    ],
)  # fmt: skip
def test_lower_layers_do_not_import_higher_ones(folder: str, forbidden: tuple[str, ...]) -> None:
    for path in modules(folder):
        bad = sorted(m for m in imported(path) if m.startswith(forbidden))
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_importing_the_gate_and_outputs_loads_no_locust_or_gevent() -> None:
    names = [dotted(p) for p in [*modules("slo/gate"), *modules("slo/outputs"), ROOT / "slo" / "rejudge.py"]]
    code = (
        "import importlib, sys\n"
        f"for name in {names!r}: importlib.import_module(name)\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {sorted(LOCUST)!r})\n"
        "assert not bad, bad\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_every_package_says_what_it_holds_and_may_import() -> None:
    for init in [*(ROOT / "slo").rglob("__init__.py"), *(ROOT / "launch").rglob("__init__.py"),
                 *(ROOT / "locustfiles").rglob("__init__.py"), *(ROOT / "slogate").rglob("__init__.py")]:  # fmt: skip
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert "import" in doc and len(doc.splitlines()) >= 2, f"{init.relative_to(ROOT)}: docstring says too little"


def test_no_module_is_over_the_size_one_reads_in_one_sitting() -> None:
    for folder in ("slo", "launch", "locustfiles", "slogate", "benchmarks", "scripts", "tests"):
        for path in modules(folder):
            rel = str(path.relative_to(ROOT))
            lines = len(path.read_text().splitlines())
            assert rel in DATA_MODULES or lines <= MAX_LINES, f"{rel}: {lines} lines (at most {MAX_LINES})"


def test_the_load_library_has_only_public_names_across_modules() -> None:
    """No module imports another's private name (`from x import _y`)."""
    for folder in ("slo", "launch", "locustfiles", "slogate"):
        for path in modules(folder):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("slogate"):
                    private = [a.name for a in node.names if a.name.startswith("_")]
                    assert not private, f"{path.relative_to(ROOT)} imports private {private} from {node.module}"


def layout_block() -> dict[str, set[str]]:
    """The layout page's block (docs/layout.md): folder -> the module and folder names it lists there."""
    text = (ROOT / "docs" / "layout.md").read_text()
    block = text.split("# Layout", 1)[1].split("```", 2)[1]
    listed: dict[str, set[str]] = {}
    parents: list[str] = []
    current = ""
    for line in filter(str.strip, block.splitlines()):
        head = line.split()[0]
        if head.endswith("/") and not line.startswith(" " * 8):
            depth = (len(line) - len(line.lstrip())) // 2
            parents = [*parents[:depth], head.rstrip("/")]
            current = "/".join(parents)
            listed.setdefault(current, set())
        listed[current].update(re.findall(r"[\w/]+\.py\b", line))
    return listed


def test_the_layout_page_is_the_tree() -> None:
    """Every module of the packages is named under its folder, and every name there exists."""
    listed = layout_block()
    for folder in ("slo/gate", "slo/outputs", "slo/plugin", "launch", "locustfiles/load", "slogate/commands"):
        on_disk = {p.name for p in (ROOT / folder).glob("*.py") if p.name != "__init__.py"}
        assert on_disk == listed[folder], (
            f"{folder}: docs/layout.md lists {sorted(listed[folder] - on_disk)} "
            f"that do not exist and leaves out {sorted(on_disk - listed[folder])}"
        )
    for folder, names in listed.items():
        missing = [n for n in names if not (ROOT / folder / n).exists() and not list((ROOT / folder).rglob(n))]
        assert not missing, f"docs/layout.md names {missing} under {folder}/, which has none"


def test_every_test_conftest_runs_one_at_a_time_exists() -> None:
    """tests/conftest.py's SERIAL and ALONE name tests by node-id prefix: one renamed away would
    silently run beside others again (and fail for want of a core)."""
    from tests.conftest import ALONE, SERIAL

    for prefix in SERIAL + ALONE:
        path, _, name = prefix.partition("::")
        source = (ROOT / path).read_text()
        name = name.split("[")[0]  # one parametrization of a test: its id follows the name
        assert not name or f"def {name}" in source, f"SERIAL or ALONE names {prefix}, which is no test"


@pytest.mark.parametrize(
    ("args", "parallel"),
    [
        (["-n", "3"], True),
        (["-n3", "-q"], True),
        (["--numprocesses=auto"], True),
        (["--numprocesses", "2"], True),
        (["-n", "0"], False),
        (["-n0"], False),
        (["--dist", "loadgroup"], False),
        (["-q", "--no-header", "tests/gate"], False),
    ],
)
def test_the_session_patches_for_gevent_unless_it_only_controls_workers(args: list[str], parallel: bool) -> None:
    from tests.gevent_patch import starts_xdist_workers

    assert starts_xdist_workers(args) is parallel

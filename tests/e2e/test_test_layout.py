"""The tests' own layout: tests/gate/ and tests/outputs/ test code that imports no Locust or gevent
(slo/gate/, slo/outputs/: tests/e2e/test_layout.py), and run without either imported."""

import os
import subprocess
import sys

from tests.conftest import ROOT

# What pytest imports when it runs only those folders: its plugins, the ini file (a filterwarnings category
# is imported), tests/conftest.py, and every module it collects. Printed last, on a line of its own.
COLLECT = """
import sys, pytest
code = pytest.main(["--collect-only", "-qq", "-p", "no:cacheprovider", "tests/gate", "tests/outputs"])
print(int(code), *sorted(m for m in ("locust", "gevent") if m in sys.modules))
"""


def test_gate_and_outputs_tests_are_collected_without_locust_or_gevent() -> None:
    """Only the conftest.py of the folders that need Locust in-process patch for gevent (tests/gevent_patch.py);
    a test of slo/plugin/ in tests/gate/ or tests/outputs/ would bring both back into their sessions."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}  # not as one of xdist's workers
    out = subprocess.run(
        [sys.executable, "-c", COLLECT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    ).stdout
    assert out.splitlines()[-1] == "0", out[-2000:]  # collected, and neither module imported

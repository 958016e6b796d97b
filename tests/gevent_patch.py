"""Gevent's monkey-patching for the tests that need Locust in-process, imported first by the conftest.py
of their folders (tests/cli, e2e, launch, load, plugin; tests/gate and tests/outputs import neither
Locust nor gevent: tests/e2e/test_test_layout.py checks it).

`import locust` patches the whole standard library for gevent, and must come before anything else
imports sockets or threads: so where pytest runs the tests itself, before the project's modules
(tests/conftest.py imports them where used). The first of those folders' conftest.py comes at start
for the folders named on the command line, else when collection reaches it (alphabetical: tests/cli/,
before any test module). pytest's plugins import ssl earlier still (anyio's): gevent's warning about
it is known and silenced.

Under pytest-xdist (scripts/test.sh runs the tests that only wait on parallel workers) each worker
patches all but threads, which carry its results to the controller (execnet); the controller, which
runs no test, patches nothing.
"""

import os
import sys
import warnings


def starts_xdist_workers(args: list[str]) -> bool:
    """Whether pytest was asked for parallel workers (`-n 3`, `-n3`, `--numprocesses=auto`; not `-n 0`)."""
    for i, arg in enumerate(args):
        if arg in ("-n", "--numprocesses"):
            value = args[i + 1] if i + 1 < len(args) else ""
        elif arg.startswith("--numprocesses="):
            value = arg.partition("=")[2]
        elif arg.startswith("-n") and not arg.startswith("--"):
            value = arg[2:]
        else:
            continue
        return value not in ("", "0")
    return False


WORKER = bool(os.environ.get("PYTEST_XDIST_WORKER"))
if WORKER or not starts_xdist_workers([*sys.argv[1:], *os.environ.get("PYTEST_ADDOPTS", "").split()]):
    from gevent.monkey import MonkeyPatchWarning, patch_all

    with warnings.catch_warnings():  # ssl comes first (pytest's plugins import it, anyio's): known, not news
        warnings.simplefilter("ignore", MonkeyPatchWarning)
        if WORKER:
            patch_all(thread=False, threading=False)
            os.environ["LOCUST_SKIP_MONKEY_PATCH"] = "1"  # Locust would patch threads too
            import locust

            del os.environ["LOCUST_SKIP_MONKEY_PATCH"]  # the Locust processes the tests start patch themselves
        else:
            import locust  # noqa: F401

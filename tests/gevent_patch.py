"""Gevent's monkey-patching for the test session, imported first by tests/conftest.py.

`import locust` patches the whole standard library for gevent, and must come before anything else
imports sockets or threads: so where pytest runs the tests itself. Under pytest-xdist
(scripts/test.sh runs the tests that only wait on parallel workers) each worker patches all but
threads, which carry its results to the controller (execnet); the controller, which runs no test,
patches nothing.
"""

import os
import sys


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


if os.environ.get("PYTEST_XDIST_WORKER"):
    from gevent import monkey

    monkey.patch_all(thread=False, threading=False)
    os.environ["LOCUST_SKIP_MONKEY_PATCH"] = "1"  # Locust would patch threads too
    import locust

    del os.environ["LOCUST_SKIP_MONKEY_PATCH"]  # the Locust processes the tests start patch themselves
elif not starts_xdist_workers([*sys.argv[1:], *os.environ.get("PYTEST_ADDOPTS", "").split()]):
    import locust  # noqa: F401

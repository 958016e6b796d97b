"""This folder's tests drive Locust (or gevent) in-process: gevent's monkey-patching comes first,
before they import sockets or threads (tests/gevent_patch.py). tests/gate/ and tests/outputs/ have none."""

import tests.gevent_patch  # noqa: F401

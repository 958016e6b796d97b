"""slogate's raw SSE users without the kernel's receive stamps (geventhttpclient's own sockets),
to measure what the stamps do, side by side: a locustfile and an importable module.

    locust -f benchmarks/unstamped_users.py UnstampedOpenLoopChatUser ...
"""

import slo.locust_plugin  # noqa: F401  (registers the SLO options and the gate)
from locustfiles import options  # noqa: F401  (registers the workload options)
from locustfiles.open_loop import OpenLoopChatUser
from locustfiles.users import ChatStreamUser, SseChatUser


class _NoReceiveStamps(SseChatUser):
    abstract = True

    def connect(self) -> None:
        super().connect()
        del self.http._connection_pool._create_tcp_socket  # back to the pool's own socket factory


class UnstampedChatStreamUser(_NoReceiveStamps, ChatStreamUser):
    pass


class UnstampedOpenLoopChatUser(_NoReceiveStamps, OpenLoopChatUser):
    pass

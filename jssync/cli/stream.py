"""``jssync stream ...``: list, show, add, edit, remove, purge, get, view, export, import."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Iterable
from typing import Any, TextIO

from ..base.errors import ValidationError
from ..base.validate import positive_int
from .common import (
    Progress,
    add_command,
    add_force,
    confirmed,
    duration_or_zero,
    get_payload,
    human_duration,
    human_size,
    limit_text,
    msg_record,
    parse_duration,
    parse_limit,
    parse_size,
    print_json,
    print_record,
    printable_text,
    table,
    value_text,
    with_js,
)

# -- stream ------------------------------------------------------------------------------------


def _stream_ls(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    infos = list(js.streams(subject=args.subject))
    if args.json:
        print_json(infos, out)
        return 0
    rows = [[i.config.name, ",".join(i.config.subjects or []), i.state.messages, i.state.bytes,
             i.state.first_seq, i.state.last_seq, getattr(i.config.storage, "value", i.config.storage)]
            for i in infos]
    table(rows, ["NAME", "SUBJECTS", "MESSAGES", "BYTES", "FIRST", "LAST", "STORAGE"], out)
    return 0


def _stream_info(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    info = js.stream(args.name).info(subjects_filter=args.subjects)
    if args.json:
        print_json(info, out)
        return 0
    c, s = info.config, info.state
    rows = [
        ["name", c.name], ["subjects", ",".join(c.subjects or []) or "-"],
        ["storage", value_text(c.storage)], ["retention", value_text(c.retention)],
        ["replicas", c.num_replicas], ["max_msgs", limit_text(c.max_msgs)],
        ["max_msgs_per_subject", limit_text(c.max_msgs_per_subject)],
        ["max_bytes", human_size(c.max_bytes if c.max_bytes is not None else -1)],
        ["max_msg_size", human_size(c.max_msg_size if c.max_msg_size is not None else -1)],
        ["max_age", human_duration(c.max_age)],
        ["duplicate_window", human_duration(c.duplicate_window, zero="-")],
        ["discard", value_text(c.discard)],
        ["messages", f"{s.messages:,}"], ["bytes", human_size(s.bytes)],
        ["first_seq", s.first_seq], ["last_seq", s.last_seq], ["consumers", s.consumer_count],
    ]
    if c.description:
        rows.insert(1, ["description", c.description])
    table(rows, ["FIELD", "VALUE"], out)
    if s.subjects:
        out.write("\n")
        table(sorted([k, v] for k, v in s.subjects.items()), ["SUBJECT", "MESSAGES"], out)
    return 0


def _stream_add(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    params: dict[str, Any] = {"name": args.name, "subjects": [args.name], "storage": args.storage,
                              "retention": args.retention, **_stream_settings(args)}
    st = js.create_stream(**params)
    if args.json:
        print_json(st.cached_info, out)
    else:
        out.write(f"created stream {st.name}\n")
    return 0


#: the stream settings ``stream add`` and ``stream edit`` both take: (flag, config field, type, help)
_STREAM_SETTINGS: list[tuple[str, str, Callable[[str], Any], str]] = [
    ("--max-msgs", "max_msgs", parse_limit, "keep at most this many messages (-1: unlimited)"),
    ("--max-bytes", "max_bytes", parse_size, "keep at most this many bytes, e.g. 1GiB (-1: unlimited)"),
    ("--max-age", "max_age", duration_or_zero,
     "how long messages are kept: seconds or e.g. 1h, 90m, 1h30m (0: no limit)"),
    ("--max-msgs-per-subject", "max_msgs_per_subject", parse_limit,
     "keep at most this many messages per subject (-1: unlimited)"),
    ("--max-msg-size", "max_msg_size", parse_size, "refuse messages larger than this, e.g. 1MiB (-1: unlimited)"),
    ("--dupe-window", "duplicate_window", duration_or_zero,
     "how long message ids are remembered to drop duplicates, e.g. 2m"),
    ("--description", "description", str, "a description of the stream"),
]


def _add_stream_settings(x: argparse.ArgumentParser) -> None:
    for flag, _field, kind, hlp in _STREAM_SETTINGS:
        metavars: dict[Callable[[str], Any], str] = {duration_or_zero: "DURATION", parse_size: "SIZE", parse_limit: "N"}
        metavar = metavars.get(kind, "TEXT")
        x.add_argument(flag, type=kind, metavar=metavar, help=hlp)


def _stream_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The stream config fields given on the command line (subjects, limits, ...)."""
    params: dict[str, Any] = {}
    for flag, field, _kind, _hlp in _STREAM_SETTINGS:
        value = getattr(args, flag[2:].replace("-", "_"))
        if value is not None:
            params[field] = value
    if args.subjects:
        params["subjects"] = [x.strip() for x in args.subjects.split(",") if x.strip()]
    if getattr(args, "replicas", None) is not None:
        params["num_replicas"] = args.replicas
    if args.allow_direct:
        params["allow_direct"] = True
    return params


def _stream_edit(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    params = _stream_settings(args)
    if args.no_allow_direct:
        params["allow_direct"] = False
    if not params:
        raise ValidationError(f"stream edit {args.name}: nothing to change: give --subjects or a limit "
                              "(see jssync stream edit --help)")
    st = js.update_stream(name=args.name, **params)
    if args.json:
        print_json(st.cached_info, out)
    else:
        out.write(f"updated stream {st.name}: {', '.join(sorted(params))}\n")
    return 0


def _stream_rm(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    js.stream(args.name)  # StreamNotFoundError before any question
    if not confirmed(args, f"stream {args.name}"):
        return 1
    js.delete_stream(args.name)
    if args.json:
        print_json({"deleted": args.name}, out)
    else:
        out.write(f"deleted stream {args.name}\n")
    return 0


def _stream_purge(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    n = js.stream(args.name).purge(subject=args.subject, seq=args.seq, keep=args.keep)
    if args.json:
        print_json({"purged": n}, out)
    else:
        out.write(f"purged {n} messages from {args.name}\n")
    return 0


def _stored_record(m: Any, stream: str) -> dict[str, Any]:
    return msg_record(m.subject, m.data, m.headers, seq=m.seq, time=m.time.isoformat() if m.time else None,
                       stream=stream)


def _stream_get(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    st = js.stream(args.name)
    m = st.get_msg(args.seq) if args.seq is not None else st.get_msg(last_by_subject=args.last_by_subject)
    if args.json:
        print_record(_stored_record(m, args.name), out)
    else:
        out.write(f"seq {m.seq} on {m.subject} at {m.time}\n")
        if m.headers:
            for k, v in m.headers.items():
                out.write(f"{k}: {v}\n")
        out.write(m.data.decode(errors="replace") + "\n")
    return 0


def _find_stream(js: Any, name: str) -> Any:
    """The stream ``name``; raises :class:`jssync.StreamNotFoundError` naming it when there is none."""
    import jssync

    try:
        return js.stream(name)
    except jssync.StreamNotFoundError as exc:
        raise jssync.StreamNotFoundError(exc.code, exc.err_code, f"stream {name} not found") from None


def _view_start(args: argparse.Namespace, state: Any) -> dict[str, Any]:
    """The ordered consumer options of ``stream view``: where to start reading."""
    import datetime as _dt

    opts: dict[str, Any] = {}
    if args.subject:
        opts["filter_subjects"] = args.subject
    if args.start_seq is not None:
        opts["opt_start_seq"] = args.start_seq
    elif args.since is not None:
        opts["opt_start_time"] = _dt.datetime.now(_dt.UTC) - _dt.timedelta(seconds=args.since)
    elif args.last is not None and not args.subject:
        # the last N messages start no earlier than this (fewer than N lie after it, even with holes)
        start = state.last_seq - args.last + 1 - (state.num_deleted or 0)
        if start > max(1, state.first_seq):
            opts["opt_start_seq"] = start
    return opts


def _show_stored(m: Any, args: argparse.Namespace, out: TextIO) -> None:
    """One message of ``stream view``: a JSON record, the raw payload, or for people like ``nats stream view``."""
    md = m.metadata
    if args.raw:
        out.flush()
        buf = getattr(out, "buffer", None)
        if buf is not None:
            buf.write(m.data + b"\n")
            buf.flush()
        else:
            out.write(m.data.decode(errors="replace") + "\n")
        return
    if args.json:
        print_record(msg_record(m.subject, m.data, m.headers, seq=md.sequence.stream,
                                  time=md.timestamp.isoformat(), stream=args.name), out)
        return
    when = md.timestamp.astimezone().isoformat(timespec="seconds")
    out.write(f"[{md.sequence.stream}] Subject: {m.subject} Received: {when}\n")
    for k, v in (m.headers or {}).items():
        out.write(f"  {k}: {v}\n")
    text = printable_text(m.data)
    if text is None:
        text = f"<{len(m.data)} bytes of binary data: --json shows them as base64, --raw as they are>"
    out.write(f"\n{text}\n\n")


def _stream_view(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    """Print a stream's messages in order through an ordered consumer (ephemeral, deleted at the end):
    from the start, ``--start-seq`` or ``--since``; the ``--last`` N; at most ``--count``; up to the
    last message stored when it started. Each read waits at most ``--timeout``."""
    st = _find_stream(js, args.name)
    oc = st.ordered_consumer(**_view_start(args, st.cached_info.state))
    shown = 0
    done = False
    try:
        while not done:
            res = oc.fetch_no_wait(min(256, args.count - shown) if args.count else 256)
            got = 0
            for m in res:
                got += 1
                pending = m.metadata.num_pending
                done = pending == 0
                if args.last is not None and pending >= args.last:
                    continue  # before the last N
                _show_stored(m, args, out)
                shown += 1
                if args.count and shown >= args.count:
                    done = True
                    break
            res.stop()
            done = done or got == 0
    finally:
        delete_quietly(js, args.name, oc.name)
    if not shown:
        which = f" on {args.subject}" if args.subject else ""
        sys.stderr.write(f"jssync: no messages{which} in stream {args.name}\n")
    return 0


def delete_quietly(js: Any, stream: str, consumer: str | None) -> None:
    """Delete a consumer we made (best effort: the server removes it when inactive anyway)."""
    import jssync

    if consumer is None:
        return
    try:
        js.delete_consumer(stream, consumer)
    except jssync.Error as exc:
        logging.getLogger("jssync").debug("could not delete consumer %s/%s: %s", stream, consumer, exc)


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
            print_record(_stored_record(m, args.name), dest)
            n += 1
            prog.update()
    finally:
        prog.close()
        if dest is not sys.stdout:
            dest.close()
    if args.file != "-":
        if args.json:
            print_json({"exported": n, "stream": args.name, "file": args.file}, out)
        else:
            out.write(f"exported {n} messages from {args.name} to {args.file}\n")
    return 0


def _capture_hint(js: Any, stream: str | None, subject: str, prefix: str | None) -> str:
    """What to run so that a stream captures ``subject``: add it to ``stream`` when that stream exists
    (``stream edit`` with its subjects plus this one), else create ``stream``."""
    import shlex

    import jssync

    pattern = f"{prefix}.>" if prefix else subject
    if stream:
        try:
            info = js.stream(stream).info()
        except jssync.StreamNotFoundError:
            info = None
        except (jssync.Error, ValueError):  # a name the server refuses, or no answer: suggest a new stream
            info = None
            stream = None
        if info is not None and stream:
            subjects = [*(info.config.subjects or []), pattern]
            return (f"stream {stream} exists and does not capture it: add the subject to it, e.g. jssync stream "
                    f"edit {shlex.quote(stream)} --subjects {shlex.quote(','.join(subjects))}")
    return (f"create the stream first, e.g. jssync stream add {shlex.quote(stream) if stream else 'NAME'} "
            f"--subjects {shlex.quote(pattern)}")


def _stream_import(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    import threading

    import jssync

    src: TextIO = sys.stdin if args.file == "-" else open(args.file)  # noqa: SIM115
    lines = src.readlines()
    if src is not sys.stdin:
        src.close()
    where = "stdin" if args.file == "-" else args.file
    records = []
    for i, line in enumerate(lines, 1):  # all of it is read and checked before anything is sent
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            if not isinstance(rec, dict) or not isinstance(rec.get("subject"), str):
                raise ValidationError("not a message record (an object with a \"subject\")")
            subject = f"{args.subject_prefix}.{rec['subject']}" if args.subject_prefix else rec["subject"]
            records.append((i, subject, get_payload(rec, "data"), rec.get("headers") or None, rec.get("stream")))
        except ValueError as exc:
            raise ValidationError(f"line {i} of {where}: {exc}") from None
    prog = Progress(len(records), f"import {args.name or ''}".strip(), True if args.progress else None)
    futs: list[tuple[Any, tuple[int, str, str | None]]] = []  # (Future, where it came from)
    no_stream = threading.Event()  # an asynchronous publish found no stream (e.g. deleted meanwhile)

    def check(fut: Any) -> None:
        if isinstance(fut.exception(), jssync.NoRespondersError):
            no_stream.set()

    captured: set[str] = set()
    missing: tuple[int, str, str | None] | None = None
    sent = 0
    try:
        for i, subject, data, headers, stream in records:
            if no_stream.is_set():
                break
            if subject not in captured:  # the first message on a subject is sent and acknowledged first
                try:
                    js.publish(subject, data, headers=headers)
                except jssync.NoRespondersError:
                    missing = (i, subject, stream)
                    break
                captured.add(subject)
            else:
                fut = js.publish_async(subject, data, headers=headers)
                fut.add_done_callback(check)
                futs.append((fut, (i, subject, stream)))
            sent += 1
            prog.update()
        js.publish_async_completed(timeout=max(30.0, len(futs) / 1000))
    finally:
        prog.close()
    failed = [(f.exception(), origin) for f, origin in futs if f.exception() is not None]
    sent -= len(failed)
    if missing is None:
        missing = next((origin for exc, origin in failed if isinstance(exc, jssync.NoRespondersError)), None)
    if missing is not None:
        i, subject, stream = missing
        sys.stderr.write(f"jssync: no stream captures subject {subject!r} (line {i} of {where}); stopped there "
                         f"after {sent} messages: {_capture_hint(js, stream, subject, args.subject_prefix)}\n")
        return 1
    if failed:
        sys.stderr.write(f"jssync: {len(failed)} publishes failed, first: {failed[0][0]}\n")
        return 1
    if args.json:
        print_json({"imported": sent}, out)
    else:
        out.write(f"imported {sent} messages\n")
    return 0


def register(sub: Any) -> None:
    """Add this group's commands to the top-level sub-parsers ``sub``."""
    st = add_command(sub, "stream", help="manage streams").add_subparsers(dest="stream_cmd", required=True)
    x = add_command(st, "ls", help="list streams")
    x.add_argument("--subject", help="only streams that capture this subject")
    x.set_defaults(func=with_js(_stream_ls))
    x = add_command(st, "info", help="show a stream")
    x.add_argument("name")
    x.add_argument("--subjects", metavar="FILTER", help="also count messages per subject (e.g. '>')")
    x.set_defaults(func=with_js(_stream_info))
    x = add_command(st, "add", help="create a stream")
    x.add_argument("name")
    x.add_argument("--subjects", help="comma-separated subjects (default: the stream name, as the nats CLI)")
    x.add_argument("--storage", choices=["file", "memory"], default="file")
    x.add_argument("--retention", choices=["limits", "interest", "workqueue"], default="limits")
    x.add_argument("--replicas", type=int, default=1)
    _add_stream_settings(x)
    x.add_argument("--allow-direct", action="store_true", help="answer direct gets (ADR-31)")
    x.set_defaults(func=with_js(_stream_add))
    x = add_command(st, "edit", help="change the subjects or limits of a stream",
             description="Change the subjects or limits of an existing stream; what is not given stays as it is "
                         "(like nats stream edit).")
    x.add_argument("name")
    x.add_argument("--subjects", help="comma-separated subjects: the new list (replaces the old one)")
    x.add_argument("--replicas", type=int)
    _add_stream_settings(x)
    x.add_argument("--allow-direct", action="store_true", help="answer direct gets (ADR-31)")
    x.add_argument("--no-allow-direct", action="store_true", help="stop answering direct gets")
    x.set_defaults(func=with_js(_stream_edit))
    x = add_command(st, "rm", help="delete a stream (asks first on a terminal, unless -f)")
    x.add_argument("name")
    add_force(x)
    x.set_defaults(func=with_js(_stream_rm))
    x = add_command(st, "purge", help="purge a stream")
    x.add_argument("name")
    x.add_argument("--subject")
    x.add_argument("--seq", type=int)
    x.add_argument("--keep", type=int)
    x.set_defaults(func=with_js(_stream_purge))
    x = add_command(st, "get", help="read one stored message")
    x.add_argument("name")
    x.add_argument("seq", type=int, nargs="?")
    x.add_argument("--last-by-subject")
    x.set_defaults(func=with_js(_stream_get), _spill=(("seq", int),))
    x = add_command(st, "view", help="print the messages of a stream (leaves no consumer behind)",
             description="Print a stream's messages in order, like nats stream view: sequence, subject, time, "
                         "headers and data (as text when printable). Reads through an ordered consumer that is "
                         "deleted at the end, up to the last message stored when it started.")
    x.add_argument("name")
    x.add_argument("--subject", help="only messages on this subject (wildcards allowed)")
    start = x.add_mutually_exclusive_group()
    start.add_argument("--since", type=parse_duration, metavar="DURATION",
                       help="start with the messages stored this long ago, e.g. 1h, 30m")
    start.add_argument("--start-seq", type=positive_int, metavar="N", help="start at this stream sequence")
    x.add_argument("--last", type=positive_int, metavar="N", help="only the last N messages (of those selected)")
    x.add_argument("--count", type=positive_int, metavar="N", help="print at most N messages")
    x.add_argument("--raw", action="store_true", help="print only the payloads, each on a line of its own")
    x.set_defaults(func=with_js(_stream_view))
    x = add_command(st, "export", help="write every message to a JSON Lines file")
    x.add_argument("name")
    x.add_argument("file", help="output file, - for stdout")
    x.set_defaults(func=with_js(_stream_export))
    x = add_command(st, "import", help="publish every message of a JSON Lines file")
    x.add_argument("file", help="input file, - for stdin")
    x.add_argument("--name", help="label for the progress bar")
    x.add_argument("--subject-prefix", help="prepend this token to every subject")
    x.set_defaults(func=with_js(_stream_import))

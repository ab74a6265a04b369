"""``jssync kv ...``: key-value buckets."""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from .common import (
    add_command,
    add_force,
    confirmed,
    entry_record,
    open_connection,
    print_json,
    print_record,
    printable_text,
    table,
    value_text,
)

# -- key-value ---------------------------------------------------------------------------------


def _kv(args: argparse.Namespace) -> int:
    import jssync

    with open_connection(args) as nc:
        js = nc.jetstream(timeout=args.timeout)
        out = sys.stdout
        if args.kv_cmd == "add":
            js.create_key_value(bucket=args.bucket, history=args.history)
            if args.json:
                print_json({"bucket": args.bucket, "history": args.history}, out)
            else:
                out.write(f"created bucket {args.bucket}\n")
            return 0
        if args.kv_cmd == "ls" and args.bucket is None:
            return _kv_buckets(js, args, out)
        kv = js.key_value(args.bucket)
        if args.kv_cmd == "get":
            e = kv.get(args.key)
            if args.json:
                print_record(entry_record(e), out)
            else:
                out.write((e.value or b"").decode(errors="replace") + "\n")
        elif args.kv_cmd == "put":
            rev = kv.put(args.key, (args.value or "").encode())
            if args.json:
                print_json({"bucket": args.bucket, "key": args.key, "revision": rev}, out)
            else:
                out.write(f"revision {rev}\n")
        elif args.kv_cmd == "del":
            if not confirmed(args, f"key {args.key} of bucket {args.bucket}"):
                return 1
            kv.delete(args.key)
            if args.json:
                print_json({"deleted": args.key, "bucket": args.bucket}, out)
            else:
                out.write(f"deleted {args.key}\n")
        elif args.kv_cmd == "history":
            _kv_history(kv, args, out)
        elif args.kv_cmd == "ls":
            try:
                keys = sorted(kv.keys())
            except jssync.Error as exc:
                if "no keys" not in str(exc).lower():
                    raise
                keys = []
            if args.json:
                print_json(keys, out)
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
                    if args.json:
                        print_record(entry_record(e), out)
                    else:
                        op = getattr(e.operation, "value", e.operation) or "PUT"
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


def _kv_history(kv: Any, args: argparse.Namespace, out: TextIO) -> None:
    """``kv history BUCKET KEY``: every stored revision of the key (puts, deletes, purges), oldest first."""
    entries = kv.history(args.key)
    if args.json:
        for e in entries:
            print_record(entry_record(e), out)
        return
    rows = []
    for e in entries:
        op = value_text(e.operation) or "PUT"
        text = printable_text(e.value or b"")
        if text is None:
            text = f"<{len(e.value)} bytes of binary data>"
        elif len(text) > 60:
            text = text[:57] + "..."
        created = e.created.astimezone().isoformat(timespec="seconds") if e.created else "-"
        rows.append([e.key, e.revision, op, created, len(e.value or b""), text if op == "PUT" else ""])
    table(rows, ["KEY", "REVISION", "OP", "CREATED", "LENGTH", "VALUE"], out)


def _kv_buckets(js: Any, args: argparse.Namespace, out: TextIO) -> int:
    """``kv ls`` without a bucket: every bucket, as ``nats kv ls`` lists them."""
    rows = []
    for st in sorted(js.key_value_stores(), key=lambda x: x.bucket):
        mirror = st.stream_info.config.mirror
        rows.append({"bucket": st.bucket, "values": st.values, "bytes": st.bytes, "history": st.history,
                     "ttl": st.ttl, "storage": getattr(st.storage, "value", st.storage),
                     "replicas": st.replicas, "mirror": mirror.name[3:] if mirror and mirror.name else None,
                     "description": st.stream_info.config.description})
    if args.json:
        print_json(rows, out)
        return 0
    table([[r["bucket"], r["values"], r["bytes"], r["history"], r["ttl"] or "-", r["storage"],
             r["mirror"] or "-"] for r in rows],
           ["BUCKET", "VALUES", "BYTES", "HISTORY", "TTL", "STORAGE", "MIRROR"], out)
    return 0


def register(sub: Any) -> None:
    """Add this group's commands to the top-level sub-parsers ``sub``."""
    kv = add_command(sub, "kv", help="key-value buckets").add_subparsers(dest="kv_cmd", required=True)
    x = add_command(kv, "add", help="create a bucket")
    x.add_argument("bucket")
    x.add_argument("--history", type=int, default=1)
    x.set_defaults(func=_kv)
    for name, hlp in (("get", "read a key"), ("del", "delete a key (asks first on a terminal, unless -f)")):
        x = add_command(kv, name, help=hlp)
        x.add_argument("bucket")
        x.add_argument("key")
        if name == "del":
            add_force(x)
        x.set_defaults(func=_kv)
    x = add_command(kv, "history", help="show every revision of a key (puts, deletes, purges)")
    x.add_argument("bucket")
    x.add_argument("key")
    x.set_defaults(func=_kv)
    x = add_command(kv, "put", help="write a key")
    x.add_argument("bucket")
    x.add_argument("key")
    x.add_argument("value")
    x.set_defaults(func=_kv)
    x = add_command(kv, "ls", help="list the keys of a bucket, or every bucket")
    x.add_argument("bucket", nargs="?", help="the bucket whose keys to list (default: list the buckets)")
    x.set_defaults(func=_kv, _spill=(("bucket", str),))
    x = add_command(kv, "watch", help="print changes")
    x.add_argument("bucket")
    x.add_argument("key", nargs="?")
    x.add_argument("--count", type=int, default=0, help="stop after N updates")
    x.set_defaults(func=_kv, _spill=(("key", str),))

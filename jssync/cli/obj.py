"""``jssync obj ...``: object stores."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Any, TextIO

from .common import (
    add_command,
    add_force,
    confirmed,
    human_size,
    jsonable,
    parse_size,
    print_json,
    print_record,
    table,
    with_js,
)

# -- object store ------------------------------------------------------------------------------


def _obj_add(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    params: dict[str, Any] = {"bucket": args.bucket, "storage": args.storage}
    if args.description:
        params["description"] = args.description
    if args.max_bytes is not None:
        params["max_bytes"] = args.max_bytes
    js.create_object_store(**params)
    if args.json:
        print_json({"bucket": args.bucket, "storage": args.storage}, out)
    else:
        out.write(f"created object store {args.bucket}\n")
    return 0


def _obj_put(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    """Store FILE (``-``: stdin) as object ``--name`` (default: the file's name); blocks until every chunk
    is acknowledged (at most --timeout plus one second per MiB)."""
    name = args.name or ("stdin" if args.file == "-" else os.path.basename(args.file))
    store = js.object_store(args.bucket)
    if args.file == "-":
        info = store.put(name, sys.stdin.buffer)
    else:
        with open(args.file, "rb") as f:
            info = store.put(name, f)
    if args.json:
        print_json(info, out)
    else:
        out.write(f"stored {info.name} in {args.bucket}: {human_size(info.size)} in {info.chunks} chunk(s)\n")
    return 0


def _obj_get(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    """Read object NAME into -O FILE (``-``: stdout; default: a file named after it in the current directory,
    which must not exist yet unless -f); blocks until every chunk was read and the digest checked."""
    store = js.object_store(args.bucket)
    dest = args.output or os.path.basename(args.name.rstrip("/")) or args.name
    if dest == "-":
        out.flush()
        info = store.get(args.name, writeinto=sys.stdout.buffer).info
        sys.stdout.buffer.flush()
        return 0
    if args.output is None and not args.force and os.path.exists(dest):
        sys.stderr.write(f"jssync: {dest} exists: give -O FILE, or -f to overwrite it\n")
        return 1
    store.get_info(args.name)  # ObjectNotFoundError before a file is made
    try:
        with open(dest, "wb") as f:
            info = store.get(args.name, writeinto=f).info
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(dest)
        raise
    if args.json:
        print_json({"name": info.name, "bucket": args.bucket, "size": info.size, "file": dest}, out)
    else:
        out.write(f"wrote {human_size(info.size)} of {info.name} to {dest}\n")
    return 0


def _obj_ls(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    infos = sorted(js.object_store(args.bucket).list(), key=lambda i: i.name)
    if args.json:
        print_json(infos, out)
        return 0
    if not infos:
        out.write(f"no objects in {args.bucket}\n")
        return 0
    table([[i.name, human_size(i.size), i.chunks, _obj_time(i.mtime)] for i in infos],
           ["NAME", "SIZE", "CHUNKS", "TIME"], out)
    return 0


def _obj_time(mtime: Any) -> str:
    """An object's RFC 3339 modification time, in local time to the second (as given when unreadable)."""
    from ..base.times import server_time_or_none

    if not mtime:
        return "-"
    text = str(mtime)
    when = server_time_or_none(text)
    if when is None:
        return text
    return when.astimezone().isoformat(timespec="seconds")


def _obj_info(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    info = js.object_store(args.bucket).get_info(args.name)
    if args.json:
        print_json(info, out)
        return 0
    rows = [["name", info.name], ["bucket", info.bucket or args.bucket],
            ["size", f"{human_size(info.size)} ({info.size:,} bytes)"], ["chunks", info.chunks],
            ["modified", _obj_time(info.mtime)], ["digest", info.digest or "-"], ["id", info.nuid or "-"]]
    if info.description:
        rows.insert(2, ["description", info.description])
    for k, v in sorted((info.headers or {}).items()):
        rows.append([f"header {k}", ", ".join(v) if isinstance(v, list) else v])
    link = getattr(info.options, "link", None) if info.options else None
    if link is not None:
        rows.append(["link", f"{link.bucket}/{link.name or ''}"])
    table(rows, ["FIELD", "VALUE"], out)
    return 0


def _obj_rm(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    store = js.object_store(args.bucket)
    store.get_info(args.name)  # ObjectNotFoundError before any question
    if not confirmed(args, f"object {args.name} of {args.bucket}"):
        return 1
    store.delete(args.name)
    if args.json:
        print_json({"deleted": args.name, "bucket": args.bucket}, out)
    else:
        out.write(f"deleted object {args.name} of {args.bucket}\n")
    return 0


def _obj_watch(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    """Print the objects of a store, then each change, until --count changes were printed or Ctrl-C."""
    n = 0
    with js.object_store(args.bucket).watch() as w:
        try:
            for info in w:
                if info is None:
                    continue
                n += 1
                if args.json:
                    print_record(jsonable(info), out)
                else:
                    op = "DEL" if info.deleted else "PUT"
                    out.write(f"[{_obj_time(info.mtime)}] {op} {args.bucket} > {info.name}: "
                              f"{human_size(info.size)}\n")
                    out.flush()
                if args.count and n >= args.count:
                    break
        except KeyboardInterrupt:
            pass
    return 0


def register(sub: Any) -> None:
    """Add this group's commands to the top-level sub-parsers ``sub``."""
    ob = add_command(sub, "obj", help="object stores").add_subparsers(dest="obj_cmd", required=True)
    x = add_command(ob, "add", help="create an object store")
    x.add_argument("bucket")
    x.add_argument("--storage", choices=["file", "memory"], default="file")
    x.add_argument("--max-bytes", type=parse_size, metavar="SIZE", help="the store's size limit, e.g. 1GiB")
    x.add_argument("--description")
    x.set_defaults(func=with_js(_obj_add))
    x = add_command(ob, "put", help="store a file as an object")
    x.add_argument("bucket")
    x.add_argument("file", help="the file to store, - for stdin")
    x.add_argument("--name", help="the object's name (default: the file's name)")
    x.set_defaults(func=with_js(_obj_put))
    x = add_command(ob, "get", help="read an object into a file")
    x.add_argument("bucket")
    x.add_argument("name")
    x.add_argument("-O", "--output", metavar="FILE",
                   help="write it here, - for stdout (default: a file named after it in the current directory)")
    x.add_argument("-f", "--force", action="store_true", help="overwrite the default file when it exists")
    x.set_defaults(func=with_js(_obj_get))
    x = add_command(ob, "ls", help="list the objects of a store")
    x.add_argument("bucket")
    x.set_defaults(func=with_js(_obj_ls))
    x = add_command(ob, "info", help="show an object")
    x.add_argument("bucket")
    x.add_argument("name")
    x.set_defaults(func=with_js(_obj_info))
    x = add_command(ob, "rm", help="delete an object (asks first on a terminal, unless -f)")
    x.add_argument("bucket")
    x.add_argument("name")
    add_force(x)
    x.set_defaults(func=with_js(_obj_rm))
    x = add_command(ob, "watch", help="print the objects of a store, then each change")
    x.add_argument("bucket")
    x.add_argument("--count", type=int, default=0, help="stop after N objects/changes")
    x.set_defaults(func=with_js(_obj_watch))

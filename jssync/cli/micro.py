"""``jssync micro ...``: find and watch micro services (ADR-32)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from .common import add_command, parse_duration, print_json, table, with_js

# -- micro services (ADR-32) ------------------------------------------------------------------


def _micro_docs(nc: Any, verb: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every service instance's answer to ``$SRV.<VERB>[.NAME[.ID]]``, sorted by name and id."""
    import jssync
    from jssync import micro

    name = getattr(args, "service", None)
    sid = getattr(args, "id", None)
    if name is not None:
        micro._check_name(name, "service name")
    if sid is not None:
        micro._check_name(sid, "service id")
    docs = []
    try:
        for msg in nc.request_many(micro.control_subject(verb, name, sid), max_wait=args.wait,
                                   stall=min(0.5, args.wait / 2)):
            try:
                doc = json.loads(msg.data)
            except ValueError:
                continue  # not a service's answer
            if isinstance(doc, dict) and isinstance(doc.get("name"), str):
                docs.append(doc)
    except jssync.NoRespondersError:
        pass  # no service listens
    docs.sort(key=lambda d: (str(d.get("name")), str(d.get("id"))))
    return docs


def _no_service(args: argparse.Namespace) -> int:
    which = f"{args.service}" + (f" with id {args.id}" if args.id else "")
    sys.stderr.write(f"jssync: no service {which} answered within {args.wait}s\n")
    return 1


def _micro_ls(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    docs = _micro_docs(nc, "INFO", args)
    if args.json:
        print_json(docs, out)
        return 0
    if not docs:
        out.write("no services found\n")
        return 0
    table([[d.get("name"), d.get("version"), d.get("id"), len(d.get("endpoints") or []),
             d.get("description") or ""] for d in docs],
           ["NAME", "VERSION", "ID", "ENDPOINTS", "DESCRIPTION"], out)
    return 0


def _micro_info(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    docs = _micro_docs(nc, "INFO", args)
    if args.json:
        print_json(docs, out)
    else:
        for i, d in enumerate(docs):
            if i:
                out.write("\n")
            meta = d.get("metadata") or {}
            table([["name", d.get("name")], ["id", d.get("id")], ["version", d.get("version")],
                    ["description", d.get("description") or ""],
                    ["metadata", ", ".join(f"{k}={v}" for k, v in sorted(meta.items()))]], ["FIELD", "VALUE"], out)
            out.write("\n")
            table([[e.get("name"), e.get("subject"), e.get("queue_group") or "-",
                     ", ".join(f"{k}={v}" for k, v in sorted((e.get("metadata") or {}).items()))]
                    for e in d.get("endpoints") or []], ["ENDPOINT", "SUBJECT", "QUEUE_GROUP", "METADATA"], out)
    return 0 if docs else _no_service(args)


def _ns(v: Any) -> str:
    """Integer nanoseconds for people."""
    if not isinstance(v, int | float) or isinstance(v, bool):
        return "-"
    if v < 1_000:
        return f"{v:.0f}ns"
    if v < 1_000_000:
        return f"{v / 1e3:.1f}us"
    if v < 1_000_000_000:
        return f"{v / 1e6:.1f}ms"
    return f"{v / 1e9:.2f}s"


def _micro_stats(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    docs = _micro_docs(nc, "STATS", args)
    if args.json:
        print_json(docs, out)
    elif docs:
        table([[d.get("name"), d.get("id"), e.get("name"), e.get("num_requests"), e.get("num_errors"),
                 _ns(e.get("processing_time")), _ns(e.get("average_processing_time")), e.get("last_error") or "-"]
                for d in docs for e in d.get("endpoints") or []],
               ["SERVICE", "ID", "ENDPOINT", "REQUESTS", "ERRORS", "PROCESSING", "AVERAGE", "LAST_ERROR"], out)
    return 0 if docs else _no_service(args)


def register(sub: Any) -> None:
    """Add this group's commands to the top-level sub-parsers ``sub``."""
    mi = add_command(sub, "micro", help="find and watch micro services (ADR-32)").add_subparsers(dest="micro_cmd",
                                                                                          required=True)
    for name, hlp, fn, need in (("ls", "list the running services (each instance)", _micro_ls, False),
                                ("info", "show a service's instances and endpoints", _micro_info, True),
                                ("stats", "show a service's request counts and times per endpoint", _micro_stats,
                                 True)):
        x = add_command(mi, name, help=hlp)
        if need:
            x.add_argument("service")
            x.add_argument("id", nargs="?", help="only this instance")
        else:
            x.add_argument("service", nargs="?", help="only instances of this service")
        x.add_argument("--wait", type=parse_duration, default=2.0, metavar="DURATION",
                       help="how long to wait for services to answer (default 2s; it ends sooner "
                            "once answers stop coming)")
        x.set_defaults(func=with_js(fn), _spill=(("id", str),) if need else (("service", str),))

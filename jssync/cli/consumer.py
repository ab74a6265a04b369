"""``jssync consumer ...``: list, show, add, edit, remove, next, unpin."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, TextIO

from ..base.errors import ValidationError
from .common import (
    add_command,
    add_force,
    confirmed,
    duration_or_zero,
    human_duration,
    jsonable,
    limit_text,
    msg_record,
    parse_duration,
    parse_limit,
    print_json,
    print_record,
    table,
    with_js,
)

# -- consumer ----------------------------------------------------------------------------------


def _consumer_json(info: Any) -> dict[str, Any]:
    """A consumer info as JSON, with the ADR-42 fields nats-py's dataclasses lack."""
    doc: dict[str, Any] = jsonable(info)
    cfg = doc.get("config")
    if isinstance(cfg, dict):
        from ..jetstream.model import CONSUMER_FIELDS, field_names

        for key in ("priority_policy", "priority_groups", "priority_timeout", *field_names(CONSUMER_FIELDS)):
            value = getattr(info.config, key, None)
            if value is not None:
                cfg[key] = value
    if getattr(info, "priority_groups", None):
        doc["priority_groups"] = info.priority_groups
    return doc


def _consumer_ls(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    infos = list(js.consumers(args.stream))
    if args.json:
        print_json([_consumer_json(i) for i in infos], out)
        return 0
    rows = [[i.name, getattr(i.config.ack_policy, "value", i.config.ack_policy),
             i.config.filter_subject or ",".join(i.config.filter_subjects or []), i.num_pending,
             i.num_ack_pending, i.num_redelivered] for i in infos]
    table(rows, ["NAME", "ACK", "FILTER", "PENDING", "ACK_PENDING", "REDELIVERED"], out)
    return 0


def _consumer_info(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    info = js.consumer(args.stream, args.name).info()
    if args.json:
        print_json(_consumer_json(info), out)
        return 0
    rows = [["name", info.name], ["stream", info.stream_name],
            ["ack_policy", getattr(info.config.ack_policy, "value", info.config.ack_policy)],
            ["deliver_policy", getattr(info.config.deliver_policy, "value", info.config.deliver_policy)],
            ["filter", info.config.filter_subject or ",".join(info.config.filter_subjects or [])],
            ["delivered", f"consumer {info.delivered.consumer_seq} / stream {info.delivered.stream_seq}"],
            ["ack_floor", f"consumer {info.ack_floor.consumer_seq} / stream {info.ack_floor.stream_seq}"],
            ["ack_wait", human_duration(info.config.ack_wait, zero="-")],
            ["max_deliver", limit_text(info.config.max_deliver)],
            ["max_ack_pending", limit_text(info.config.max_ack_pending)],
            ["num_pending", f"{info.num_pending:,}"], ["num_ack_pending", info.num_ack_pending],
            ["num_redelivered", info.num_redelivered]]
    from ..jetstream.model import CONSUMER_FIELDS

    for field in CONSUMER_FIELDS:
        value = getattr(info.config, field.name, None)
        if value is not None:
            rows.append([field.name, human_duration(value) if field.duration else value])
    policy = getattr(info.config, "priority_policy", None)
    if policy:
        rows.append(["priority_policy", policy])
        rows.append(["priority_groups", ",".join(getattr(info.config, "priority_groups", None) or [])])
        if getattr(info.config, "priority_timeout", None):
            rows.append(["priority_timeout", human_duration(info.config.priority_timeout)])
        for st in getattr(info, "priority_groups", None) or []:
            if isinstance(st, dict) and st.get("pinned_client_id"):
                rows.append([f"pinned ({st.get('group')})", f"{st['pinned_client_id']} since {st.get('pinned_ts')}"])
    table(rows, ["FIELD", "VALUE"], out)
    return 0


def _server_field_flags(x: argparse.ArgumentParser) -> None:
    """The flags of the consumer fields jssync models beside nats-py (one per row of model.CONSUMER_FIELDS)."""
    from ..jetstream.model import CONSUMER_FIELDS

    for field in CONSUMER_FIELDS:
        kind: Callable[[str], Any] = duration_or_zero if field.duration else field.kind
        x.add_argument("--" + field.name.replace("_", "-"), type=kind, dest=field.name,
                       metavar="DURATION" if field.duration else field.kind.__name__.upper(), help=field.help)


def _server_field_values(args: argparse.Namespace) -> dict[str, Any]:
    """The values of :func:`_server_field_flags`'s flags given on the command line."""
    from ..jetstream.model import CONSUMER_FIELDS

    return {f.name: getattr(args, f.name) for f in CONSUMER_FIELDS if getattr(args, f.name, None) is not None}


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
    params.update(_server_field_values(args))
    given = [(pol, groups) for pol, groups in (("pinned_client", args.pinned_groups),
                                               ("overflow", args.overflow_groups),
                                               ("prioritized", args.prioritized_groups)) if groups]
    if len(given) > 1:
        raise ValidationError("give one of --pinned-groups, --overflow-groups, --prioritized-groups")
    if args.pinned_ttl is not None and not args.pinned_groups:
        raise ValidationError("--pinned-ttl goes with --pinned-groups")
    if given:
        params["priority_policy"] = given[0][0]
        params["priority_groups"] = given[0][1].split(",")
        if args.pinned_ttl is not None:
            params["priority_timeout"] = args.pinned_ttl
    c = js.create_consumer(args.stream, **params)
    if args.json:
        print_json(_consumer_json(c.cached_info), out)
    else:
        out.write(f"created consumer {args.stream}/{c.name}\n")
    return 0


def _consumer_edit(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    import copy

    changes: dict[str, Any] = {}
    for field in ("description", "ack_wait", "max_deliver", "max_ack_pending", "max_waiting", "inactive_threshold"):
        value = getattr(args, field)
        if value is not None:
            changes[field] = value
    changes.update(_server_field_values(args))
    if args.filter:
        fs = [x.strip() for x in args.filter.split(",") if x.strip()]
        if len(fs) == 1:
            changes.update(filter_subject=fs[0], filter_subjects=None)
        else:
            changes.update(filter_subject=None, filter_subjects=fs)
    if not changes:
        raise ValidationError(f"consumer edit {args.stream} {args.name}: nothing to change: give --filter or a "
                              "setting (see jssync consumer edit --help)")
    info = js.consumer(args.stream, args.name).info()
    cfg = copy.copy(info.config)  # keeps every field not given, the priority group ones too
    for field, value in changes.items():
        setattr(cfg, field, value)
    c = js.update_consumer(args.stream, cfg)
    if args.json:
        print_json(_consumer_json(c.cached_info), out)
    else:
        out.write(f"updated consumer {args.stream}/{c.name}: "
                  f"{', '.join(sorted(k for k, v in changes.items() if v is not None))}\n")
    return 0


def _consumer_unpin(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    js.consumer(args.stream, args.name).unpin(args.group)
    if args.json:
        print_json({"unpinned": f"{args.stream}/{args.name}", "group": args.group}, out)
    else:
        out.write(f"unpinned group {args.group} of consumer {args.stream}/{args.name}\n")
    return 0


def _consumer_rm(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    js.consumer(args.stream, args.name)  # ConsumerNotFoundError before any question
    if not confirmed(args, f"consumer {args.stream}/{args.name}"):
        return 1
    js.delete_consumer(args.stream, args.name)
    if args.json:
        print_json({"deleted": f"{args.stream}/{args.name}"}, out)
    else:
        out.write(f"deleted consumer {args.stream}/{args.name}\n")
    return 0


def _consumer_next(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    c = js.consumer(args.stream, args.name)
    got = 0
    res = c.fetch(args.count, expires=args.wait, group=args.group, min_pending=args.min_pending,
                  min_ack_pending=args.min_ack_pending, priority=args.priority)
    for msg in res:
        got += 1
        if not args.no_ack:
            msg.ack_sync()
        md = msg.metadata
        if args.json:
            print_record(msg_record(msg.subject, msg.data, msg.headers, stream=md.stream,
                                      stream_seq=md.sequence.stream, consumer_seq=md.sequence.consumer,
                                      num_delivered=md.num_delivered, num_pending=md.num_pending), out)
        else:
            out.write(f"[{md.sequence.stream}] {msg.subject}: {msg.data.decode(errors='replace')}\n")
    if res.error is not None:  # e.g. 409 Exceeded MaxRequestBatch: say why it ended early
        sys.stderr.write(f"jssync: the pull ended early: {res.error}\n")
    if not got:
        sys.stderr.write("jssync: no messages\n")
        return 1
    return 0


def register(sub: Any) -> None:
    """Add this group's commands to the top-level sub-parsers ``sub``."""
    co = add_command(sub, "consumer", help="manage consumers").add_subparsers(dest="consumer_cmd", required=True)
    x = add_command(co, "ls", help="list consumers of a stream")
    x.add_argument("stream")
    x.set_defaults(func=with_js(_consumer_ls))
    x = add_command(co, "info", help="show a consumer")
    x.add_argument("stream")
    x.add_argument("name")
    x.set_defaults(func=with_js(_consumer_info))
    x = add_command(co, "add", help="create a durable pull consumer")
    x.add_argument("stream")
    x.add_argument("name")
    x.add_argument("--filter", help="comma-separated filter subjects")
    x.add_argument("--ack", choices=["explicit", "all", "none"], default="explicit")
    x.add_argument("--deliver", choices=["all", "last", "new", "last_per_subject"], default="all")
    x.add_argument("--max-deliver", type=int)
    x.add_argument("--pinned-groups", metavar="GROUPS",
                   help="priority groups (comma-separated) of a pinned_client consumer (ADR-42)")
    x.add_argument("--pinned-ttl", type=parse_duration, metavar="DURATION",
                   help="how long the pinned client may go without pulling before another is pinned")
    x.add_argument("--overflow-groups", metavar="GROUPS", help="priority groups of an overflow consumer")
    x.add_argument("--prioritized-groups", metavar="GROUPS", help="priority groups of a prioritized consumer")
    _server_field_flags(x)
    x.set_defaults(func=with_js(_consumer_add))
    x = add_command(co, "edit", help="change the settings of a consumer",
             description="Change settings of an existing consumer; what is not given stays as it is "
                         "(like nats consumer edit).")
    x.add_argument("stream")
    x.add_argument("name")
    x.add_argument("--filter", help="comma-separated filter subjects: the new list")
    x.add_argument("--ack-wait", type=parse_duration, metavar="DURATION", help="redeliver when no ack came this long")
    x.add_argument("--max-deliver", type=parse_limit, metavar="N", help="deliveries per message (-1: unlimited)")
    x.add_argument("--max-ack-pending", type=parse_limit, metavar="N",
                   help="messages delivered and not yet acked (-1: unlimited)")
    x.add_argument("--max-waiting", type=int, metavar="N", help="pull requests that may wait")
    x.add_argument("--inactive-threshold", type=parse_duration, metavar="DURATION",
                   help="remove the consumer when unused this long")
    x.add_argument("--description")
    _server_field_flags(x)
    x.set_defaults(func=with_js(_consumer_edit))
    x = add_command(co, "rm", help="delete a consumer (asks first on a terminal, unless -f)")
    x.add_argument("stream")
    x.add_argument("name")
    add_force(x)
    x.set_defaults(func=with_js(_consumer_rm))
    x = add_command(co, "next", help="fetch (and ack) messages from a pull consumer")
    x.add_argument("stream")
    x.add_argument("name")
    x.add_argument("--count", type=int, default=1)
    x.add_argument("--wait", type=parse_duration, metavar="DURATION", default=5.0,
                   help="how long to wait for messages (seconds or e.g. 500ms, 5s)")
    x.add_argument("--no-ack", action="store_true")
    x.add_argument("--group", help="the priority group to pull from (consumers with priority groups)")
    x.add_argument("--min-pending", type=int, help="overflow: only when this many messages are pending")
    x.add_argument("--min-ack-pending", type=int,
                   help="overflow: only when this many messages are waiting for an ack")
    x.add_argument("--priority", type=int, help="prioritized: 0 (first) to 9")
    x.set_defaults(func=with_js(_consumer_next))
    x = add_command(co, "unpin", help="unpin the pinned client of a priority group")
    x.add_argument("stream")
    x.add_argument("name")
    x.add_argument("group")
    x.set_defaults(func=with_js(_consumer_unpin))

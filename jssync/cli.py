"""The ``jssync`` command line (also ``python -m jssync``).

Everyday jobs against a NATS server: streams, consumers, publish/subscribe/request, key-value,
a local server, and the demo. Tables for people, ``--json`` for scripts. Options, environment
variables and context files follow the ``nats`` CLI (docs/cli.md).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import functools
import json
import logging
import os
import signal
import sys
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, BinaryIO, TextIO

from .base.errors import ValidationError, _ConfigError, _Stop
from .base.validate import positive_int

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
        rec: dict[str, Any] = {}
        _put_payload(rec, "data", obj)
        return rec if "data_encoding" in rec else rec["data"]
    return obj


def _print_json(obj: Any, out: TextIO) -> None:
    """One result: one JSON document (indented)."""
    out.write(json.dumps(_jsonable(obj), indent=2, sort_keys=True, default=str) + "\n")


def _print_record(rec: dict[str, Any], out: TextIO) -> None:
    """A message or an entry: one compact JSON object on one line (JSON Lines)."""
    out.write(json.dumps(rec, default=str) + "\n")
    out.flush()


def _put_payload(rec: dict[str, Any], field: str, data: bytes) -> None:
    """``rec[field]`` = the payload as text when it is UTF-8, else base64 with ``FIELD_encoding: base64``."""
    try:
        rec[field] = data.decode("utf-8")
    except UnicodeDecodeError:
        rec[field] = base64.b64encode(data).decode("ascii")
        rec[f"{field}_encoding"] = "base64"


def _get_payload(rec: dict[str, Any], field: str) -> bytes:
    """The payload of a record written by :func:`_put_payload` (text, or base64 when marked)."""
    value = rec.get(field)
    if value is None:
        return b""
    if not isinstance(value, str):
        raise ValidationError(f"{field!r} must be a string, got {type(value).__name__}")
    enc = rec.get(f"{field}_encoding")
    if enc is None:
        return value.encode("utf-8")
    if enc != "base64":
        raise ValidationError(f"unknown {field}_encoding {enc!r} (only 'base64')")
    try:
        return base64.b64decode(value, validate=True)
    except ValueError as exc:
        raise ValidationError(f"{field!r} is marked base64 but is not: {exc}") from None


def _msg_record(subject: str, data: bytes, headers: dict[str, str] | None, **extra: Any) -> dict[str, Any]:
    """The one JSON shape of a message: subject, extra fields, data (+ data_encoding), headers."""
    rec: dict[str, Any] = {"subject": subject, **extra}
    _put_payload(rec, "data", data)
    rec["headers"] = headers or None
    return rec


def _entry_record(e: Any) -> dict[str, Any]:
    """The one JSON shape of a key-value entry."""
    rec: dict[str, Any] = {"bucket": e.bucket, "key": e.key, "revision": e.revision,
                           "operation": getattr(e.operation, "value", e.operation) or "PUT",
                           "created": e.created.isoformat() if e.created else None}
    _put_payload(rec, "value", e.value or b"")
    return rec


def _colour(out: TextIO) -> bool:
    """Colours only on a terminal (never into a pipe or a file), and not when $NO_COLOR is set."""
    isatty = getattr(out, "isatty", None)
    return bool(isatty and isatty()) and not os.environ.get("NO_COLOR")


def _table(rows: list[list[Any]], headers: list[str], out: TextIO) -> None:
    cells = [[str(c) for c in r] for r in rows]
    widths = [len(h) for h in headers]
    for r in cells:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(c))
    line = "  ".join(h.ljust(widths[i]) for i, h in enumerate(headers)).rstrip()
    out.write((f"\x1b[1m{line}\x1b[0m" if _colour(out) else line) + "\n")
    out.write("  ".join("-" * w for w in widths) + "\n")
    for r in cells:
        out.write("  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() + "\n")


def _human_size(n: Any) -> str:
    """Bytes for people, as the nats CLI shows them: ``512 B``, ``4.9 KiB``, ``1.0 MiB``; -1: unlimited."""
    if not isinstance(n, int | float) or isinstance(n, bool):
        return "-"
    if n < 0:
        return "unlimited"
    if n < 1024:
        return f"{n:.0f} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        value /= 1024
        if value < 1024 or unit == "PiB":
            break
    return f"{value:.1f} {unit}"


def _human_duration(secs: Any, zero: str = "unlimited") -> str:
    """Seconds as Go prints a duration (``1h30m0s``, ``30s``, ``1.5s``, ``500ms``); 0 (or less): ``zero``."""
    if not isinstance(secs, int | float) or isinstance(secs, bool):
        return "-"
    if secs <= 0:
        return zero
    ns = round(secs * 1e9)
    if ns < 1_000_000_000:
        for unit, size in (("ms", 1_000_000), ("\u00b5s", 1_000), ("ns", 1)):
            if ns >= size:
                return f"{ns / size:g}{unit}"
    h, rest = divmod(ns, 3_600_000_000_000)
    m, rest = divmod(rest, 60_000_000_000)
    sec = f"{rest / 1e9:.9f}".rstrip("0").rstrip(".") + "s"
    if h:
        return f"{h}h{m}m{sec}"
    if m:
        return f"{m}m{sec}"
    return sec


def _limit_text(n: Any) -> str:
    """A count limit for people: -1 (or None) is ``unlimited``."""
    return "unlimited" if n is None or (isinstance(n, int) and n < 0) else str(n)


def _value(v: Any) -> str:
    """An enum's value, or the value itself, as text."""
    return str(getattr(v, "value", v))


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


# -- settings: flag > environment > context (the nats CLI's) ----------------------------------------

#: setting -> (environment variable, key in a nats CLI context file)
_SOURCES: dict[str, tuple[str | None, str | None]] = {
    "server": ("NATS_URL", "url"),
    "user": ("NATS_USER", "user"),
    "password": ("NATS_PASSWORD", "password"),
    "token": (None, "token"),
    "creds": ("NATS_CREDS", "creds"),
    "nkey": ("NATS_NKEY", "nkey"),
    "tlscert": ("NATS_CERT", "cert"),
    "tlskey": ("NATS_KEY", "key"),
    "tlsca": ("NATS_CA", "ca"),
    "timeout": ("NATS_TIMEOUT", None),
}
_FILE_SETTINGS = ("creds", "nkey", "tlscert", "tlskey", "tlsca")
_DEFAULT_SERVER = "nats://127.0.0.1:4222"
def _duration(text: str) -> float:
    """Seconds (> 0) from ``2.5`` or a Go duration as the nats CLI takes it (``500ms``, ``5s``, ``1m30s``)."""
    secs = _duration_or_zero(text)
    if secs <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive duration")
    return secs


def _duration_or_zero(text: str) -> float:
    """Seconds (>= 0; 0 often means no limit) from a number or a Go duration (``1h``, ``90m``)."""
    from .base.durations import seconds

    try:
        return seconds(str(text), "duration")
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration >= 0 (seconds, or e.g. 500ms, 5s, "
                                         "1h30m)") from None



def _ttl(text: str) -> float | str:
    """A message TTL: ``never``, or a duration (checked to be >= 1s by the publish)."""
    return "never" if str(text).strip().lower() == "never" else _duration(text)


_SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1024, "kib": 1024, "m": 1024**2, "mb": 1024**2, "mib": 1024**2,
               "g": 1024**3, "gb": 1024**3, "gib": 1024**3, "t": 1024**4, "tb": 1024**4, "tib": 1024**4}


def _limit(text: str) -> int:
    """A count limit: a whole number >= 0, or ``-1``/``unlimited`` (-1: no limit, as the server takes it)."""
    t = str(text).strip().lower()
    if t in ("-1", "unlimited", "none"):
        return -1
    try:
        n = int(t)
    except ValueError:
        n = -2
    if n < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count (a whole number >= 0, or -1/unlimited)")
    return n


def _size(text: str) -> int:
    """A size in bytes: ``1048576``, ``512KiB``, ``1MB``, ``2G`` (K/M/G/T are powers of 1024, as the nats CLI
    takes them), or ``-1``/``unlimited``."""
    import re

    t = str(text).strip().lower()
    if t in ("-1", "unlimited", "none"):
        return -1
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([a-z]*)", t)
    if m is None or m.group(2) not in _SIZE_UNITS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (bytes, or e.g. 512KiB, 1MB, 2GiB; -1: unlimited)")
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2)])


def _config_home() -> Path:
    """Where the nats CLI keeps its configuration: $XDG_CONFIG_HOME, else ~/.config."""
    xdg = os.environ.get("XDG_CONFIG_HOME")
    return Path(xdg) if xdg else Path(os.path.expanduser("~")) / ".config"


def _load_context(name: str | None) -> dict[str, Any]:
    """The settings of nats CLI context ``name`` (None: the selected one, if any)."""
    root = _config_home() / "nats"
    if name is None:
        try:
            name = (root / "context.txt").read_text().strip()
        except OSError:
            return {}
        if not name:
            return {}
        how = f"selected in {root / 'context.txt'}"
    else:
        how = "given with --context or NATS_CONTEXT"
    if not name or "/" in name or "\\" in name or name.startswith("."):
        raise _ConfigError(f"bad context name {name!r} ({how})")
    path = root / "context" / f"{name}.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise _ConfigError(f"no context {name!r} ({how}): {path} does not exist") from None
    except (OSError, ValueError) as exc:
        raise _ConfigError(f"cannot read context {name!r} from {path}: {exc}") from None
    if not isinstance(data, dict):
        raise _ConfigError(f"context {name!r} in {path} is not a JSON object")
    if data.get("nsc") and not data.get("creds"):
        raise _ConfigError(f"context {name!r} looks its credentials up with nsc, which jssync cannot: "
                           "set \"creds\" to the .creds file")
    return data


def _context_value(ctx: dict[str, Any], key: str, setting: str) -> str | None:
    v = ctx.get(key)
    if v in (None, ""):
        return None
    v = str(v)
    if setting in _FILE_SETTINGS:
        if v.startswith("file://"):
            v = v[len("file://"):]
        elif "://" in v:
            raise _ConfigError(f"the context's {key!r} is {v.split('://')[0]}://..., jssync reads only files")
        v = os.path.expanduser(v)
    return v


#: the options every command takes, before or after its name: (flags, argparse keywords)
_GLOBAL_OPTIONS: list[tuple[tuple[str, ...], dict[str, Any]]] = [
    (("-s", "--server"), {"metavar": "URL", "help": "server URL(s), comma-separated "
                                                     f"(default: $NATS_URL, the context's, or {_DEFAULT_SERVER})"}),
    (("--user",), {"help": "user name ($NATS_USER)"}),
    (("--password",), {"help": "password ($NATS_PASSWORD)"}),
    (("--token",), {"help": "authentication token"}),
    (("--creds",), {"metavar": "FILE", "help": "user credentials (.creds) file ($NATS_CREDS)"}),
    (("--nkey",), {"metavar": "FILE", "help": "user nkey seed file ($NATS_NKEY)"}),
    (("--tlscert",), {"metavar": "FILE", "help": "TLS client certificate ($NATS_CERT)"}),
    (("--tlskey",), {"metavar": "FILE", "help": "TLS client private key ($NATS_KEY)"}),
    (("--tlsca",), {"metavar": "FILE", "help": "TLS certificate authority chain ($NATS_CA)"}),
    (("--context",), {"metavar": "NAME", "help": "nats CLI context to use ($NATS_CONTEXT; default: the "
                                                 "selected one)"}),
    (("--timeout",), {"type": _duration, "metavar": "DURATION",
                      "help": "timeout of each operation: seconds or e.g. 500ms, 5s ($NATS_TIMEOUT; default 5s)"}),
    (("--connect-timeout",), {"type": _duration, "metavar": "DURATION",
                              "help": "timeout of the first connect (default 2s)"}),
    (("--json",), {"action": "store_true", "help": "machine-readable JSON output"}),
    (("--progress",), {"action": "store_true", "help": "always draw progress bars on stderr"}),
    (("-v", "--verbose"), {"action": "store_true", "help": "log debug output"}),
]


def _add_global_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("global options (before or after the command)")
    for flags, kw in _GLOBAL_OPTIONS:
        action = g.add_argument(*flags, default=argparse.SUPPRESS, **kw)
        _GLOBAL_ACTIONS.add(action)


#: the argparse actions of the global options (left out of the usage lines); weak, and by
#: object rather than id(): the id of a dropped parser's action can come back as the id of
#: another command's own option when main() runs again in the same process
_GLOBAL_ACTIONS: weakref.WeakSet[argparse.Action] = weakref.WeakSet()


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage line shows the command's own options, not the global ones
    (``--help`` still lists them, in their own group)."""

    def _own_actions(self) -> list[argparse.Action]:
        return [a for a in self._actions if a not in _GLOBAL_ACTIONS]

    def format_usage(self) -> str:
        formatter = self._get_formatter()
        formatter.add_usage(self.usage, self._own_actions(), self._mutually_exclusive_groups)
        return formatter.format_help()

    def format_help(self) -> str:
        formatter = self._get_formatter()
        formatter.add_usage(self.usage, self._own_actions(), self._mutually_exclusive_groups)
        formatter.add_text(self.description)
        for group in self._action_groups:
            formatter.start_section(group.title)
            formatter.add_text(group.description)
            formatter.add_arguments(group._group_actions)
            formatter.end_section()
        formatter.add_text(self.epilog)
        return formatter.format_help()


def _resolve(args: argparse.Namespace, connects: bool) -> None:
    """Fill in every global setting: the flag, else the environment, else the context, else the default."""
    for flag in ("json", "progress", "verbose"):
        setattr(args, flag, getattr(args, flag, False))
    if not hasattr(args, "connect_timeout"):
        args.connect_timeout = 2.0
    if not connects:
        return
    ctx_name = getattr(args, "context", None) or os.environ.get("NATS_CONTEXT") or None
    ctx = _load_context(ctx_name)
    for setting, (env, key) in _SOURCES.items():
        if hasattr(args, setting):
            continue
        value: str | None = (os.environ.get(env) or None) if env else None
        if value is not None and setting == "timeout":
            try:
                setattr(args, setting, _duration(value))
            except argparse.ArgumentTypeError as exc:
                raise _ConfigError(f"{env}: {exc}") from None
            continue
        if value is None and key is not None:
            value = _context_value(ctx, key, setting)
        setattr(args, setting, value)
    if args.timeout is None:
        args.timeout = 5.0
    if args.server is None:
        args.server = _DEFAULT_SERVER


def _tls(args: argparse.Namespace) -> Any:
    """An ``ssl.SSLContext`` from --tlscert/--tlskey/--tlsca (or theirs), or None."""
    if not (args.tlscert or args.tlskey or args.tlsca):
        return None
    import ssl

    if bool(args.tlscert) != bool(args.tlskey):
        raise _ConfigError("a TLS client certificate needs its key: give both --tlscert and --tlskey "
                           "(or NATS_CERT and NATS_KEY)")
    try:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=args.tlsca or None)
        if args.tlscert:
            ctx.load_cert_chain(args.tlscert, args.tlskey)
    except (OSError, ssl.SSLError) as exc:
        files = ", ".join(f"{k} {v}" for k, v in (("ca", args.tlsca), ("cert", args.tlscert),
                                                    ("key", args.tlskey)) if v)
        raise _ConfigError(f"cannot use the TLS files ({files}): {exc}") from None
    return ctx


def _connect(args: argparse.Namespace) -> Any:
    import jssync

    opts: dict[str, Any] = {"name": "jssync-cli", "timeout": args.connect_timeout}
    for k in ("user", "password", "token", "creds"):
        v = getattr(args, k, None)
        if v:
            opts[k] = v
    if args.nkey:
        opts["nkeys_seed"] = args.nkey
    tls = _tls(args)
    if tls is not None:
        opts["tls"] = tls
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
        ["name", c.name], ["subjects", ",".join(c.subjects or []) or "-"],
        ["storage", _value(c.storage)], ["retention", _value(c.retention)],
        ["replicas", c.num_replicas], ["max_msgs", _limit_text(c.max_msgs)],
        ["max_msgs_per_subject", _limit_text(c.max_msgs_per_subject)],
        ["max_bytes", _human_size(c.max_bytes if c.max_bytes is not None else -1)],
        ["max_msg_size", _human_size(c.max_msg_size if c.max_msg_size is not None else -1)],
        ["max_age", _human_duration(c.max_age)],
        ["duplicate_window", _human_duration(c.duplicate_window, zero="-")],
        ["discard", _value(c.discard)],
        ["messages", f"{s.messages:,}"], ["bytes", _human_size(s.bytes)],
        ["first_seq", s.first_seq], ["last_seq", s.last_seq], ["consumers", s.consumer_count],
    ]
    if c.description:
        rows.insert(1, ["description", c.description])
    _table(rows, ["FIELD", "VALUE"], out)
    if s.subjects:
        out.write("\n")
        _table(sorted([k, v] for k, v in s.subjects.items()), ["SUBJECT", "MESSAGES"], out)
    return 0


def _stream_add(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    params: dict[str, Any] = {"name": args.name, "subjects": [args.name], "storage": args.storage,
                              "retention": args.retention, **_stream_settings(args)}
    st = js.create_stream(**params)
    if args.json:
        _print_json(st.cached_info, out)
    else:
        out.write(f"created stream {st.name}\n")
    return 0


#: the stream settings ``stream add`` and ``stream edit`` both take: (flag, config field, type, help)
_STREAM_SETTINGS: list[tuple[str, str, Callable[[str], Any], str]] = [
    ("--max-msgs", "max_msgs", _limit, "keep at most this many messages (-1: unlimited)"),
    ("--max-bytes", "max_bytes", _size, "keep at most this many bytes, e.g. 1GiB (-1: unlimited)"),
    ("--max-age", "max_age", _duration_or_zero,
     "how long messages are kept: seconds or e.g. 1h, 90m, 1h30m (0: no limit)"),
    ("--max-msgs-per-subject", "max_msgs_per_subject", _limit,
     "keep at most this many messages per subject (-1: unlimited)"),
    ("--max-msg-size", "max_msg_size", _size, "refuse messages larger than this, e.g. 1MiB (-1: unlimited)"),
    ("--dupe-window", "duplicate_window", _duration_or_zero,
     "how long message ids are remembered to drop duplicates, e.g. 2m"),
    ("--description", "description", str, "a description of the stream"),
]


def _add_stream_settings(x: argparse.ArgumentParser) -> None:
    for flag, _field, kind, hlp in _STREAM_SETTINGS:
        metavars: dict[Callable[[str], Any], str] = {_duration_or_zero: "DURATION", _size: "SIZE", _limit: "N"}
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
        _print_json(st.cached_info, out)
    else:
        out.write(f"updated stream {st.name}: {', '.join(sorted(params))}\n")
    return 0


def _confirmed(args: argparse.Namespace, what: str) -> bool:
    """Whether to go on deleting ``what``: yes with ``-f/--force`` or when stdin is not a terminal (scripts);
    else the answer to a ``[y/N]`` question on stderr (blocks reading one line of stdin)."""
    if args.force or not sys.stdin.isatty():
        return True
    sys.stderr.write(f"Really delete {what}? [y/N] ")
    sys.stderr.flush()
    try:
        answer = sys.stdin.readline()
    except KeyboardInterrupt:
        answer = ""
    if answer.strip().lower() in ("y", "yes"):
        return True
    sys.stderr.write(f"jssync: {what} not deleted\n")
    return False


def _add_force(x: argparse.ArgumentParser) -> None:
    x.add_argument("-f", "--force", action="store_true",
                   help="delete without asking (without a terminal on stdin it never asks)")


def _stream_rm(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    js.stream(args.name)  # StreamNotFoundError before any question
    if not _confirmed(args, f"stream {args.name}"):
        return 1
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


def _stored_record(m: Any, stream: str) -> dict[str, Any]:
    return _msg_record(m.subject, m.data, m.headers, seq=m.seq, time=m.time.isoformat() if m.time else None,
                       stream=stream)


def _stream_get(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    st = js.stream(args.name)
    m = st.get_msg(args.seq) if args.seq is not None else st.get_msg(last_by_subject=args.last_by_subject)
    if args.json:
        _print_record(_stored_record(m, args.name), out)
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


def _printable(data: bytes) -> str | None:
    """``data`` as text when it is UTF-8 and printable (newlines and tabs allowed), else None."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if all(c.isprintable() or c in "\n\r\t" for c in text) else None


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
        _print_record(_msg_record(m.subject, m.data, m.headers, seq=md.sequence.stream,
                                  time=md.timestamp.isoformat(), stream=args.name), out)
        return
    when = md.timestamp.astimezone().isoformat(timespec="seconds")
    out.write(f"[{md.sequence.stream}] Subject: {m.subject} Received: {when}\n")
    for k, v in (m.headers or {}).items():
        out.write(f"  {k}: {v}\n")
    text = _printable(m.data)
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
        _delete_quietly(js, args.name, oc.name)
    if not shown:
        which = f" on {args.subject}" if args.subject else ""
        sys.stderr.write(f"jssync: no messages{which} in stream {args.name}\n")
    return 0


def _delete_quietly(js: Any, stream: str, consumer: str | None) -> None:
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
            _print_record(_stored_record(m, args.name), dest)
            n += 1
            prog.update()
    finally:
        prog.close()
        if dest is not sys.stdout:
            dest.close()
    if args.file != "-":
        if args.json:
            _print_json({"exported": n, "stream": args.name, "file": args.file}, out)
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
            records.append((i, subject, _get_payload(rec, "data"), rec.get("headers") or None, rec.get("stream")))
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
        _print_json({"imported": sent}, out)
    else:
        out.write(f"imported {sent} messages\n")
    return 0


# -- consumer ----------------------------------------------------------------------------------


def _consumer_json(info: Any) -> dict[str, Any]:
    """A consumer info as JSON, with the ADR-42 fields nats-py's dataclasses lack."""
    doc: dict[str, Any] = _jsonable(info)
    cfg = doc.get("config")
    if isinstance(cfg, dict):
        from .jetstream.model import CONSUMER_FIELDS, field_names

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
        _print_json([_consumer_json(i) for i in infos], out)
        return 0
    rows = [[i.name, getattr(i.config.ack_policy, "value", i.config.ack_policy),
             i.config.filter_subject or ",".join(i.config.filter_subjects or []), i.num_pending,
             i.num_ack_pending, i.num_redelivered] for i in infos]
    _table(rows, ["NAME", "ACK", "FILTER", "PENDING", "ACK_PENDING", "REDELIVERED"], out)
    return 0


def _consumer_info(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    info = js.consumer(args.stream, args.name).info()
    if args.json:
        _print_json(_consumer_json(info), out)
        return 0
    rows = [["name", info.name], ["stream", info.stream_name],
            ["ack_policy", getattr(info.config.ack_policy, "value", info.config.ack_policy)],
            ["deliver_policy", getattr(info.config.deliver_policy, "value", info.config.deliver_policy)],
            ["filter", info.config.filter_subject or ",".join(info.config.filter_subjects or [])],
            ["delivered", f"consumer {info.delivered.consumer_seq} / stream {info.delivered.stream_seq}"],
            ["ack_floor", f"consumer {info.ack_floor.consumer_seq} / stream {info.ack_floor.stream_seq}"],
            ["ack_wait", _human_duration(info.config.ack_wait, zero="-")],
            ["max_deliver", _limit_text(info.config.max_deliver)],
            ["max_ack_pending", _limit_text(info.config.max_ack_pending)],
            ["num_pending", f"{info.num_pending:,}"], ["num_ack_pending", info.num_ack_pending],
            ["num_redelivered", info.num_redelivered]]
    from .jetstream.model import CONSUMER_FIELDS

    for field in CONSUMER_FIELDS:
        value = getattr(info.config, field.name, None)
        if value is not None:
            rows.append([field.name, _human_duration(value) if field.duration else value])
    policy = getattr(info.config, "priority_policy", None)
    if policy:
        rows.append(["priority_policy", policy])
        rows.append(["priority_groups", ",".join(getattr(info.config, "priority_groups", None) or [])])
        if getattr(info.config, "priority_timeout", None):
            rows.append(["priority_timeout", _human_duration(info.config.priority_timeout)])
        for st in getattr(info, "priority_groups", None) or []:
            if isinstance(st, dict) and st.get("pinned_client_id"):
                rows.append([f"pinned ({st.get('group')})", f"{st['pinned_client_id']} since {st.get('pinned_ts')}"])
    _table(rows, ["FIELD", "VALUE"], out)
    return 0


def _server_field_flags(x: argparse.ArgumentParser) -> None:
    """The flags of the consumer fields jssync models beside nats-py (one per row of model.CONSUMER_FIELDS)."""
    from .jetstream.model import CONSUMER_FIELDS

    for field in CONSUMER_FIELDS:
        kind: Callable[[str], Any] = _duration_or_zero if field.duration else field.kind
        x.add_argument("--" + field.name.replace("_", "-"), type=kind, dest=field.name,
                       metavar="DURATION" if field.duration else field.kind.__name__.upper(), help=field.help)


def _server_field_values(args: argparse.Namespace) -> dict[str, Any]:
    """The values of :func:`_server_field_flags`'s flags given on the command line."""
    from .jetstream.model import CONSUMER_FIELDS

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
        _print_json(_consumer_json(c.cached_info), out)
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
        _print_json(_consumer_json(c.cached_info), out)
    else:
        out.write(f"updated consumer {args.stream}/{c.name}: "
                  f"{', '.join(sorted(k for k, v in changes.items() if v is not None))}\n")
    return 0


def _consumer_unpin(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    js.consumer(args.stream, args.name).unpin(args.group)
    if args.json:
        _print_json({"unpinned": f"{args.stream}/{args.name}", "group": args.group}, out)
    else:
        out.write(f"unpinned group {args.group} of consumer {args.stream}/{args.name}\n")
    return 0


def _consumer_rm(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    js.consumer(args.stream, args.name)  # ConsumerNotFoundError before any question
    if not _confirmed(args, f"consumer {args.stream}/{args.name}"):
        return 1
    js.delete_consumer(args.stream, args.name)
    if args.json:
        _print_json({"deleted": f"{args.stream}/{args.name}"}, out)
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
            _print_record(_msg_record(msg.subject, msg.data, msg.headers, stream=md.stream,
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
        _print_json({"published": stored, "failed": len(failed), "subject": args.subject,
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
    headers = _parse_headers(args.header)
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
    with _connect(args) as nc:
        prog = Progress(len(payloads), f"publish {args.subject}", True if args.progress else None)
        try:
            if args.js:
                js = nc.jetstream(timeout=args.timeout)
                if len(payloads) == 1:
                    ack = js.publish(args.subject, payloads[0], headers=headers, msg_id=args.msg_id, ttl=args.ttl)
                    prog.update()
                    if args.json:
                        _print_json(ack, sys.stdout)
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
            _print_json({"published": len(payloads), "subject": args.subject}, sys.stdout)
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
                    _print_record(_msg_record(msg.subject, msg.data, msg.headers, reply=msg.reply or None),
                                  sys.stdout)
                else:
                    _show_msg(n, msg, sys.stdout)
                sys.stdout.flush()
        except KeyboardInterrupt:
            pass
    return 0 if n else 1


def _req(args: argparse.Namespace) -> int:
    with _connect(args) as nc:
        msg = nc.request(args.subject, (args.data or "").encode(), headers=_parse_headers(args.header),
                         timeout=args.timeout)
        if args.json:
            _print_record(_msg_record(msg.subject, msg.data, msg.headers), sys.stdout)
        else:
            sys.stdout.write(msg.data.decode(errors="replace") + "\n")
    return 0


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
        _print_json(docs, out)
        return 0
    if not docs:
        out.write("no services found\n")
        return 0
    _table([[d.get("name"), d.get("version"), d.get("id"), len(d.get("endpoints") or []),
             d.get("description") or ""] for d in docs],
           ["NAME", "VERSION", "ID", "ENDPOINTS", "DESCRIPTION"], out)
    return 0


def _micro_info(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    docs = _micro_docs(nc, "INFO", args)
    if args.json:
        _print_json(docs, out)
    else:
        for i, d in enumerate(docs):
            if i:
                out.write("\n")
            meta = d.get("metadata") or {}
            _table([["name", d.get("name")], ["id", d.get("id")], ["version", d.get("version")],
                    ["description", d.get("description") or ""],
                    ["metadata", ", ".join(f"{k}={v}" for k, v in sorted(meta.items()))]], ["FIELD", "VALUE"], out)
            out.write("\n")
            _table([[e.get("name"), e.get("subject"), e.get("queue_group") or "-",
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
        _print_json(docs, out)
    elif docs:
        _table([[d.get("name"), d.get("id"), e.get("name"), e.get("num_requests"), e.get("num_errors"),
                 _ns(e.get("processing_time")), _ns(e.get("average_processing_time")), e.get("last_error") or "-"]
                for d in docs for e in d.get("endpoints") or []],
               ["SERVICE", "ID", "ENDPOINT", "REQUESTS", "ERRORS", "PROCESSING", "AVERAGE", "LAST_ERROR"], out)
    return 0 if docs else _no_service(args)


# -- key-value ---------------------------------------------------------------------------------


def _kv(args: argparse.Namespace) -> int:
    import jssync

    with _connect(args) as nc:
        js = nc.jetstream(timeout=args.timeout)
        out = sys.stdout
        if args.kv_cmd == "add":
            js.create_key_value(bucket=args.bucket, history=args.history)
            if args.json:
                _print_json({"bucket": args.bucket, "history": args.history}, out)
            else:
                out.write(f"created bucket {args.bucket}\n")
            return 0
        if args.kv_cmd == "ls" and args.bucket is None:
            return _kv_buckets(js, args, out)
        kv = js.key_value(args.bucket)
        if args.kv_cmd == "get":
            e = kv.get(args.key)
            if args.json:
                _print_record(_entry_record(e), out)
            else:
                out.write((e.value or b"").decode(errors="replace") + "\n")
        elif args.kv_cmd == "put":
            rev = kv.put(args.key, (args.value or "").encode())
            if args.json:
                _print_json({"bucket": args.bucket, "key": args.key, "revision": rev}, out)
            else:
                out.write(f"revision {rev}\n")
        elif args.kv_cmd == "del":
            if not _confirmed(args, f"key {args.key} of bucket {args.bucket}"):
                return 1
            kv.delete(args.key)
            if args.json:
                _print_json({"deleted": args.key, "bucket": args.bucket}, out)
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
                    if args.json:
                        _print_record(_entry_record(e), out)
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
            _print_record(_entry_record(e), out)
        return
    rows = []
    for e in entries:
        op = _value(e.operation) or "PUT"
        text = _printable(e.value or b"")
        if text is None:
            text = f"<{len(e.value)} bytes of binary data>"
        elif len(text) > 60:
            text = text[:57] + "..."
        created = e.created.astimezone().isoformat(timespec="seconds") if e.created else "-"
        rows.append([e.key, e.revision, op, created, len(e.value or b""), text if op == "PUT" else ""])
    _table(rows, ["KEY", "REVISION", "OP", "CREATED", "LENGTH", "VALUE"], out)


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
        _print_json(rows, out)
        return 0
    _table([[r["bucket"], r["values"], r["bytes"], r["history"], r["ttl"] or "-", r["storage"],
             r["mirror"] or "-"] for r in rows],
           ["BUCKET", "VALUES", "BYTES", "HISTORY", "TTL", "STORAGE", "MIRROR"], out)
    return 0


# -- object store ------------------------------------------------------------------------------


def _obj_add(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    params: dict[str, Any] = {"bucket": args.bucket, "storage": args.storage}
    if args.description:
        params["description"] = args.description
    if args.max_bytes is not None:
        params["max_bytes"] = args.max_bytes
    js.create_object_store(**params)
    if args.json:
        _print_json({"bucket": args.bucket, "storage": args.storage}, out)
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
        _print_json(info, out)
    else:
        out.write(f"stored {info.name} in {args.bucket}: {_human_size(info.size)} in {info.chunks} chunk(s)\n")
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
        _print_json({"name": info.name, "bucket": args.bucket, "size": info.size, "file": dest}, out)
    else:
        out.write(f"wrote {_human_size(info.size)} of {info.name} to {dest}\n")
    return 0


def _obj_ls(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    infos = sorted(js.object_store(args.bucket).list(), key=lambda i: i.name)
    if args.json:
        _print_json(infos, out)
        return 0
    if not infos:
        out.write(f"no objects in {args.bucket}\n")
        return 0
    _table([[i.name, _human_size(i.size), i.chunks, _obj_time(i.mtime)] for i in infos],
           ["NAME", "SIZE", "CHUNKS", "TIME"], out)
    return 0


def _obj_time(mtime: Any) -> str:
    """An object's RFC 3339 modification time, in local time to the second (as given when unreadable)."""
    from .base.times import server_time_or_none

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
        _print_json(info, out)
        return 0
    rows = [["name", info.name], ["bucket", info.bucket or args.bucket],
            ["size", f"{_human_size(info.size)} ({info.size:,} bytes)"], ["chunks", info.chunks],
            ["modified", _obj_time(info.mtime)], ["digest", info.digest or "-"], ["id", info.nuid or "-"]]
    if info.description:
        rows.insert(2, ["description", info.description])
    for k, v in sorted((info.headers or {}).items()):
        rows.append([f"header {k}", ", ".join(v) if isinstance(v, list) else v])
    link = getattr(info.options, "link", None) if info.options else None
    if link is not None:
        rows.append(["link", f"{link.bucket}/{link.name or ''}"])
    _table(rows, ["FIELD", "VALUE"], out)
    return 0


def _obj_rm(nc: Any, js: Any, args: argparse.Namespace, out: TextIO) -> int:
    store = js.object_store(args.bucket)
    store.get_info(args.name)  # ObjectNotFoundError before any question
    if not _confirmed(args, f"object {args.name} of {args.bucket}"):
        return 1
    store.delete(args.name)
    if args.json:
        _print_json({"deleted": args.name, "bucket": args.bucket}, out)
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
                    _print_record(_jsonable(info), out)
                else:
                    op = "DEL" if info.deleted else "PUT"
                    out.write(f"[{_obj_time(info.mtime)}] {op} {args.bucket} > {info.name}: "
                              f"{_human_size(info.size)}\n")
                    out.flush()
                if args.count and n >= args.count:
                    break
        except KeyboardInterrupt:
            pass
    return 0


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
        _print_json(rows, out)
    else:
        lat = any("latency_p50_ms" in r for r in rows)
        _table([[r["kind"], r["clients"], f"{r['msgs']:,}", _human_size(r["bytes"]), f"{r['seconds']:.3f}",
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
        c = _connect(args)
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
            with _connect(args) as c:
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
    with _connect(args) as nc:
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
                with _connect(args) as c:
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
        _delete_quietly(js, stream, oc.name)
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
    x.add_argument("--max-time", type=_duration, default=60.0, metavar="DURATION",
                   help="stop after this long and report what was done (default 60s)")


def _bench_msgs(text: str) -> int:
    n = positive_int(text)
    if n > _BENCH_MAX_MSGS:
        raise argparse.ArgumentTypeError(f"{text!r} is more than {_BENCH_MAX_MSGS:,} messages")
    return n


def _bench_size(text: str) -> int:
    n = _size(text)
    if n < 1 or n > 64 * 1024 * 1024:
        raise argparse.ArgumentTypeError(f"{text!r} is not a payload size from 1 byte to 64MiB")
    return n


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


def _port_free(port: int) -> bool:
    """Whether 127.0.0.1:``port`` can be listened on (as nats-server would: SO_REUSEADDR set)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen()
        except OSError:
            return False
    return True


def _port_taken(port: int) -> int:
    """Say (one line on stderr) that ``port`` is taken; exit status 1."""
    sys.stderr.write(f"jssync: port {port} on 127.0.0.1 is already in use (another nats-server?): "
                     f"pick another with --port, e.g. --port {port + 1}\n")
    return 1


def _server(args: argparse.Namespace) -> int:
    from jssync.server import NatsServer, ServerError

    # SIGTERM, SIGHUP and SIGINT all stop the server the same way: the nats-server child is stopped and
    # the temporary directory (with the store, unless --store-dir) removed. A signal that comes before
    # there is anything to clean up is held until there is; one that comes while stopping is ignored.
    state: dict[str, Any] = {"armed": False, "stopping": False, "signal": None}

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if state["stopping"]:
            return
        state["signal"] = signum
        if state["armed"]:
            state["stopping"] = True
            raise _Stop(signum)

    sigs = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
    old = {sig: signal.signal(sig, on_signal) for sig in sigs}
    srv: NatsServer | None = None
    try:
        if not _port_free(args.port):
            return _port_taken(args.port)
        srv = NatsServer(jetstream=True, port=args.port, store_dir=args.store_dir)
        state["armed"] = True
        if state["signal"] is not None:
            state["stopping"] = True
            raise _Stop(state["signal"])
        try:
            srv.start()
        except ServerError as exc:
            if "address already in use" in str(exc):  # taken between the check and the start
                return _port_taken(args.port)
            fatal = [ln for ln in str(exc).splitlines() if "[FTL]" in ln or "[ERR]" in ln]
            sys.stderr.write(f"jssync: nats-server did not start: "
                             f"{(fatal[-1].split('] ', 2)[-1] if fatal else str(exc).splitlines()[0])}\n")
            return 1
        kind = "kept" if args.store_dir else "temporary: removed on exit"
        print(f"nats-server running at {srv.url}, store {srv.store_dir} ({kind}); Ctrl-C to stop", flush=True)
        while srv.running:
            time.sleep(0.2)
        sys.stderr.write(f"jssync: nats-server exited:\n{srv.logs()[-2000:]}\n")
        return 1
    except _Stop:
        return 0
    finally:
        state["stopping"] = True
        if srv is not None:
            srv.stop()
            srv.cleanup()
        for sig, handler in old.items():
            signal.signal(sig, handler)


# -- parser ------------------------------------------------------------------------------------


def _add(group: Any, name: str, **kw: Any) -> argparse.ArgumentParser:
    """A (sub)command that also takes every global option."""
    x: argparse.ArgumentParser = group.add_parser(name, **kw)
    _add_global_options(x)
    return x


def _version_text() -> str:
    """``jssync 0.1.0 (nats-py 2.16.0, Python 3.12.3)``: what ``jssync --version`` prints."""
    from importlib import metadata

    from . import __version__

    try:
        nats_py = metadata.version("nats-py")
    except metadata.PackageNotFoundError:  # pragma: no cover - nats-py from a checkout
        nats_py = "unknown"
    return f"jssync {__version__} (nats-py {nats_py}, Python {sys.version.split()[0]})"


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="jssync", description="jssync: NATS JetStream from the command line",
        epilog="Settings come from the flag, else the environment (NATS_URL, NATS_USER, ...), else the "
               "nats CLI context (--context NAME, else the selected one).")
    p.add_argument("--version", action="version", version=_version_text(),
                   help="print jssync's version (and nats-py's, Python's) and exit")
    _add_global_options(p)
    sub = p.add_subparsers(dest="command", required=True)

    d = _add(sub, "demo", help="run the quick start against a local server it starts")
    d.add_argument("--count", type=int, default=10000, help="messages to publish and consume")
    d.set_defaults(func=_demo, _local=True)
    s = _add(sub, "server", help="run a local nats-server with JetStream",
             description="Run a local nats-server with JetStream on 127.0.0.1 until Ctrl-C, SIGTERM or SIGHUP. "
                         "Its store is a temporary directory, removed when it stops, unless --store-dir is given.")
    s.add_argument("--port", type=int, default=4222)
    s.add_argument("--store-dir", metavar="DIR",
                   help="keep the JetStream store in DIR between runs (default: a temporary directory, "
                        "removed on exit)")
    s.set_defaults(func=_server, _local=True)

    st = _add(sub, "stream", help="manage streams").add_subparsers(dest="stream_cmd", required=True)
    x = _add(st, "ls", help="list streams")
    x.add_argument("--subject", help="only streams that capture this subject")
    x.set_defaults(func=_with_js(_stream_ls))
    x = _add(st, "info", help="show a stream")
    x.add_argument("name")
    x.add_argument("--subjects", metavar="FILTER", help="also count messages per subject (e.g. '>')")
    x.set_defaults(func=_with_js(_stream_info))
    x = _add(st, "add", help="create a stream")
    x.add_argument("name")
    x.add_argument("--subjects", help="comma-separated subjects (default: the stream name, as the nats CLI)")
    x.add_argument("--storage", choices=["file", "memory"], default="file")
    x.add_argument("--retention", choices=["limits", "interest", "workqueue"], default="limits")
    x.add_argument("--replicas", type=int, default=1)
    _add_stream_settings(x)
    x.add_argument("--allow-direct", action="store_true", help="answer direct gets (ADR-31)")
    x.set_defaults(func=_with_js(_stream_add))
    x = _add(st, "edit", help="change the subjects or limits of a stream",
             description="Change the subjects or limits of an existing stream; what is not given stays as it is "
                         "(like nats stream edit).")
    x.add_argument("name")
    x.add_argument("--subjects", help="comma-separated subjects: the new list (replaces the old one)")
    x.add_argument("--replicas", type=int)
    _add_stream_settings(x)
    x.add_argument("--allow-direct", action="store_true", help="answer direct gets (ADR-31)")
    x.add_argument("--no-allow-direct", action="store_true", help="stop answering direct gets")
    x.set_defaults(func=_with_js(_stream_edit))
    x = _add(st, "rm", help="delete a stream (asks first on a terminal, unless -f)")
    x.add_argument("name")
    _add_force(x)
    x.set_defaults(func=_with_js(_stream_rm))
    x = _add(st, "purge", help="purge a stream")
    x.add_argument("name")
    x.add_argument("--subject")
    x.add_argument("--seq", type=int)
    x.add_argument("--keep", type=int)
    x.set_defaults(func=_with_js(_stream_purge))
    x = _add(st, "get", help="read one stored message")
    x.add_argument("name")
    x.add_argument("seq", type=int, nargs="?")
    x.add_argument("--last-by-subject")
    x.set_defaults(func=_with_js(_stream_get), _spill=(("seq", int),))
    x = _add(st, "view", help="print the messages of a stream (leaves no consumer behind)",
             description="Print a stream's messages in order, like nats stream view: sequence, subject, time, "
                         "headers and data (as text when printable). Reads through an ordered consumer that is "
                         "deleted at the end, up to the last message stored when it started.")
    x.add_argument("name")
    x.add_argument("--subject", help="only messages on this subject (wildcards allowed)")
    start = x.add_mutually_exclusive_group()
    start.add_argument("--since", type=_duration, metavar="DURATION",
                       help="start with the messages stored this long ago, e.g. 1h, 30m")
    start.add_argument("--start-seq", type=positive_int, metavar="N", help="start at this stream sequence")
    x.add_argument("--last", type=positive_int, metavar="N", help="only the last N messages (of those selected)")
    x.add_argument("--count", type=positive_int, metavar="N", help="print at most N messages")
    x.add_argument("--raw", action="store_true", help="print only the payloads, each on a line of its own")
    x.set_defaults(func=_with_js(_stream_view))
    x = _add(st, "export", help="write every message to a JSON Lines file")
    x.add_argument("name")
    x.add_argument("file", help="output file, - for stdout")
    x.set_defaults(func=_with_js(_stream_export))
    x = _add(st, "import", help="publish every message of a JSON Lines file")
    x.add_argument("file", help="input file, - for stdin")
    x.add_argument("--name", help="label for the progress bar")
    x.add_argument("--subject-prefix", help="prepend this token to every subject")
    x.set_defaults(func=_with_js(_stream_import))

    co = _add(sub, "consumer", help="manage consumers").add_subparsers(dest="consumer_cmd", required=True)
    x = _add(co, "ls", help="list consumers of a stream")
    x.add_argument("stream")
    x.set_defaults(func=_with_js(_consumer_ls))
    x = _add(co, "info", help="show a consumer")
    x.add_argument("stream")
    x.add_argument("name")
    x.set_defaults(func=_with_js(_consumer_info))
    x = _add(co, "add", help="create a durable pull consumer")
    x.add_argument("stream")
    x.add_argument("name")
    x.add_argument("--filter", help="comma-separated filter subjects")
    x.add_argument("--ack", choices=["explicit", "all", "none"], default="explicit")
    x.add_argument("--deliver", choices=["all", "last", "new", "last_per_subject"], default="all")
    x.add_argument("--max-deliver", type=int)
    x.add_argument("--pinned-groups", metavar="GROUPS",
                   help="priority groups (comma-separated) of a pinned_client consumer (ADR-42)")
    x.add_argument("--pinned-ttl", type=_duration, metavar="DURATION",
                   help="how long the pinned client may go without pulling before another is pinned")
    x.add_argument("--overflow-groups", metavar="GROUPS", help="priority groups of an overflow consumer")
    x.add_argument("--prioritized-groups", metavar="GROUPS", help="priority groups of a prioritized consumer")
    _server_field_flags(x)
    x.set_defaults(func=_with_js(_consumer_add))
    x = _add(co, "edit", help="change the settings of a consumer",
             description="Change settings of an existing consumer; what is not given stays as it is "
                         "(like nats consumer edit).")
    x.add_argument("stream")
    x.add_argument("name")
    x.add_argument("--filter", help="comma-separated filter subjects: the new list")
    x.add_argument("--ack-wait", type=_duration, metavar="DURATION", help="redeliver when no ack came this long")
    x.add_argument("--max-deliver", type=_limit, metavar="N", help="deliveries per message (-1: unlimited)")
    x.add_argument("--max-ack-pending", type=_limit, metavar="N",
                   help="messages delivered and not yet acked (-1: unlimited)")
    x.add_argument("--max-waiting", type=int, metavar="N", help="pull requests that may wait")
    x.add_argument("--inactive-threshold", type=_duration, metavar="DURATION",
                   help="remove the consumer when unused this long")
    x.add_argument("--description")
    _server_field_flags(x)
    x.set_defaults(func=_with_js(_consumer_edit))
    x = _add(co, "rm", help="delete a consumer (asks first on a terminal, unless -f)")
    x.add_argument("stream")
    x.add_argument("name")
    _add_force(x)
    x.set_defaults(func=_with_js(_consumer_rm))
    x = _add(co, "next", help="fetch (and ack) messages from a pull consumer")
    x.add_argument("stream")
    x.add_argument("name")
    x.add_argument("--count", type=int, default=1)
    x.add_argument("--wait", type=_duration, metavar="DURATION", default=5.0,
                   help="how long to wait for messages (seconds or e.g. 500ms, 5s)")
    x.add_argument("--no-ack", action="store_true")
    x.add_argument("--group", help="the priority group to pull from (consumers with priority groups)")
    x.add_argument("--min-pending", type=int, help="overflow: only when this many messages are pending")
    x.add_argument("--min-ack-pending", type=int,
                   help="overflow: only when this many messages are waiting for an ack")
    x.add_argument("--priority", type=int, help="prioritized: 0 (first) to 9")
    x.set_defaults(func=_with_js(_consumer_next))
    x = _add(co, "unpin", help="unpin the pinned client of a priority group")
    x.add_argument("stream")
    x.add_argument("name")
    x.add_argument("group")
    x.set_defaults(func=_with_js(_consumer_unpin))

    x = _add(sub, "pub", help="publish (core, or --js with a PubAck)")
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
    x.add_argument("--ttl", type=_ttl, metavar="DURATION",
                   help="with --js: the stream removes the message after this long (>= 1s, or 'never'; "
                        "the stream needs allow_msg_ttl)")
    x.set_defaults(func=_pub, _spill=(("data", str),))
    x = _add(sub, "sub", help="subscribe and print messages")
    x.add_argument("subject")
    x.add_argument("--queue")
    x.add_argument("--count", type=int, default=0, help="stop after N messages (0: until idle/Ctrl-C)")
    x.add_argument("--wait", type=_duration, metavar="DURATION", default=3600.0,
                   help="stop after this long idle (seconds or e.g. 30s, 1h)")
    x.set_defaults(func=_sub)
    x = _add(sub, "req", help="send a request and print the reply")
    x.add_argument("subject")
    x.add_argument("data", nargs="?")
    x.add_argument("-H", "--header", action="append")
    x.set_defaults(func=_req, _spill=(("data", str),))

    mi = _add(sub, "micro", help="find and watch micro services (ADR-32)").add_subparsers(dest="micro_cmd",
                                                                                          required=True)
    for name, hlp, fn, need in (("ls", "list the running services (each instance)", _micro_ls, False),
                                ("info", "show a service's instances and endpoints", _micro_info, True),
                                ("stats", "show a service's request counts and times per endpoint", _micro_stats,
                                 True)):
        x = _add(mi, name, help=hlp)
        if need:
            x.add_argument("service")
            x.add_argument("id", nargs="?", help="only this instance")
        else:
            x.add_argument("service", nargs="?", help="only instances of this service")
        x.add_argument("--wait", type=_duration, default=2.0, metavar="DURATION",
                       help="how long to wait for services to answer (default 2s; it ends sooner "
                            "once answers stop coming)")
        x.set_defaults(func=_with_js(fn), _spill=(("id", str),) if need else (("service", str),))

    kv = _add(sub, "kv", help="key-value buckets").add_subparsers(dest="kv_cmd", required=True)
    x = _add(kv, "add", help="create a bucket")
    x.add_argument("bucket")
    x.add_argument("--history", type=int, default=1)
    x.set_defaults(func=_kv)
    for name, hlp in (("get", "read a key"), ("del", "delete a key (asks first on a terminal, unless -f)")):
        x = _add(kv, name, help=hlp)
        x.add_argument("bucket")
        x.add_argument("key")
        if name == "del":
            _add_force(x)
        x.set_defaults(func=_kv)
    x = _add(kv, "history", help="show every revision of a key (puts, deletes, purges)")
    x.add_argument("bucket")
    x.add_argument("key")
    x.set_defaults(func=_kv)
    x = _add(kv, "put", help="write a key")
    x.add_argument("bucket")
    x.add_argument("key")
    x.add_argument("value")
    x.set_defaults(func=_kv)
    x = _add(kv, "ls", help="list the keys of a bucket, or every bucket")
    x.add_argument("bucket", nargs="?", help="the bucket whose keys to list (default: list the buckets)")
    x.set_defaults(func=_kv, _spill=(("bucket", str),))
    x = _add(kv, "watch", help="print changes")
    x.add_argument("bucket")
    x.add_argument("key", nargs="?")
    x.add_argument("--count", type=int, default=0, help="stop after N updates")
    x.set_defaults(func=_kv, _spill=(("key", str),))

    ob = _add(sub, "obj", help="object stores").add_subparsers(dest="obj_cmd", required=True)
    x = _add(ob, "add", help="create an object store")
    x.add_argument("bucket")
    x.add_argument("--storage", choices=["file", "memory"], default="file")
    x.add_argument("--max-bytes", type=_size, metavar="SIZE", help="the store's size limit, e.g. 1GiB")
    x.add_argument("--description")
    x.set_defaults(func=_with_js(_obj_add))
    x = _add(ob, "put", help="store a file as an object")
    x.add_argument("bucket")
    x.add_argument("file", help="the file to store, - for stdin")
    x.add_argument("--name", help="the object's name (default: the file's name)")
    x.set_defaults(func=_with_js(_obj_put))
    x = _add(ob, "get", help="read an object into a file")
    x.add_argument("bucket")
    x.add_argument("name")
    x.add_argument("-O", "--output", metavar="FILE",
                   help="write it here, - for stdout (default: a file named after it in the current directory)")
    x.add_argument("-f", "--force", action="store_true", help="overwrite the default file when it exists")
    x.set_defaults(func=_with_js(_obj_get))
    x = _add(ob, "ls", help="list the objects of a store")
    x.add_argument("bucket")
    x.set_defaults(func=_with_js(_obj_ls))
    x = _add(ob, "info", help="show an object")
    x.add_argument("bucket")
    x.add_argument("name")
    x.set_defaults(func=_with_js(_obj_info))
    x = _add(ob, "rm", help="delete an object (asks first on a terminal, unless -f)")
    x.add_argument("bucket")
    x.add_argument("name")
    _add_force(x)
    x.set_defaults(func=_with_js(_obj_rm))
    x = _add(ob, "watch", help="print the objects of a store, then each change")
    x.add_argument("bucket")
    x.add_argument("--count", type=int, default=0, help="stop after N objects/changes")
    x.set_defaults(func=_with_js(_obj_watch))
    be = _add(sub, "bench", help="measure publish and consume rates against the server (-s)",
              description="Benchmarks like nats bench, bounded by --msgs and --max-time, against the server "
                          "given (-s/--server) only.").add_subparsers(dest="bench_cmd", required=True)
    x = _add(be, "pub", help="publish --msgs core messages (--pubs publishers, --subs subscribers)")
    _add_bench_options(x, subs=True)
    x.set_defaults(func=_bench_core)
    x = _add(be, "sub", help="wait for --msgs core messages (sent by someone else)")
    _add_bench_options(x, pubs=False)
    x.add_argument("--subs", "--clients", type=positive_int, default=1, metavar="K",
                   help="subscribing connections, each taking every message (default 1)")
    x.set_defaults(func=_bench_core)
    bj = _add(be, "js", help="JetStream benchmarks").add_subparsers(dest="js_cmd", required=True)
    x = _add(bj, "pub", help="publish --msgs messages to a stream (one of its own, removed after, if none "
                             "captures SUBJECT)")
    _add_bench_options(x)
    x.add_argument("--sync", action="store_true", help="wait for each PubAck before the next (shows latencies)")
    x.add_argument("--storage", choices=["file", "memory"], default="memory",
                   help="storage of the stream made for the run (default memory)")
    x.set_defaults(func=_bench_js)
    x = _add(bj, "consume", help="read --msgs messages on SUBJECT from its stream (an ordered consumer, "
                                 "removed after)")
    _add_bench_options(x, size=False, pubs=False)
    x.set_defaults(func=_bench_js, storage="memory", sync=False)
    return p


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse like the nats CLI: global options anywhere, optional arguments also after the options."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # argparse fills an optional positional (pub's DATA) with nothing when an option follows the required
    # ones (`pub SUBJ --js hello`): hand such left-over words to it.
    for name, convert in getattr(args, "_spill", ()):
        if extra and getattr(args, name) is None and not extra[0].startswith("-"):
            word = extra.pop(0)
            try:
                setattr(args, name, convert(word))
            except ValueError:
                parser.error(f"argument {name}: invalid {convert.__name__} value: {word!r}")
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (errors print one line on stderr)."""
    args = parse_args(argv)
    import jssync

    try:
        _resolve(args, connects=not getattr(args, "_local", False))
        logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                            format="%(levelname)s %(name)s: %(message)s")
        rc: int = args.func(args)
    except (ValueError, TypeError) as exc:  # bad input, jssync.ValidationError too: a usage error
        sys.stderr.write(f"jssync: {exc}\n")
        return 2
    except jssync.Error as exc:
        sys.stderr.write(f"jssync: {type(exc).__name__}: {exc}\n")
        return 1
    except OSError as exc:
        sys.stderr.write(f"jssync: {exc}\n")
        return 1
    return rc


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

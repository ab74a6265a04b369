"""What every command group uses: output (tables, JSON, payloads, progress), the global
options and settings (flag > environment > nats CLI context), connecting, ``add``.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from ..base.errors import ValidationError, _ConfigError

# -- output helpers ----------------------------------------------------------------------------


def jsonable(obj: Any) -> Any:
    import dataclasses
    import datetime as _dt
    import enum

    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {k: jsonable(v) for k, v in dataclasses.asdict(obj).items() if v is not None}
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, _dt.datetime):
        return obj.isoformat()
    if isinstance(obj, bytes):
        rec: dict[str, Any] = {}
        _put_payload(rec, "data", obj)
        return rec if "data_encoding" in rec else rec["data"]
    return obj


def print_json(obj: Any, out: TextIO) -> None:
    """One result: one JSON document (indented)."""
    out.write(json.dumps(jsonable(obj), indent=2, sort_keys=True, default=str) + "\n")


def print_record(rec: dict[str, Any], out: TextIO) -> None:
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


def get_payload(rec: dict[str, Any], field: str) -> bytes:
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


def msg_record(subject: str, data: bytes, headers: dict[str, str] | None, **extra: Any) -> dict[str, Any]:
    """The one JSON shape of a message: subject, extra fields, data (+ data_encoding), headers."""
    rec: dict[str, Any] = {"subject": subject, **extra}
    _put_payload(rec, "data", data)
    rec["headers"] = headers or None
    return rec


def entry_record(e: Any) -> dict[str, Any]:
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


def table(rows: list[list[Any]], headers: list[str], out: TextIO) -> None:
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


def human_size(n: Any) -> str:
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


def human_duration(secs: Any, zero: str = "unlimited") -> str:
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


def limit_text(n: Any) -> str:
    """A count limit for people: -1 (or None) is ``unlimited``."""
    return "unlimited" if n is None or (isinstance(n, int) and n < 0) else str(n)


def value_text(v: Any) -> str:
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


def parse_headers(items: list[str] | None) -> dict[str, str] | None:
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
def parse_duration(text: str) -> float:
    """Seconds (> 0) from ``2.5`` or a Go duration as the nats CLI takes it (``500ms``, ``5s``, ``1m30s``)."""
    secs = duration_or_zero(text)
    if secs <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive duration")
    return secs


def duration_or_zero(text: str) -> float:
    """Seconds (>= 0; 0 often means no limit) from a number or a Go duration (``1h``, ``90m``)."""
    from ..base.durations import seconds

    try:
        return seconds(str(text), "duration")
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration >= 0 (seconds, or e.g. 500ms, 5s, "
                                         "1h30m)") from None



def parse_ttl(text: str) -> float | str:
    """A message TTL: ``never``, or a duration (checked to be >= 1s by the publish)."""
    return "never" if str(text).strip().lower() == "never" else parse_duration(text)


_SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1024, "kib": 1024, "m": 1024**2, "mb": 1024**2, "mib": 1024**2,
               "g": 1024**3, "gb": 1024**3, "gib": 1024**3, "t": 1024**4, "tb": 1024**4, "tib": 1024**4}


def parse_limit(text: str) -> int:
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


def parse_size(text: str) -> int:
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
    (("--timeout",), {"type": parse_duration, "metavar": "DURATION",
                      "help": "timeout of each operation: seconds or e.g. 500ms, 5s ($NATS_TIMEOUT; default 5s)"}),
    (("--connect-timeout",), {"type": parse_duration, "metavar": "DURATION",
                              "help": "timeout of the first connect (default 2s)"}),
    (("--json",), {"action": "store_true", "help": "machine-readable JSON output"}),
    (("--progress",), {"action": "store_true", "help": "always draw progress bars on stderr"}),
    (("-v", "--verbose"), {"action": "store_true", "help": "log debug output"}),
]


def add_global_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("global options (before or after the command)")
    for flags, kw in _GLOBAL_OPTIONS:
        action = g.add_argument(*flags, default=argparse.SUPPRESS, **kw)
        _GLOBAL_ACTIONS.add(action)


#: the argparse actions of the global options (left out of the usage lines); weak, and by
#: object rather than id(): the id of a dropped parser's action can come back as the id of
#: another command's own option when main() runs again in the same process
_GLOBAL_ACTIONS: weakref.WeakSet[argparse.Action] = weakref.WeakSet()


class Parser(argparse.ArgumentParser):
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


def resolve_settings(args: argparse.Namespace, connects: bool) -> None:
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
                setattr(args, setting, parse_duration(value))
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


def open_connection(args: argparse.Namespace) -> Any:
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


def with_js(fn: Callable[[Any, Any, argparse.Namespace, TextIO], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        with open_connection(args) as nc:
            js = nc.jetstream(timeout=args.timeout)
            return fn(nc, js, args, sys.stdout)

    return run



def confirmed(args: argparse.Namespace, what: str) -> bool:
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


def add_force(x: argparse.ArgumentParser) -> None:
    x.add_argument("-f", "--force", action="store_true",
                   help="delete without asking (without a terminal on stdin it never asks)")


def printable_text(data: bytes) -> str | None:
    """``data`` as text when it is UTF-8 and printable (newlines and tabs allowed), else None."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if all(c.isprintable() or c in "\n\r\t" for c in text) else None



# -- commands ---------------------------------------------------------------------------------



def add_command(group: Any, name: str, **kw: Any) -> argparse.ArgumentParser:
    """A (sub)command that also takes every global option."""
    x: argparse.ArgumentParser = group.add_parser(name, **kw)
    add_global_options(x)
    return x


def version_text() -> str:
    """``jssync 0.1.0 (nats-py 2.16.0, Python 3.12.3)``: what ``jssync --version`` prints."""
    from importlib import metadata

    from .. import __version__

    try:
        nats_py = metadata.version("nats-py")
    except metadata.PackageNotFoundError:  # pragma: no cover - nats-py from a checkout
        nats_py = "unknown"
    return f"jssync {__version__} (nats-py {nats_py}, Python {sys.version.split()[0]})"

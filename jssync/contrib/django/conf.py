"""The ``JSSYNC`` setting: what it may hold, the environment defaults, and what is wrong with it.

``settings.JSSYNC`` is a dict (every key optional)::

    JSSYNC = {
        "servers": "nats://127.0.0.1:4222",    # one URL, "url1,url2", or a list
        "creds": "/run/secrets/app.creds",     # or "user"/"password", "token", "nkeys_seed"
        "name": "orders-web",                  # the connection's name (default: django-<pid>)
        "options": {"timeout": 5.0},           # any other keyword of jssync.connect()
        "jetstream": {"domain": None},         # keywords of Connection.jetstream()
    }

A key left out falls back to the environment variable the ``nats`` CLI reads: ``NATS_URL``
(servers), ``NATS_CREDS``, ``NATS_USER`` and ``NATS_PASSWORD`` (``NATS_USER`` alone is a
token, as for the CLI), ``NATS_NKEY``, and ``NATS_CA`` / ``NATS_CERT`` / ``NATS_KEY`` (a TLS
context, unless ``options`` has ``tls``). Credentials come from the environment only when
``JSSYNC`` names none. The settings are read when a connection is made, not at import.

:func:`problems` lists what is wrong (the system checks show them); :func:`connect_options`
raises the first one as a :class:`jssync.ValidationError`.
"""

from __future__ import annotations

import difflib
import inspect
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from jssync import Connection, ValidationError
from jssync.core.urls import SCHEMES, redact_url

#: the keys ``JSSYNC`` may hold
KEYS = ("servers", "creds", "user", "password", "token", "nkeys_seed", "name", "options", "jetstream")
#: the credential keys: when JSSYNC names one, the environment's credentials are not used
CREDENTIAL_KEYS = ("creds", "user", "password", "token", "nkeys_seed")
#: the keyword options of ``jssync.connect`` (what ``options`` may hold)
CONNECT_OPTIONS = tuple(p for p in inspect.signature(Connection.__init__).parameters if p not in ("self", "servers"))
#: connect options -> (what each must be, a test of a value); the others are checked by connect()
_NUMBER = ("a number of seconds", lambda v: isinstance(v, int | float) and not isinstance(v, bool))
_INT = ("an int", lambda v: isinstance(v, int) and not isinstance(v, bool))
_CALLABLE = ("a callable (or None)", lambda v: v is None or callable(v))
OPTION_TYPES: dict[str, tuple[str, Any]] = {
    "timeout": _NUMBER, "reconnect_time_wait": _NUMBER, "ping_interval": _NUMBER,
    "max_reconnect_attempts": _INT, "max_outstanding_pings": _INT, "callback_workers": _INT,
    "reconnect_buffer_size": ("an int (or None)", lambda v: v is None or _INT[1](v)),
    "no_echo": ("a bool", lambda v: isinstance(v, bool)),
    "inbox_prefix": ("a string", lambda v: isinstance(v, str)),
    "tls_hostname": ("a string (or None)", lambda v: v is None or isinstance(v, str)),
    "tls": ("an ssl.SSLContext (or None)", lambda v: v is None or isinstance(v, ssl.SSLContext)),
    "error_cb": _CALLABLE, "disconnected_cb": _CALLABLE, "reconnected_cb": _CALLABLE, "closed_cb": _CALLABLE,
}
#: the keyword options of ``Connection.jetstream``
JETSTREAM_OPTIONS = tuple(p for p in inspect.signature(Connection.jetstream).parameters if p != "self")
#: environment variable -> JSSYNC key, as the nats CLI names them
ENV = {"NATS_URL": "servers", "NATS_CREDS": "creds", "NATS_USER": "user", "NATS_PASSWORD": "password",
       "NATS_NKEY": "nkeys_seed"}
TLS_ENV = ("NATS_CA", "NATS_CERT", "NATS_KEY")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the settings: a check id (``jssync.E001``), the message and a hint."""

    id: str
    msg: str
    hint: str | None = None


def raw_settings() -> Any:
    """``settings.JSSYNC`` (an empty dict when it is not set)."""
    return getattr(settings, "JSSYNC", {})


def _suggest(key: str, valid: tuple[str, ...]) -> str | None:
    close = difflib.get_close_matches(str(key), valid, n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else None


def _check_servers(value: Any, where: str) -> list[Problem]:
    if isinstance(value, str):
        urls = [u.strip() for u in value.split(",") if u.strip()]
    elif isinstance(value, list | tuple) and all(isinstance(u, str) for u in value):
        urls = [u.strip() for u in value if u.strip()]
    else:
        return [Problem("jssync.E003", f"{where} must be a URL, a comma-separated string of URLs or a list "
                                       f"of URLs, got {type(value).__name__}")]
    if not urls:
        return [Problem("jssync.E003", f"{where} names no server URL")]
    out = []
    schemes = ", ".join(f"{s}://" for s in SCHEMES)
    for url in urls:
        if "://" in url:
            scheme = url.split("://", 1)[0]
            if scheme.lower() not in SCHEMES:
                out.append(Problem("jssync.E003", f"{where}: the server URL {redact_url(url)!r} has the scheme "
                                                  f"{scheme!r}", f"use {schemes} (or a bare host:port)"))
        elif "/" in url:
            out.append(Problem("jssync.E003", f"{where}: invalid server URL {redact_url(url)!r}",
                               "write it as nats://host:port"))
    return out


def _check_file(value: Any, what: str, where: str, pid: str) -> list[Problem]:
    if not isinstance(value, str | os.PathLike):
        return [Problem(pid, f"{where} must be the path of the {what}, got {type(value).__name__}")]
    path = os.fspath(value)
    if not os.path.isfile(path):
        return [Problem(pid, f"{where}: the {what} {path!r} does not exist", "check the path (it is read "
                                                                              "when the connection is made)")]
    if not os.access(path, os.R_OK):
        return [Problem(pid, f"{where}: the {what} {path!r} cannot be read by this process")]
    return []


def _looks_like_seed(value: str) -> bool:
    v = value.strip()
    return len(v) == 58 and v.startswith("S") and v.isalnum() and v.isupper()


def resolved() -> tuple[dict[str, Any], dict[str, str], list[Problem]]:
    """The settings merged with the environment: (values, where each came from, problems)."""
    raw = raw_settings()
    if not isinstance(raw, Mapping):
        return {}, {}, [Problem("jssync.E001", f"the JSSYNC setting must be a dict, got {type(raw).__name__}")]
    found: list[Problem] = []
    for key in raw:
        if key not in KEYS:
            found.append(Problem("jssync.E002", f"JSSYNC has an unknown key {key!r}",
                                    _suggest(key, KEYS) or f"the keys are {', '.join(KEYS)}"))
    values: dict[str, Any] = {k: raw[k] for k in KEYS if k in raw and raw[k] is not None}
    where = {k: f"JSSYNC[{k!r}]" for k in values}
    env_creds = not any(k in values for k in CREDENTIAL_KEYS)
    for var, key in ENV.items():
        val = os.environ.get(var)
        if not val or key in values or (key in CREDENTIAL_KEYS and not env_creds):
            continue
        values[key] = val
        where[key] = f"${var}"
    if env_creds and where.get("user") == "$NATS_USER" and "password" not in values:
        values["token"] = values.pop("user")  # the nats CLI: NATS_USER without a password is a token
        where["token"] = where.pop("user")
    for key in ("options", "jetstream"):
        if key in values and not isinstance(values[key], Mapping):
            found.append(Problem("jssync.E006", f"JSSYNC[{key!r}] must be a dict, got "
                                                   f"{type(values[key]).__name__}"))
            del values[key]
    options = dict(values.get("options", {}))
    for key in options:
        if key not in CONNECT_OPTIONS:
            found.append(Problem("jssync.E005", f"JSSYNC['options'] has an unknown connect option {key!r}",
                                    _suggest(key, CONNECT_OPTIONS) or "see jssync.connect() for the options"))
        elif key in values:
            found.append(Problem("jssync.E009", f"{key!r} is given twice: in JSSYNC['options'] and as "
                                                   f"{where[key]}", "keep one"))
        elif key in OPTION_TYPES and not OPTION_TYPES[key][1](options[key]):
            found.append(Problem("jssync.E006", f"JSSYNC['options'][{key!r}] must be {OPTION_TYPES[key][0]}, "
                                                   f"got {options[key]!r}"))
    for key in values.get("jetstream", {}):
        if key not in JETSTREAM_OPTIONS:
            found.append(Problem("jssync.E010", f"JSSYNC['jetstream'] has an unknown option {key!r}",
                                    _suggest(key, JETSTREAM_OPTIONS)
                                    or f"the options are {', '.join(JETSTREAM_OPTIONS)}"))
    if "servers" in values:
        found += _check_servers(values["servers"], where["servers"])
    if "creds" in values:
        found += _check_file(values["creds"], "creds file", where["creds"], "jssync.E004")
    seed = values.get("nkeys_seed")
    if seed is not None and not (isinstance(seed, str) and _looks_like_seed(seed)):
        found += _check_file(seed, "nkey seed file", where["nkeys_seed"], "jssync.E007")
    for key in ("name", "user", "password", "token"):
        if key in values and not isinstance(values[key], str):
            found.append(Problem("jssync.E006", f"{where[key]} must be a string, got "
                                                   f"{type(values[key]).__name__}"))
    if "tls" not in options:
        tls_files = {var: os.environ[var] for var in TLS_ENV if os.environ.get(var)}
        for var, path in tls_files.items():
            found += _check_file(path, "TLS file", f"${var}", "jssync.E008")
        if bool(tls_files.get("NATS_CERT")) != bool(tls_files.get("NATS_KEY")):
            found.append(Problem("jssync.E008", "a TLS client certificate needs its key: set both NATS_CERT "
                                                   "and NATS_KEY"))
        if tls_files:
            values["tls_files"] = tls_files
    return values, where, found


def problems() -> list[Problem]:
    """Everything wrong with the ``JSSYNC`` setting and the environment defaults (no I/O)."""
    return resolved()[2]


def connect_options() -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """``(servers, connect keywords, jetstream keywords)`` for this process's connection.

    Reads ``settings.JSSYNC`` and the environment; makes the TLS context of ``NATS_CA`` /
    ``NATS_CERT`` / ``NATS_KEY`` (no network I/O).

    Raises:
        jssync.ValidationError: the settings are wrong (the message is the first problem,
            with its check id, as ``manage.py check`` shows it).
    """
    values, _, found = resolved()
    if found:
        p = found[0]
        raise ValidationError(f"{p.msg} ({p.id}{'; ' + p.hint if p.hint else ''})")
    opts: dict[str, Any] = dict(values.get("options", {}))
    for key in ("creds", "user", "password", "token", "nkeys_seed", "name"):
        if key in values:
            opts[key] = values[key]
    opts.setdefault("name", f"django-{os.getpid()}")
    tls_files = values.get("tls_files")
    if tls_files:
        try:
            ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=tls_files.get("NATS_CA"))
            if tls_files.get("NATS_CERT"):
                ctx.load_cert_chain(tls_files["NATS_CERT"], tls_files["NATS_KEY"])
        except (OSError, ssl.SSLError) as exc:
            raise ValidationError(f"cannot use the TLS files {', '.join(f'${k}' for k in tls_files)}: {exc}") from None
        opts["tls"] = ctx
    return values.get("servers"), opts, dict(values.get("jetstream", {}))

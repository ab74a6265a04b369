"""Server URLs and the secrets in them: the server list, redacted URLs, secrets scrubbed from texts.

Split out of connection.py; only the connection uses these (``redact_url`` is also what it shows
in ``repr`` and error texts).
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import threading
import time
from collections.abc import Sequence
from urllib.parse import urlsplit, urlunsplit

from ..base.errors import NoServersError, ValidationError

DEFAULT_URL = "nats://127.0.0.1:4222"
#: the URL schemes nats-py connects with (a bare ``host`` or ``host:port`` means nats://)
SCHEMES = ("nats", "tls", "ws", "wss")
_SCHEMES_TEXT = "nats://, tls://, ws:// or wss:// (or a bare host:port)"

def redact_url(url: str) -> str:
    """Return ``url`` with any password (or token in the user part) replaced by ``***``."""
    try:
        parts = urlsplit(url if "://" in url else "nats://" + url)
    except ValueError:
        return "<invalid url>"
    if parts.username is None and parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]   # as written (a bad port is shown, not parsed)
    user = parts.username or ""
    cred = f"{user}:***" if parts.password is not None else "***"
    return urlunsplit((parts.scheme, f"{cred}@{host}", parts.path, parts.query, parts.fragment))


def _is_local(url: str) -> bool:
    """True if ``url`` names this machine (loopback or localhost)."""
    try:
        host = urlsplit(url if "://" in url else "nats://" + url).hostname or ""
    except ValueError:
        return False
    return host in ("localhost", "::1") or host.startswith("127.")


_SEED = re.compile(r"^S[UAONCPX][A-Z2-7]{56}\Z")


def _looks_like_seed(value: str) -> bool:
    """True if ``value`` has the shape of an nkey seed (``S`` + type + base32, 58 characters)."""
    return bool(_SEED.match(value.strip()))


_SEED_IN_TEXT = re.compile(r"\bS[UAONCPX][A-Z2-7]{56}\b")
_JWT_IN_TEXT = re.compile(r"\beyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")


def _check_secret_file(path: str, what: str, need_jwt: bool) -> None:
    """Raise ``ValueError`` naming ``path`` (never its content) unless it holds a seed (and a JWT)."""
    why = ""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(1 << 20)
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
    if why:
        raise ValidationError(f"cannot read the {what} {path!r}: {why}")
    if need_jwt and not _JWT_IN_TEXT.search(text):
        raise ValidationError(f"the {what} {path!r} holds no user JWT")
    if not _SEED_IN_TEXT.search(text):
        raise ValidationError(f"the {what} {path!r} holds no nkey seed")


def _scrub(text: str, secrets: Sequence[str]) -> str:
    """Replace every occurrence of each secret in ``text`` with ``***``."""
    for secret in secrets:
        if secret and len(secret) >= 3:
            text = text.replace(secret, "***")
    return text


def _url_secrets(url: str) -> list[str]:
    """The password, or the token (a user part without password), in ``url``."""
    try:
        parts = urlsplit(url if "://" in url else "nats://" + url)
        user, password = parts.username, parts.password
    except ValueError:
        return []
    if password is not None:
        return [password]
    return [user] if user else []


def _split_servers(servers: str | Sequence[str] | None) -> list[str]:
    if servers is None:
        servers = os.environ.get("NATS_URL") or DEFAULT_URL
    if isinstance(servers, str):
        urls = [s.strip() for s in servers.split(",") if s.strip()]
    else:
        urls = [str(s).strip() for s in servers if str(s).strip()]
    if not urls:
        raise ValidationError("no server URL given")
    return [_check_url(u) for u in urls]


def _check_url(url: str) -> str:
    """``url`` with its scheme in lower case; refuses a scheme nats-py cannot connect with.

    Raises:
        jssync.ValidationError: naming the URL (password redacted) and the schemes accepted.
    """
    if "://" in url:
        scheme, rest = url.split("://", 1)
        if scheme.lower() not in SCHEMES:
            raise ValidationError(f"server URL {redact_url(url)!r} has the scheme {scheme!r}: "
                                  f"jssync connects with {_SCHEMES_TEXT}")
        url = f"{scheme.lower()}://{rest}"
    elif "/" in url:
        raise ValidationError(f"invalid server URL {redact_url(url)!r}: write it as nats://host:port "
                              f"(jssync connects with {_SCHEMES_TEXT})")
    _check_host_port(url)
    return url


def _check_host_port(url: str) -> None:
    """Refuse a URL whose host is missing or malformed, or whose port is not a number in 1..65535.

    Raises:
        jssync.ValidationError: naming the URL (password redacted) and what is wrong with it.
    """
    shown = redact_url(url) if "@" in url else url
    try:
        parts = urlsplit(url if "://" in url else "nats://" + url)
        host = parts.hostname
    except ValueError as exc:  # an unclosed [IPv6 bracket, ...
        raise ValidationError(f"invalid server URL {shown!r}: {exc}") from None
    if not host:
        raise ValidationError(f"invalid server URL {shown!r}: no host (write it as nats://host:port)")
    if any(c.isspace() for c in host):
        raise ValidationError(f"invalid server URL {shown!r}: the host {host!r} has white space in it")
    port_text = parts.netloc.rpartition("@")[2]
    port_text = port_text.rpartition("]")[2] if port_text.startswith("[") else port_text
    if ":" not in port_text:
        return
    port = port_text.rpartition(":")[2]
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValidationError(f"invalid server URL {shown!r}: the port {port!r} is not a number from 1 to 65535")


def _host(url: str) -> str:
    """The host name of ``url`` ('' when it has none)."""
    try:
        return urlsplit(url if "://" in url else "nats://" + url).hostname or ""
    except ValueError:
        return ""


def check_resolvable(urls: Sequence[str], timeout: float | None) -> None:
    """Raise :class:`jssync.NoServersError` when no host of ``urls`` has an address.

    Only a definite "no such name" answer from the resolver counts; an IP address or
    ``localhost`` always counts as resolvable, and a resolver that does not answer within
    ``timeout`` (at most 5 s; waited for in 0.1 s slices on a daemon thread) leaves the
    question to the connect itself.
    """
    hosts = [_host(u) for u in urls]
    for h in hosts:
        if not h or h == "localhost":
            return
        try:
            ipaddress.ip_address(h)
            return
        except ValueError:
            pass
    missing: dict[str, str] = {}
    done = threading.Event()

    def resolve() -> None:
        for h in dict.fromkeys(hosts):
            try:
                socket.getaddrinfo(h, None)
            except socket.gaierror as exc:
                if exc.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)):
                    missing[h] = exc.strerror or "unknown host"
                    continue
            except (OSError, UnicodeError):
                pass
            return
        done.set()

    t = threading.Thread(target=resolve, name="jssync-resolve", daemon=True)
    t.start()
    end = time.monotonic() + min(5.0, timeout if timeout is not None else 5.0)
    while not done.is_set() and t.is_alive() and time.monotonic() < end:
        t.join(0.1)
    if done.is_set():
        names = ", ".join(repr(h) for h in missing)
        why = next(iter(missing.values()))
        raise NoServersError(f"cannot resolve the server host {names} ({why}): check the URL "
                             f"{', '.join(redact_url(u) for u in urls)}")

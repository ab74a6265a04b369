"""A connection's options and credentials: checked before any thread starts, and the texts
that name them without a secret.

:func:`check_options` turns ``connect()``'s keywords into :class:`Options` (the server
list, the credentials to scrub from every text, nats-py's connect keywords) or raises a
clear error naming the option; :func:`auth_method`, :func:`connect_failure` and
:func:`refused_error` say how a failed first connect went. Pure, apart from reading the
creds and seed files named; no network (``urls.check_resolvable`` is the connection's
next step).
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Sequence
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from ..base.deadline import check_setting
from ..base.errors import AuthorizationError, NoServersError, TimeoutError, ValidationError
from ..base.validate import MAX_I64, check_int, check_number
from .urls import _check_secret_file, _is_local, _looks_like_seed, _scrub, _split_servers, _url_secrets, redact_url


class Options(NamedTuple):
    """What :func:`check_options` made of the keywords."""

    urls: list[str]  #: the server URLs, each checked
    secrets: tuple[str, ...]  #: credentials to scrub from error texts and log lines
    nats: dict[str, Any]  #: nats-py's ``connect`` keywords (without the callbacks)


def check_options(
    servers: str | Sequence[str] | None, *, name: str | None, timeout: float, user: str | None,
    password: str | None, token: str | None, creds: str | os.PathLike[str] | None,
    nkeys_seed: str | os.PathLike[str] | None, tls: ssl.SSLContext | None, tls_hostname: str | None,
    max_reconnect_attempts: int, reconnect_time_wait: float, ping_interval: float, max_outstanding_pings: int,
    no_echo: bool, inbox_prefix: str, reconnect_buffer_size: int | None, callback_workers: int = 4,
) -> Options:
    """Check ``connect()``'s options; return them as :class:`Options`.

    Raises:
        jssync.ValidationError (a ValueError): a bad server URL, ``timeout``,
            ``reconnect_buffer_size``, ``max_reconnect_attempts`` (an int, -1 for no limit),
            ``reconnect_time_wait`` (seconds >= 0), ``ping_interval`` (seconds > 0),
            ``max_outstanding_pings`` or ``callback_workers`` (ints >= 1), ``nkeys_seed`` or
            ``creds`` (the message names the option or file, never a credential).
        TypeError: ``tls`` is not an ``ssl.SSLContext``.
    """
    urls = _split_servers(servers)
    if reconnect_buffer_size is not None and (
            not isinstance(reconnect_buffer_size, int) or isinstance(reconnect_buffer_size, bool)
            or reconnect_buffer_size < 0):
        raise ValidationError(f"reconnect_buffer_size must be None or an int >= 0, got {reconnect_buffer_size!r}")
    if timeout is not None:
        timeout = check_setting(timeout, "timeout")
    check_int(max_reconnect_attempts, "max_reconnect_attempts", minimum=-1, maximum=MAX_I64, open_ended=True)
    check_number(reconnect_time_wait, "reconnect_time_wait", above=None, minimum=0.0, unit="seconds")
    check_number(ping_interval, "ping_interval", unit="seconds")
    check_int(max_outstanding_pings, "max_outstanding_pings", maximum=MAX_I64, open_ended=True)
    check_int(callback_workers, "callback_workers", maximum=MAX_I64, open_ended=True)
    if tls is not None and not isinstance(tls, ssl.SSLContext):
        raise TypeError("tls must be an ssl.SSLContext")
    secrets = [password or "", token or ""]
    secrets += [p for u in urls for p in _url_secrets(u)]
    seed_opt: tuple[str, str] | None = None
    if nkeys_seed is not None:
        seed = os.fspath(nkeys_seed)
        if _looks_like_seed(seed):
            seed_opt = ("nkeys_seed_str", seed.strip())
            secrets.append(seed.strip())
        elif os.path.isfile(seed):
            _check_secret_file(seed, "nkeys_seed file", need_jwt=False)
            seed_opt = ("nkeys_seed", seed)
        else:
            # never echo the value: it may be a mistyped seed
            raise ValidationError("nkeys_seed is neither an nkey seed (S...) nor the path of a readable seed file")
    if creds is not None:
        _check_secret_file(os.fspath(creds), "creds file", need_jwt=True)
    opts: dict[str, Any] = dict(
        servers=urls,
        name=name,
        connect_timeout=max(1, int(timeout or 2)),
        reconnect_time_wait=reconnect_time_wait,
        max_reconnect_attempts=max_reconnect_attempts,
        ping_interval=ping_interval,
        max_outstanding_pings=max_outstanding_pings,
        no_echo=no_echo,
        inbox_prefix=inbox_prefix,
        allow_reconnect=True,
    )
    if user is not None:
        opts["user"] = user
    if password is not None:
        opts["password"] = password
    if token is not None:
        opts["token"] = token
    if creds is not None:
        opts["user_credentials"] = os.fspath(creds)
    if seed_opt is not None:
        opts[seed_opt[0]] = seed_opt[1]
    if tls is not None:
        opts["tls"] = tls
    if tls_hostname is not None:
        opts["tls_hostname"] = tls_hostname
    return Options(urls, tuple(s for s in secrets if s), opts)


def describe(exc: BaseException, secrets: Sequence[str]) -> str:
    """``Type: message`` of ``exc`` with every one of ``secrets`` scrubbed."""
    text = str(exc) or type(exc).__name__
    return _scrub(f"{type(exc).__name__}: {text}", secrets)


def auth_method(opts: dict[str, Any], urls: Sequence[str]) -> str:
    """How a connection with nats-py keywords ``opts`` authenticates, without any secret (for error texts)."""
    o = opts
    if "user_credentials" in o:
        return f"the creds file {o['user_credentials']!r}"
    if "nkeys_seed" in o:
        return f"the nkey seed file {o['nkeys_seed']!r}"
    if "nkeys_seed_str" in o:
        return "an nkey seed"
    if "token" in o:
        return "a token"
    if "user" in o:
        return f"user {o['user']!r} with a password" if "password" in o else f"user {o['user']!r}"
    for u in urls:
        parts = urlsplit(u if "://" in u else "nats://" + u)
        if parts.password is not None:
            return f"user {parts.username!r} with a password (from the URL)"
        if parts.username:
            return "a token (from the URL)"
    return "no credentials (the server requires some)"


def refused_error(urls: Sequence[str]) -> NoServersError:
    """Every server refused the connection (nothing listens there)."""
    text = ", ".join(redact_url(u) for u in urls)
    hint = ""
    if all(_is_local(u) for u in urls):
        hint = "; is a server running there? `jssync server` starts one (JetStream on 127.0.0.1:4222)"
    return NoServersError(f"could not connect to {text}: connection refused{hint}")


def connect_failure(exc: BaseException, timeout: float | None, opts: Options, last: BaseException | None,
                    failed_url: str | None) -> BaseException:
    """The error a failed first connect raises: what failed, where, and what to try.

    ``last``: the last connect attempt's error; ``failed_url``: where the authorization failed.
    """
    urls = ", ".join(redact_url(u) for u in opts.urls)
    if isinstance(exc, TimeoutError):
        why = f" (last error: {describe(last, opts.secrets)})" if last is not None else ""
        return NoServersError(f"could not connect to {urls} within {timeout}s{why}")
    if isinstance(exc, AuthorizationError):
        where = redact_url(failed_url) if failed_url else urls
        said = _scrub(str(exc.__cause__ or exc), opts.secrets).removeprefix("nats: ")
        new = AuthorizationError(f"authorization failed at {where} using {auth_method(opts.nats, opts.urls)}: "
                                 f"the server said {said}")
        new.__cause__ = exc.__cause__
        return new
    if isinstance(exc, NoServersError):
        exc.__context__ = exc.__cause__ = None  # "connection refused" says it all
    return exc

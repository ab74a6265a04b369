"""The transport options: their defaults and their checks."""

from __future__ import annotations

import re
from typing import Any

from ..base.errors import ValidationError

#: transport options and their defaults
DEFAULT_OPTIONS: dict[str, Any] = {
    "subject_prefix": "kombu",
    "storage": "file",
    "replicas": 1,
    "ack_wait": 1800.0,
    "max_deliver": -1,
    "max_ack_pending": -1,
    "fetch_batch": 100,
    "keepalive": True,
    "polling_interval": 0.1,
    "expires_check": 10.0,
    "connect_options": {},
    "dead_letter_queue": None,
}

_PREFIX_RE = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")


def options(raw: dict[str, Any]) -> dict[str, Any]:
    """The transport options with defaults filled in, checked; raises ValidationError naming a bad one."""
    opts = dict(DEFAULT_OPTIONS)
    opts.update({k: v for k, v in raw.items() if k in DEFAULT_OPTIONS})
    prefix = opts["subject_prefix"]
    if not isinstance(prefix, str) or not _PREFIX_RE.match(prefix):
        raise ValidationError(f"subject_prefix {prefix!r}: need subject tokens of A-Z a-z 0-9 _ - joined by dots")
    if opts["storage"] not in ("file", "memory"):
        raise ValidationError(f"storage {opts['storage']!r}: need 'file' or 'memory'")
    for name in ("replicas", "fetch_batch"):
        if not isinstance(opts[name], int) or isinstance(opts[name], bool) or opts[name] < 1:
            raise ValidationError(f"{name} {opts[name]!r}: need an int >= 1")
    for name in ("max_deliver", "max_ack_pending"):
        if not isinstance(opts[name], int) or isinstance(opts[name], bool) or opts[name] == 0 or opts[name] < -1:
            raise ValidationError(f"{name} {opts[name]!r}: need -1 (no limit) or an int >= 1")
    for name in ("ack_wait", "polling_interval", "expires_check"):
        value = opts[name]
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise ValidationError(f"{name} {value!r}: need seconds > 0")
    if not isinstance(opts["connect_options"], dict):
        raise ValidationError(f"connect_options {opts['connect_options']!r}: need a dict of jssync.connect options")
    dlq = opts["dead_letter_queue"]
    if dlq is not None and (not isinstance(dlq, str) or not dlq):
        raise ValidationError(f"dead_letter_queue {dlq!r}: need a queue name (or None: no dead-letter queue)")
    return opts

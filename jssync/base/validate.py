"""Checks of what a caller hands over before anything is sent: subjects, headers, payloads.

Split out of core/connection.py so every layer can check its input without importing the
connection: ``validate_subject``, ``validate_headers``, ``_check_data``, and the header block's
encoding and size (``_encode_headers``, ``_headers_size``); ``subjects_overlap`` says whether two
subject filters can match a common subject; ``check_int`` is the one range check of the numbers
the server reads as Go integers (``seq`` is a uint64, ``batch``, ``max_bytes`` an int64).
"""

from __future__ import annotations

import re
from typing import Any

from .errors import BadHeaderError, BadSubjectError, ValidationError

_SUBJECT_BAD = re.compile(r"[\s]")
_HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")


_valid_subjects: dict[str, bool] = {}

#: The largest uint64 (a stream sequence) and int64 (batch, max_bytes, counts) the server reads.
MAX_U64 = 2**64 - 1
MAX_I64 = 2**63 - 1


def check_int(value: Any, what: str, *, minimum: int = 1, maximum: int = MAX_U64) -> int:
    """Return ``value`` if it is an int from ``minimum`` to ``maximum``; else raise.

    Pure. The one range check for integers sent to the server, which reads them as Go
    integers: a stream sequence is a uint64 (1 .. 2**64-1, the default range), a batch
    or byte count an int64 (pass ``maximum=MAX_I64``). Outside that range the server
    answers only "Malformed Request", naming nothing.

    Raises:
        jssync.ValidationError: a bool, not an int, or out of range; the message names
            ``what``, the allowed range and the value (nothing was sent).
    """
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise ValidationError(f"{what} must be an int from {minimum} to {maximum}, got {value!r}")
    return value


def validate_subject(subject: str, what: str = "subject", wildcards: bool = True) -> None:
    """Raise :class:`jssync.BadSubjectError` naming ``subject`` if it is not a valid subject.

    Valid subjects are remembered (a bounded cache), so repeated publishes to the same
    subject cost one dict look-up.
    """
    ok = _valid_subjects.get(subject)
    if ok is not None and (ok or wildcards):
        return
    _check_subject(subject, what, wildcards)
    if len(_valid_subjects) > 8192:
        _valid_subjects.clear()
    toks = subject.split(".")
    has_wc = "*" in toks or toks[-1] == ">"
    _valid_subjects[subject] = not has_wc


def _check_subject(subject: str, what: str, wildcards: bool) -> None:
    if not isinstance(subject, str):
        raise BadSubjectError(f"{what} must be a str, got {type(subject).__name__}")
    if not subject or _SUBJECT_BAD.search(subject) or subject.startswith(".") or subject.endswith("."):
        raise BadSubjectError(f"invalid {what}: {subject!r}")
    if ".." in subject:
        raise BadSubjectError(f"invalid {what} (empty token): {subject!r}")
    if not wildcards:
        for tok in subject.split("."):
            if tok in ("*", ">"):
                raise BadSubjectError(f"{what} may not contain wildcards: {subject!r}")
    else:
        # as in nats-server: '>' is a wildcard only as a whole token, and then the last one;
        # inside a longer token it is a literal character
        toks = subject.split(".")
        for i, tok in enumerate(toks):
            if tok == ">" and i != len(toks) - 1:
                raise BadSubjectError(f"invalid {what} ('>' must be the last token): {subject!r}")


def subjects_overlap(a: str, b: str) -> bool:
    """True when some subject matches both filters ``a`` and ``b`` (wildcards ``*`` and ``>``).

    Pure, no I/O; both are taken as valid subjects (see :func:`validate_subject`). ``*``
    matches one token, ``>`` (the last token) one or more: ``ORDERS.*.x`` and ``ORDERS.eu.>``
    overlap (``ORDERS.eu.x``), ``ORDERS.>`` and ``ORDERS`` do not.
    """
    ta = a.split(".")
    tb = b.split(".")
    for i in range(min(len(ta), len(tb))):
        x, y = ta[i], tb[i]
        if x == ">" or y == ">":
            return True
        if x != y and x != "*" and y != "*":
            return False
    return len(ta) == len(tb)


def validate_headers(headers: dict[str, str] | None) -> None:
    """Raise :class:`jssync.BadHeaderError` naming a bad header name or value (CR/LF, etc.)."""
    if headers is None:
        return
    if not isinstance(headers, dict):
        raise BadHeaderError(f"headers must be a dict, got {type(headers).__name__}")
    for k, v in headers.items():
        if not isinstance(k, str) or not _HEADER_NAME.match(k):
            raise BadHeaderError(f"invalid header name: {k!r}")
        if not isinstance(v, str):
            raise BadHeaderError(f"header {k!r} value must be a str, got {type(v).__name__}")
        if "\r" in v or "\n" in v:
            raise BadHeaderError(f"header {k!r} value contains CR or LF: {v!r}")


def _encode_headers(headers: dict[str, str]) -> bytes:
    """Encode a header block (names and values were validated at publish time)."""
    lines = ["NATS/1.0\r\n"]
    for k, v in headers.items():
        lines.append(f"{k}: {v}\r\n")
    lines.append("\r\n")
    return "".join(lines).encode()


def _headers_size(headers: dict[str, str]) -> int:
    """Bytes of the encoded header block: the server counts them in max_payload."""
    return 12 + sum(len(k.encode()) + len(v.encode()) + 4 for k, v in headers.items())


def _check_data(data: Any) -> bytes:
    if isinstance(data, bytes):
        return data
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    raise TypeError(f"data must be bytes, got {type(data).__name__}")

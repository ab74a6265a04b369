"""Checks of what a caller hands over before anything is sent: subjects, headers, payloads.

Split out of core/connection.py so every layer can check its input without importing the
connection: ``validate_subject``, ``validate_headers``, ``_check_data``, and the header block's
encoding and size (``_encode_headers``, ``_headers_size``); ``subjects_overlap`` says whether two
subject filters can match a common subject; ``check_int`` is the one range check of the numbers
the server reads as Go integers (``seq`` is a uint64, ``batch``, ``max_bytes`` an int64).
"""

from __future__ import annotations

import argparse
import math
import re
from typing import Any

from .errors import BadHeaderError, BadSubjectError, ValidationError

_SUBJECT_BAD = re.compile(r"[\s]")
_HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")


_valid_subjects: dict[str, bool] = {}

#: The largest uint64 (a stream sequence) and int64 (batch, max_bytes, counts) the server reads.
MAX_U64 = 2**64 - 1
MAX_I64 = 2**63 - 1


def check_int(value: Any, what: str, *, minimum: int = 1, maximum: int = MAX_U64, open_ended: bool = False) -> int:
    """Return ``value`` if it is an int from ``minimum`` to ``maximum``; else raise.

    Pure. The one check of every integer option of jssync (counts, sequences, limits,
    priorities, partitions, revisions), and the range check for integers sent to the
    server, which reads them as Go integers: a stream sequence is a uint64 (1 .. 2**64-1,
    the default range), a batch or byte count an int64 (pass ``maximum=MAX_I64``). Outside
    that range the server answers only "Malformed Request", naming nothing.
    ``open_ended=True`` words the message as ``>= minimum`` (for options whose upper bound
    is only the wire type's) unless the value is over ``maximum``.

    Raises:
        jssync.ValidationError: a bool, not an int, or out of range; the message names
            ``what`` (the option), the allowed range and the value (nothing was sent).
    """
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise ValidationError(_int_text(value, what, minimum, maximum, open_ended, ""))
    return value


def positive_int(text: str) -> int:
    """An argparse ``type`` (the CLI's and the Django management commands'): a whole number
    >= 1; raises ``argparse.ArgumentTypeError`` naming the text otherwise."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return n


def check_optional_int(value: Any, what: str, *, minimum: int = 1, maximum: int = MAX_U64,
                       open_ended: bool = False) -> int | None:
    """:func:`check_int`, with None passed through (an option left unset; the message says so)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise ValidationError(_int_text(value, what, minimum, maximum, open_ended, " or None"))
    return value


def _int_text(value: Any, what: str, minimum: int, maximum: int, open_ended: bool, tail: str) -> str:
    over = isinstance(value, int) and not isinstance(value, bool) and value > maximum
    bound = f">= {minimum}" if open_ended and not over else f"from {minimum} to {maximum}"
    return f"{what} must be an int {bound}{tail}, got {value!r}"


def check_number(value: Any, what: str, *, above: float | None = 0.0, minimum: float | None = None,
                 unit: str = "") -> float:
    """Return ``value`` as a float if it is a finite number (not a bool) over ``above`` (or at
    least ``minimum``). The one check of plain number options (seconds given as a float:
    ``max_wait``, ``expires``, ``retry_wait``...). Pure.

    Raises:
        jssync.ValidationError: naming ``what`` (the option), the bound and the value.
    """
    if not _number_ok(value, above, minimum):
        raise ValidationError(_number_text(value, what, above, minimum, unit, ""))
    return float(value)


def check_optional_number(value: Any, what: str, *, above: float | None = 0.0, minimum: float | None = None,
                          unit: str = "") -> float | None:
    """:func:`check_number`, with None passed through (the message says so)."""
    if value is None:
        return None
    if not _number_ok(value, above, minimum):
        raise ValidationError(_number_text(value, what, above, minimum, unit, " or None"))
    return float(value)


def _number_ok(value: Any, above: float | None, minimum: float | None) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return False
    return (above is None or value > above) and (minimum is None or value >= minimum)


def _number_text(value: Any, what: str, above: float | None, minimum: float | None, unit: str, tail: str) -> str:
    bound = f" > {above:g}" if above is not None else f" >= {minimum:g}" if minimum is not None else ""
    kind = f"a number of {unit}" if unit else "a finite number"
    return f"{what} must be {kind}{bound}{tail}, got {value!r}"


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

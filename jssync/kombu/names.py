"""Queue, exchange and routing-key names as subject, stream-name and key tokens."""

from __future__ import annotations

SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")


def escape(name: str) -> str:
    """``name`` as one subject, stream-name and key token: ``[A-Za-z0-9-]`` kept, every other
    byte (``_`` too) written ``_xx``; ``""`` is ``"_"``. Different names give different tokens."""
    if not name:
        return "_"
    out = []
    for ch in name:
        if ch in SAFE:
            out.append(ch)
        else:
            out.extend(f"_{b:02x}" for b in ch.encode("utf-8"))
    return "".join(out)


def unescape(token: str) -> str:
    """The name :func:`escape` made ``token`` from."""
    if token == "_":
        return ""
    raw = bytearray()
    i = 0
    while i < len(token):
        if token[i] == "_":
            raw.append(int(token[i + 1:i + 3], 16))
            i += 3
        else:
            raw.extend(token[i].encode("ascii"))
            i += 1
    return raw.decode("utf-8")

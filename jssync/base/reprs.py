"""Notebook summaries: a short FIELD / VALUE table as HTML (``_repr_html_``) and as text (``_repr_pretty_``).

Pure: the objects give their rows (``summary_rows`` of streams, consumers, infos, messages, in the
layers that know them); this module only formats them, like the CLI's ``stream info`` table. A row's
value is shown as text, cut to :data:`MAX_VALUE` characters; nothing here does I/O.

nats-py's ``StreamInfo`` / ``ConsumerInfo`` dataclasses are not jssync's: their summaries are given
to IPython by registration (:func:`register_ipython`, by type name, when IPython runs), not by
changing nats-py's classes.
"""

from __future__ import annotations

import datetime as _dt
import html
import sys
from collections.abc import Callable, Sequence
from typing import Any

#: the longest value shown in a cell (longer ones end in "...")
MAX_VALUE = 80

Rows = Sequence[tuple[str, object]]


def text_of(value: object) -> str:
    """``value`` as a cell's text: enums by value, lists comma-separated, None as ``-``, cut to MAX_VALUE."""
    if value is None or value == "" or value == []:
        text = "-"
    elif isinstance(value, list | tuple | set | frozenset):
        text = ", ".join(text_of(v) for v in value)
    elif hasattr(value, "value") and not isinstance(value, int | float | str | bytes):
        text = str(value.value)  # an Enum
    elif isinstance(value, bool):
        text = "yes" if value else "no"
    elif isinstance(value, int):
        text = f"{value:,}"
    elif isinstance(value, _dt.datetime):
        text = value.isoformat(sep=" ", timespec="seconds")
    else:
        text = str(value)
    return text if len(text) <= MAX_VALUE else text[:MAX_VALUE - 3] + "..."


def size_text(n: int | None) -> str:
    """Bytes as the CLI shows them: ``-`` for none or unlimited, else B / KiB / MiB / GiB."""
    if n is None or n < 0:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover - the loop returns


def seconds_text(s: float | None) -> str:
    """A duration in seconds as ``1h30m``, ``45s``, ``0.5s``; ``-`` for none or zero (unlimited)."""
    if not s:
        return "-"
    if s < 60:
        return f"{s:g}s"
    whole = int(s)
    h, rest = divmod(whole, 3600)
    m, sec = divmod(rest, 60)
    return "".join(f"{v}{u}" for v, u in ((h, "h"), (m, "m"), (sec, "s")) if v) or "0s"


def limit_text(n: int | None) -> str:
    """A count limit: ``-`` for none or unlimited (-1), else the number."""
    return "-" if n is None or n < 0 else f"{n:,}"


def html_table(title: str, rows: Rows) -> str:
    """A small two-column HTML table headed by ``title`` (every text escaped)."""
    cells = "".join(f"<tr><th style=\"text-align:left\">{html.escape(name)}</th>"
                    f"<td style=\"text-align:left\">{html.escape(text_of(value))}</td></tr>"
                    for name, value in rows)
    return f"<table><caption style=\"text-align:left\"><b>{html.escape(title)}</b></caption>{cells}</table>"


def pretty_text(title: str, rows: Rows) -> str:
    """``title`` then one ``field  value`` line per row, the values aligned."""
    width = max((len(name) for name, _ in rows), default=0)
    return "\n".join([title, *(f"  {name.ljust(width)}  {text_of(value)}" for name, value in rows)])


class SummaryRepr:
    """Mixin: ``_repr_html_`` and ``_repr_pretty_`` from the class's ``_summary()`` (title, rows).

    A class with a ``__repr__`` of its own must also say ``_repr_pretty_ = SummaryRepr._repr_pretty_``:
    IPython's printer uses the first of the two it finds along the MRO.
    """

    __slots__ = ()

    def _summary(self) -> tuple[str, Rows]:  # pragma: no cover - each class gives its own
        raise NotImplementedError

    def _repr_html_(self) -> str:
        """The summary as an HTML table (Jupyter shows it for the object; no I/O)."""
        return html_table(*self._summary())

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        """The summary as aligned text (IPython's console and ``pretty``; no I/O)."""
        p.text(repr(self) if cycle else pretty_text(*self._summary()))


#: (module, type name) -> the summary of one of its instances, for types that are not jssync's
_FOREIGN: dict[tuple[str, str], Callable[[Any], tuple[str, Rows]]] = {}


def add_foreign(module: str, name: str, summary: Callable[[Any], tuple[str, Rows]]) -> None:
    """Give the summary of another package's type (registered with IPython when it runs)."""
    _FOREIGN[(module, name)] = summary
    register_ipython()


def register_ipython(shell: Any = None) -> bool:
    """Register the summaries of the foreign types with IPython's HTML and text formatters.

    ``shell`` defaults to the running IPython (none: nothing to do, returns False). Registration is
    by module and type name, so nothing is imported; safe to call again.
    """
    if shell is None:
        ipython = sys.modules.get("IPython")
        get = getattr(ipython, "get_ipython", None)
        shell = get() if get is not None else None
    formatters = getattr(getattr(shell, "display_formatter", None), "formatters", None)
    if not formatters:
        return False
    for (module, name), summary in _FOREIGN.items():
        formatters["text/html"].for_type_by_name(module, name, _html_of(summary))
        formatters["text/plain"].for_type_by_name(module, name, _pretty_of(summary))
    return True


def _html_of(summary: Callable[[Any], tuple[str, Rows]]) -> Callable[[Any], str]:
    return lambda obj: html_table(*summary(obj))


def _pretty_of(summary: Callable[[Any], tuple[str, Rows]]) -> Callable[[Any, Any, bool], None]:
    def pretty(obj: Any, p: Any, cycle: bool) -> None:
        p.text("..." if cycle else pretty_text(*summary(obj)))

    return pretty

"""mkdocs hooks: keep --strict meaningful while allowing free-form "Raises:" sections.

Our docstrings list several exceptions per line ("jssync.A, jssync.B: when ..."), which griffe's
Google parser reports as a warning; every other warning still fails the strict build.
"""

from __future__ import annotations

import logging


class _DropRaisesPairWarnings(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "Failed to get 'exception: description' pair" not in record.getMessage()


def on_startup(command: str, dirty: bool) -> None:
    for name in ("griffe", "mkdocs.plugins.griffe", "mkdocs.plugins.mkdocstrings"):
        logging.getLogger(name).addFilter(_DropRaisesPairWarnings())
    for h in logging.getLogger("mkdocs").handlers:
        h.addFilter(_DropRaisesPairWarnings())

"""The jssync command's parser, without a server: what its usage lines show."""

from __future__ import annotations

import argparse
import gc

import pytest

from jssync import cli

pytestmark = pytest.mark.timeout(60)


def _command(parser: argparse.ArgumentParser, *names: str) -> argparse.ArgumentParser:
    for name in names:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return parser


def test_a_commands_usage_keeps_its_own_options_when_parsers_are_built_again():
    """Each build of the parser (each main() in one process: a notebook, the in-process CLI
    tests) shows the command's own options in its usage line and leaves the global ones out;
    the global options were once remembered by id(), and a dropped parser's ids came back as
    other commands' own options (`stream add` lost `--max-age` from its usage).

    Every object alive before the loop is frozen (``gc.freeze``): each ``gc.collect()`` then
    frees the dropped parser's cycles without walking the whole session's heap (in a full run
    that heap holds Spark, Django and hypothesis, and 40 full collections took 17 s)."""
    gc.freeze()
    try:
        for _ in range(40):
            usage = _command(cli.build_parser(), "stream", "add").format_usage()
            assert "--max-age" in usage and "name" in usage, usage
            for flag in ("--tlscert", "--creds", "--connect-timeout", "--password"):
                assert flag not in usage, usage
            gc.collect()
    finally:
        gc.unfreeze()

"""The parser and the entry point: each command group (one module each) registers its own
sub-parser; ``main`` runs the command chosen."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from . import bench, consumer, kv, local, micro, obj, pubsub, stream
from .common import Parser, add_global_options, resolve_settings, version_text

#: the command groups, in the order ``jssync --help`` lists them
GROUPS = (local, stream, consumer, pubsub, micro, kv, obj, bench)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="jssync", description="jssync: NATS JetStream from the command line",
        epilog="Settings come from the flag, else the environment (NATS_URL, NATS_USER, ...), else the "
               "nats CLI context (--context NAME, else the selected one).")
    p.add_argument("--version", action="version", version=version_text(),
                   help="print jssync's version (and nats-py's, Python's) and exit")
    add_global_options(p)
    sub = p.add_subparsers(dest="command", required=True)

    for group in GROUPS:
        group.register(sub)
    return p


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse like the nats CLI: global options anywhere, optional arguments also after the options."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # argparse fills an optional positional (pub's DATA) with nothing when an option follows the required
    # ones (`pub SUBJ --js hello`): hand such left-over words to it.
    for name, convert in getattr(args, "_spill", ()):
        if extra and getattr(args, name) is None and not extra[0].startswith("-"):
            word = extra.pop(0)
            try:
                setattr(args, name, convert(word))
            except ValueError:
                parser.error(f"argument {name}: invalid {convert.__name__} value: {word!r}")
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (errors print one line on stderr)."""
    args = parse_args(argv)
    import jssync

    try:
        resolve_settings(args, connects=not getattr(args, "_local", False))
        logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                            format="%(levelname)s %(name)s: %(message)s")
        rc: int = args.func(args)
    except (ValueError, TypeError) as exc:  # bad input, jssync.ValidationError too: a usage error
        sys.stderr.write(f"jssync: {exc}\n")
        return 2
    except jssync.Error as exc:
        sys.stderr.write(f"jssync: {type(exc).__name__}: {exc}\n")
        return 1
    except OSError as exc:
        sys.stderr.write(f"jssync: {exc}\n")
        return 1
    return rc

"""The ``jssync`` command line (also ``python -m jssync``).

Everyday jobs against a NATS server: streams, consumers, publish/subscribe/request, key-value,
object stores, micro services, benchmarks, a local server, and the demo. Tables for people,
``--json`` for scripts. Options, environment variables and context files follow the ``nats``
CLI (docs/cli.md).

One module per command group, each registering its own sub-parser (``register(sub)``):
stream, consumer, pubsub (pub, sub, req), micro, kv, obj, bench, local (demo, server); common
holds what they share (output, settings, connecting); app builds the parser and runs ``main``.
"""

from __future__ import annotations

from .app import build_parser, main, parse_args

__all__ = ["build_parser", "main", "parse_args"]

"""Write docs/api.md: the public API's signatures and docstrings as plain Markdown.

The site's reference page (docs/reference.md) is rendered by mkdocstrings when the site is
built; docs/api.md is the same text, checked in, readable on GitHub or in an editor.
tests/integration/test_errors_typing_and_tracebacks.py fails when it is out of date. Run:

    python3 tools/gen_api_md.py          # rewrite docs/api.md
    python3 tools/gen_api_md.py --check  # exit 1 if it is out of date
"""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "api.md"

#: (heading, dotted names) in the order of docs/reference.md
SECTIONS: list[tuple[str, list[str]]] = [
    ("Connecting and core NATS", ["jssync.connect", "jssync.Connection", "jssync.Subscription", "jssync.Msg"]),
    ("JetStream", ["jssync.JetStream", "jssync.Stream", "jssync.StoredMsg", "jssync.PubAck"]),
    ("Consuming", ["jssync.Consumer", "jssync.FetchResult", "jssync.ConsumeContext", "jssync.OrderedConsumer",
                   "jssync.OrderedConsumeContext", "jssync.JetStreamSubscription", "jssync.MsgMetadata",
                   "jssync.SequencePair"]),
    ("Direct Get, KV and object store", ["jssync.DirectBatch", "jssync.KeyValue", "jssync.Entry", "jssync.KeyWatcher",
                                         "jssync.CodecKeyValue", "jssync.CodecEntry", "jssync.CodecKeyWatcher",
                                         "jssync.ObjectStore", "jssync.ObjectResult", "jssync.ObjectWatcher"]),
    ("Partitioned streams", ["jssync.liftbridge.Client"]),
    ("Partitioned consumer groups", [
        "jssync.pcgroups.create_static", "jssync.pcgroups.static_consume", "jssync.pcgroups.create_elastic",
        "jssync.pcgroups.elastic_consume", "jssync.pcgroups.ConsumerGroupContext", "jssync.pcgroups.add_members",
        "jssync.pcgroups.delete_members", "jssync.pcgroups.set_member_mappings",
        "jssync.pcgroups.delete_member_mappings", "jssync.pcgroups.static_config", "jssync.pcgroups.elastic_config",
        "jssync.pcgroups.delete_static", "jssync.pcgroups.delete_elastic", "jssync.pcgroups.list_static",
        "jssync.pcgroups.list_elastic", "jssync.pcgroups.static_active_members",
        "jssync.pcgroups.elastic_active_members", "jssync.pcgroups.static_step_down",
        "jssync.pcgroups.elastic_step_down", "jssync.pcgroups.StaticConsumerGroupConfig",
        "jssync.pcgroups.ElasticConsumerGroupConfig", "jssync.pcgroups.PartitioningFilter",
        "jssync.pcgroups.MemberMapping", "jssync.pcgroups.balanced_assignment",
        "jssync.pcgroups.partition_filters"]),
    ("Spark", ["jssync.spark.register", "jssync.spark.activate"]),
]

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _resolve(dotted: str) -> Any:
    mod_name, _, attr = dotted.rpartition(".")
    __import__(mod_name)
    return getattr(sys.modules[mod_name], attr)


class _Text:
    """An annotation shown as written (``from __future__ import annotations`` keeps them as strings)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _plain(annotation: Any) -> Any:
    return _Text(annotation) if isinstance(annotation, str) else annotation


def _signature(obj: Any, name: str) -> str:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return f"{name}(...)"
    sig = sig.replace(parameters=[p.replace(annotation=_plain(p.annotation)) for p in sig.parameters.values()],
                      return_annotation=_plain(sig.return_annotation))
    return _ADDRESS.sub("", f"{name}{sig}")


#: a Sphinx cross-reference role in a docstring: :class:`Msg`, :meth:`~jssync.Stream.purge`, ...
_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|attr|exc|data|mod|obj|const):`(~?)([^`]+)`")


def _render_roles(text: str) -> str:
    """Each Sphinx role as Markdown code: :class:`X` -> `X`; a ~ keeps the last name only."""

    def code(m: re.Match[str]) -> str:
        name = "".join(m.group(2).split())
        return f"`{name.rpartition('.')[2] if m.group(1) else name}`"

    return _ROLE.sub(code, text)


def _doc(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    return _render_roles(doc.strip())


def _members(cls: type) -> list[tuple[str, Any]]:
    """The public members of ``cls``: its own, then those of the rooms it is made of (the JetStream
    context's: the subclasses of jetstream/apicalls.py's APIRoom), in method resolution order."""
    from jssync.jetstream.apicalls import APIRoom

    out, seen = [], set()
    for klass in cls.__mro__:
        if klass is not cls and not issubclass(klass, APIRoom):
            continue
        for name, member in klass.__dict__.items():
            if name in seen or (name.startswith("_") and name != "__iter__"):
                continue
            if isinstance(member, property | classmethod | staticmethod) or inspect.isfunction(member):
                seen.add(name)
                out.append((name, member))
    return out


def render() -> str:
    import jssync

    lines = [
        "# API reference (plain text)",
        "",
        "<!-- generated by tools/gen_api_md.py from the docstrings; do not edit by hand -->",
        "<!-- docs: no-run-page (signatures and docstrings: the code blocks are not programs) -->",
        "",
        "The public API's signatures and docstrings, readable without building the site",
        "([reference.md](reference.md) renders the same docstrings on the site). The exception",
        "tree is in [jetstream.md](jetstream.md#errors).",
        "",
    ]
    for heading, names in SECTIONS:
        lines += [f"## {heading}", ""]
        for dotted in names:
            obj = _resolve(dotted)
            short = dotted.removeprefix("jssync.")
            if inspect.isclass(obj):
                lines += [f"### `{dotted}`", "", "```python", f"class {_signature(obj, short)}", "```", ""]
                if _doc(obj):
                    lines += [_doc(obj), ""]
                for mname, member in _members(obj):
                    if isinstance(member, property):
                        lines += [f"#### `{short}.{mname}` (property)", ""]
                        target = member.fget
                    else:
                        target = getattr(obj, mname)
                        lines += [f"#### `{short}.{mname}`", "", "```python", _signature(target, mname), "```", ""]
                    if _doc(target):
                        lines += [_doc(target), ""]
            else:
                lines += [f"### `{dotted}`", "", "```python", _signature(obj, short), "```", ""]
                if _doc(obj):
                    lines += [_doc(obj), ""]
    lines += ["## Everything exported by `jssync`", "", ", ".join(f"`{n}`" for n in jssync.__all__), ""]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT.relative_to(ROOT)} is out of date: run python3 tools/gen_api_md.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))

"""The JetStream API level (ADR-44) and the features that need a newer server.

A JetStream server reports its API level in the ``$JS.API.INFO`` reply (``api.level``;
0 or absent before 2.11). It is read once per connection and JetStream API prefix (the
servers behind a domain or an imported API can be others), and again when the
connection is on another server. Calls that need a level check it before sending
anything and raise :class:`jssync.NotSupportedError` naming the feature and the
server version it needs.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING

from ..base.deadline import DEFAULT, Default
from ..base.errors import NotSupportedError

if TYPE_CHECKING:
    from nats.js import api

    from ..core.connection import Connection
    from .context import JetStream

#: feature -> (API level, first nats-server version). The one table of these.
FEATURES: dict[str, tuple[int, str]] = {
    "per-message TTL": (1, "2.11"),
    "subject delete markers": (1, "2.11"),
    "consumer pause": (1, "2.11"),
    "priority groups": (1, "2.11"),
    "prioritized priority policy": (2, "2.12"),
    "counters": (2, "2.12"),
    "atomic batch publish": (2, "2.12"),
    "message schedules": (2, "2.12"),
    "async persist mode": (2, "2.12"),
    "fast batch publish": (4, "2.14"),
    "consumer reset": (4, "2.14"),
    "flow control ack policy": (4, "2.14"),
    "durable sourcing": (4, "2.14"),
}

#: StreamConfig field -> the feature a truthy value of it uses (checked in this order).
STREAM_FIELD_FEATURES: dict[str, str] = {
    "subject_delete_marker_ttl": "subject delete markers",
    "allow_msg_ttl": "per-message TTL",
    "allow_msg_counter": "counters",
    "allow_atomic": "atomic batch publish",
    "allow_msg_schedules": "message schedules",
    "allow_batched": "fast batch publish",
}

# connection (or, for a context without one, its API transport) ->
# {api prefix: (server_id the level was read through, level)}
_levels: weakref.WeakKeyDictionary[object, dict[str, tuple[str, int]]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def api_level(js: JetStream, *, refresh: bool = False, timeout: float | None | Default = DEFAULT) -> int:
    """The API level of the JetStream behind ``js`` (cached per connection and API prefix)."""
    conn: Connection | None = js.conn
    owner: object = js._api_transport if conn is None else conn
    server_id = "" if conn is None else str((conn.server_info or {}).get("server_id", ""))
    with _lock:
        cached = _levels.get(owner, {}).get(js.prefix)
    if cached is not None and not refresh and cached[0] == server_id:
        return cached[1]
    resp = js._api("INFO", None, timeout)
    stats = resp.get("api")
    level = stats.get("level", 0) if isinstance(stats, dict) else 0
    if isinstance(level, bool) or not isinstance(level, int) or level < 0:
        level = 0
    with _lock:
        _levels.setdefault(owner, {})[js.prefix] = (server_id, level)
    return level


def require(js: JetStream, feature: str, *, timeout: float | None | Default = DEFAULT) -> int:
    """Raise NotSupportedError unless the server's API level has ``feature``; returns the level needed."""
    need, version = FEATURES[feature]
    have = api_level(js, timeout=timeout)
    if have < need:
        raise NotSupportedError(
            f"{feature} needs nats-server {version}+ (JetStream API level {need}); the server is at API "
            f"level {have}",
            feature=feature, required_level=need, required_version=version, server_level=have)
    return need


def require_level(js: JetStream, need: int, what: str, *, timeout: float | None | Default = DEFAULT,
                  ) -> tuple[str, int]:
    """Raise NotSupportedError unless the server is at API level ``need``; returns ``_api``'s ``feature=``.

    For config fields whose table row gives an API level (jetstream/model.py) rather than a
    feature of :data:`FEATURES`. Blocks for one API INFO request the first time per connection.
    """
    have = api_level(js, timeout=timeout)
    if have < need:
        raise NotSupportedError(f"{what} needs JetStream API level {need}; the server is at API level {have}",
                                feature=what, required_level=need, server_level=have)
    return what, need


def not_supported(feature: str, exc: BaseException) -> NotSupportedError:
    """The NotSupportedError for a server that refused ``feature`` for its API level (err_code 10185)."""
    if feature not in FEATURES:  # a config field's level (require_level)
        return NotSupportedError(f"{feature}: the server refused it for its API level: "
                                 f"{getattr(exc, 'description', None) or exc}", feature=feature)
    need, version = FEATURES[feature]
    return NotSupportedError(f"{feature} needs nats-server {version}+ (JetStream API level {need}); the server "
                             f"refused it: {getattr(exc, 'description', None) or exc}",
                             feature=feature, required_level=need, required_version=version)


def stream_features(cfg: api.StreamConfig) -> list[str]:
    """The features a stream config uses that need a newer server, in table order."""
    used = [feat for field, feat in STREAM_FIELD_FEATURES.items() if getattr(cfg, field, None)]
    mode = getattr(cfg, "persist_mode", None)
    if mode is not None and str(getattr(mode, "value", mode)).lower() == "async":
        used.append("async persist mode")
    from .sourcing import uses_durable_sourcing

    if uses_durable_sourcing(cfg):
        used.append("durable sourcing")
    return used

"""The pure parts of the Liftbridge ``CreateStream``: each partition's stream config, and what a refusal means.

:meth:`jssync.liftbridge.Client.create_stream` makes one JetStream stream per partition with
:func:`partition_config` and turns the server's refusal of one into the Liftbridge error with
:func:`create_error`. No I/O: unit tests drive both with server replies recorded earlier.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nats.js import api

from ..base.errors import APIError, StreamNameInUseError
from .codec import META_CREATED, META_PARTITION, META_PARTITIONS, META_STREAM, META_SUBJECT, partition_subject
from .errors import StreamExistsError

#: the ``storage=`` names of create_stream
STORAGE = {"file": api.StorageType.FILE, "memory": api.StorageType.MEMORY}


def partition_config(name: str, subject: str, partition: int, partitions: int, *, js_name: str,
                     replication_factor: int, storage: str, limits: Mapping[str, Any], token: str) -> api.StreamConfig:
    """The JetStream stream config of ``partition`` of the Liftbridge stream ``name`` (arguments checked by the caller).

    The stream ``js_name`` captures the partition's subject (``subject`` for partition 0,
    ``subject.<n>`` for the others); its metadata says which Liftbridge stream and partition
    it is and carries ``token``, the mark of the create call that made it.
    """
    return api.StreamConfig(
        name=js_name, subjects=[partition_subject(subject, partition)], num_replicas=replication_factor,
        storage=STORAGE[storage],
        metadata={META_STREAM: name, META_SUBJECT: subject, META_PARTITION: str(partition),
                  META_PARTITIONS: str(partitions), META_CREATED: token},
        **limits,
    )


def create_error(exc: APIError, name: str, js_name: str, subject: str, partition: int) -> APIError:
    """The error ``create_stream`` raises when JetStream refused the stream of ``partition``.

    A stream of that name exists: :class:`StreamExistsError`; the partition's subject is
    captured by another stream (err_code 10065): an APIError saying so; anything else:
    ``exc`` itself.
    """
    if isinstance(exc, StreamNameInUseError):
        return StreamExistsError(exc.code, exc.err_code, f"stream {name!r} already exists "
                                 f"(JetStream stream {js_name!r}: {exc.description})")
    if exc.err_code == 10065:
        return APIError(exc.code, exc.err_code,
                        f"subject {partition_subject(subject, partition)!r} of partition {partition} is already "
                        "captured by another JetStream stream (JetStream streams cannot share subjects)")
    return exc

"""The object store's errors: each under jssync's core tree (``jssync.JetStreamError``,
``NotFoundError``, ``ValidationError``), exported from ``jssync`` and still offered by
``jssync.objectstore.objectstore``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..base.errors import JetStreamError, NotFoundError, ValidationError

if TYPE_CHECKING:
    from ..jetstream.replies import StoredMsg


class ObjectStoreError(JetStreamError):
    """Base class of object store errors."""


class ObjectNotFoundError(ObjectStoreError, NotFoundError):
    """No such object (or it was deleted)."""

    def __init__(self, description: str = "object not found") -> None:
        NotFoundError.__init__(self, 404, None, description)


class BadObjectMetaError(ObjectStoreError, ValidationError):
    """Invalid object name or metadata, or a link used where it is not allowed."""


class ObjectAlreadyExistsError(ObjectStoreError):
    """An object of that name exists (renaming or linking onto it is refused)."""


class DigestMismatchError(ObjectStoreError):
    """The bytes read do not match the object's size, chunk count or SHA-256 digest."""


class ObjectChangedError(ObjectStoreError):
    """The object was replaced while it was being read and could not be read again.

    :meth:`ObjectStore.get` starts over on the new version by itself; this is raised when
    it cannot: bytes of the old version were already written into a ``writeinto`` file
    object that cannot seek back, or the object changed too many times in a row.
    Reading it again gives the current version.
    """


class _Changed(Exception):
    """Inside :meth:`ObjectStore.get`: the version being read is no longer the current one."""

    def __init__(self, found: tuple[dict[str, Any], StoredMsg] | None, written: int) -> None:
        super().__init__("changed")
        self.found = found
        self.written = written

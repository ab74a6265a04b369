"""jssync: a synchronous, thread-based client for NATS JetStream, built on nats-py."""

from typing import TYPE_CHECKING, Any

from nats.js.api import (
    AccountInfo,
    AckPolicy,
    ConsumerConfig,
    ConsumerInfo,
    DeliverPolicy,
    DiscardPolicy,
    KeyValueConfig,
    ObjectInfo,
    ObjectLink,
    ObjectMeta,
    ObjectMetaOptions,
    ObjectStoreConfig,
    ReplayPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    StreamInfo,
)

from .base.deadline import DEFAULT, Default
from .base.errors import (
    APIError,
    AuthorizationError,
    BadHeaderError,
    BadRequestError,
    BadSubjectError,
    ConnectionClosedError,
    ConsumerDeletedError,
    ConsumerExistsError,
    ConsumerIsPushBasedError,
    ConsumerNotFoundError,
    DirectGetNotAllowedError,
    Error,
    FastPublishGapError,
    ForkError,
    JetStreamAPIError,
    JetStreamError,
    JetStreamNotEnabledError,
    LoopStalledError,
    MaxPayloadError,
    MessageNotFoundError,
    NoAckStreamError,
    NoHeartbeatError,
    NoRespondersError,
    NoServersError,
    NotFoundError,
    NotJSMessageError,
    NotSupportedError,
    PermissionDeniedError,
    PullRequestError,
    ReconnectBufferExceededError,
    RequestCancelledError,
    RequestError,
    RequestTimeoutError,
    ServiceUnavailableError,
    SlowConsumerError,
    StreamNameInUseError,
    StreamNotFoundError,
    StreamNotMatchError,
    SubscriptionClosedError,
    TimeoutError,
    TooManySubjectsError,
    UnknownOptionError,
    ValidationError,
    WrongLastMsgIdError,
    WrongLastSequenceError,
    retriable,
)
from .base.jsack import MsgMetadata, SequencePair
from .core.connection import Connection, connect
from .core.msg import Msg
from .core.request_many import RequestMany
from .core.subscription import Subscription
from .jetstream.consumers import Consumer
from .jetstream.context import JetStream
from .jetstream.direct import DirectBatch
from .jetstream.fastpublish import FastPubAck, FastPublisher
from .jetstream.msgfeatures import BatchPublisher, Counter, CounterEntry
from .jetstream.ordered import OrderedConsumeContext, OrderedConsumer
from .jetstream.pull import ConsumeContext, FetchResult
from .jetstream.push import (
    ConsumerConfigMismatchError,
    ConsumerIsPullBasedError,
    ConsumerSequenceMismatchError,
    DeliverGroupError,
    DuplicateSubscriptionError,
    HeartbeatAlarmError,
    InvalidJSAckError,
    JetStreamSubscription,
    MultipleStreamsMatchError,
    PushSubscribeError,
    QueueGroupOptionError,
    StatusError,
    SubjectMismatchError,
)
from .jetstream.replies import PubAck, StoredMsg
from .jetstream.sourcing import StreamConsumerSource, StreamSource
from .jetstream.streams import Stream
from .kv.codecs import (
    Base64Codec,
    CodecEntry,
    CodecKeyValue,
    CodecKeyWatcher,
    FilterableKeyCodec,
    JSONCodec,
    KeyChainCodec,
    KeyCodec,
    NoOpCodec,
    PathCodec,
    ValueChainCodec,
    ValueCodec,
)
from .kv.keyvalue import (
    BadBucketError,
    BucketExistsError,
    BucketNotFoundError,
    Entry,
    InvalidBucketNameError,
    InvalidKeyError,
    InvalidValueError,
    KeyDeletedError,
    KeyExistsError,
    KeyHistoryTooLargeError,
    KeyNotFoundError,
    KeyValue,
    KeyValueDecodeError,
    KeyValueError,
    KeyValueOp,
    KeyValueStatus,
    KeyWatcher,
    KeyWrongLastSequenceError,
)
from .objectstore.objectstore import (
    BadObjectMetaError,
    DigestMismatchError,
    ObjectAlreadyExistsError,
    ObjectChangedError,
    ObjectNotFoundError,
    ObjectResult,
    ObjectStore,
    ObjectStoreError,
    ObjectStoreStatus,
    ObjectWatcher,
)

if TYPE_CHECKING:  # loaded on first use (__getattr__ below): they cost a third of jssync's import
    from . import liftbridge as liftbridge
    from . import micro
    from . import pcgroups as pcgroups
    from .liftbridge.errors import (
        InvalidAckError,
        NoSuchPartitionError,
        StreamExistsError,
    )
    from .pcgroups.errors import (
        ConsumerGroupChangedError,
        ConsumerGroupConfigError,
        ConsumerGroupError,
        ConsumerGroupNotFoundError,
        NotAMemberError,
    )

#: public names loaded on first use (PEP 562): name -> the module that defines it; a module's own
#: name (``jssync.micro``) is that submodule
_LAZY = {
    "micro": ".micro", "liftbridge": ".liftbridge", "pcgroups": ".pcgroups",
    "InvalidAckError": ".liftbridge.errors", "NoSuchPartitionError": ".liftbridge.errors",
    "StreamExistsError": ".liftbridge.errors",
    "ConsumerGroupChangedError": ".pcgroups.errors", "ConsumerGroupConfigError": ".pcgroups.errors",
    "ConsumerGroupError": ".pcgroups.errors", "ConsumerGroupNotFoundError": ".pcgroups.errors",
    "NotAMemberError": ".pcgroups.errors",
}

__version__ = "0.1.0"

__all__ = [
    "APIError",
    "AccountInfo",
    "AckPolicy",
    "AuthorizationError",
    "BadBucketError",
    "BadHeaderError",
    "BadObjectMetaError",
    "BadRequestError",
    "BadSubjectError",
    "Base64Codec",
    "BatchPublisher",
    "BucketExistsError",
    "BucketNotFoundError",
    "CodecEntry",
    "CodecKeyValue",
    "CodecKeyWatcher",
    "Connection",
    "ConnectionClosedError",
    "ConsumeContext",
    "Consumer",
    "ConsumerConfig",
    "ConsumerConfigMismatchError",
    "ConsumerDeletedError",
    "ConsumerExistsError",
    "ConsumerGroupChangedError",
    "ConsumerGroupConfigError",
    "ConsumerGroupError",
    "ConsumerGroupNotFoundError",
    "ConsumerInfo",
    "ConsumerIsPullBasedError",
    "ConsumerIsPushBasedError",
    "ConsumerNotFoundError",
    "ConsumerSequenceMismatchError",
    "Counter",
    "CounterEntry",
    "DEFAULT",
    "Default",
    "DeliverGroupError",
    "DeliverPolicy",
    "DigestMismatchError",
    "DirectBatch",
    "DirectGetNotAllowedError",
    "DiscardPolicy",
    "DuplicateSubscriptionError",
    "Entry",
    "Error",
    "FastPubAck",
    "FastPublishGapError",
    "FastPublisher",
    "FetchResult",
    "FilterableKeyCodec",
    "ForkError",
    "HeartbeatAlarmError",
    "InvalidAckError",
    "InvalidBucketNameError",
    "InvalidJSAckError",
    "InvalidKeyError",
    "InvalidValueError",
    "JSONCodec",
    "JetStream",
    "JetStreamAPIError",
    "JetStreamError",
    "JetStreamNotEnabledError",
    "JetStreamSubscription",
    "KeyChainCodec",
    "KeyCodec",
    "KeyDeletedError",
    "KeyExistsError",
    "KeyHistoryTooLargeError",
    "KeyNotFoundError",
    "KeyValue",
    "KeyValueConfig",
    "KeyValueDecodeError",
    "KeyValueError",
    "KeyValueOp",
    "KeyValueStatus",
    "KeyWatcher",
    "KeyWrongLastSequenceError",
    "LoopStalledError",
    "MaxPayloadError",
    "MessageNotFoundError",
    "Msg",
    "MsgMetadata",
    "MultipleStreamsMatchError",
    "NoAckStreamError",
    "NoHeartbeatError",
    "NoOpCodec",
    "NoRespondersError",
    "NoServersError",
    "NoSuchPartitionError",
    "NotAMemberError",
    "NotFoundError",
    "NotJSMessageError",
    "NotSupportedError",
    "ObjectAlreadyExistsError",
    "ObjectChangedError",
    "ObjectInfo",
    "ObjectLink",
    "ObjectMeta",
    "ObjectMetaOptions",
    "ObjectNotFoundError",
    "ObjectResult",
    "ObjectStore",
    "ObjectStoreConfig",
    "ObjectStoreError",
    "ObjectStoreStatus",
    "ObjectWatcher",
    "OrderedConsumeContext",
    "OrderedConsumer",
    "PathCodec",
    "PermissionDeniedError",
    "PubAck",
    "PullRequestError",
    "PushSubscribeError",
    "QueueGroupOptionError",
    "ReconnectBufferExceededError",
    "ReplayPolicy",
    "RequestCancelledError",
    "RequestError",
    "RequestMany",
    "RequestTimeoutError",
    "RetentionPolicy",
    "SequencePair",
    "ServiceUnavailableError",
    "SlowConsumerError",
    "StatusError",
    "StorageType",
    "StoredMsg",
    "Stream",
    "StreamConfig",
    "StreamConsumerSource",
    "StreamExistsError",
    "StreamInfo",
    "StreamNameInUseError",
    "StreamNotFoundError",
    "StreamNotMatchError",
    "StreamSource",
    "SubjectMismatchError",
    "Subscription",
    "SubscriptionClosedError",
    "TimeoutError",
    "TooManySubjectsError",
    "UnknownOptionError",
    "ValidationError",
    "ValueChainCodec",
    "ValueCodec",
    "WrongLastMsgIdError",
    "WrongLastSequenceError",
    "__version__",
    "connect",
    "micro",
    "retriable",
]


def _own_name(name: str, obj: object) -> None:
    """Make one of jssync's own classes or functions print as ``jssync.X`` (``jssync.TimeoutError``
    in a traceback, not ``jssync.base.errors.TimeoutError``), as httpx does. The nats-py types
    re-exported here (``StreamConfig``, ...) keep their module."""
    if getattr(obj, "__module__", "").startswith("jssync.") and getattr(obj, "__name__", None) == name:
        obj.__module__ = "jssync"


def _own_module() -> None:
    here = globals()
    for name in __all__:
        if name not in _LAZY:
            _own_name(name, here[name])


def __getattr__(name: str) -> Any:
    """Load a public name of :data:`_LAZY` on first use (PEP 562): ``jssync.micro``,
    ``jssync.ConsumerGroupError``, ``from jssync import StreamExistsError`` ..."""
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'jssync' has no attribute {name!r}")
    import importlib

    module = importlib.import_module(target, __name__)
    value = module if target == f".{name}" else getattr(module, name)
    _own_name(name, value)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


_own_module()

"""The public surface: pinned names, every error under jssync.Error, nothing private leaks."""

from __future__ import annotations

import inspect

import jssync

#: Names that code outside the project is written against (../shared/API.md).
API_NAMES = {
    "connect", "Connection", "Subscription", "Msg", "JetStream", "Stream", "StoredMsg", "Consumer",
    "OrderedConsumer", "JetStreamSubscription", "KeyValue", "Entry", "StreamConfig", "ConsumerConfig",
    "StreamInfo", "ConsumerInfo", "PubAck", "AckPolicy", "DeliverPolicy", "ReplayPolicy", "RetentionPolicy",
    "StorageType", "DiscardPolicy", "Error", "TimeoutError", "StreamNotFoundError", "ConsumerNotFoundError",
    "MessageNotFoundError", "ConsumerDeletedError", "ConsumerIsPushBasedError", "NoRespondersError",
    "ConnectionClosedError", "NoServersError", "AuthorizationError", "ForkError", "WrongLastSequenceError",
    "APIError", "JetStreamAPIError",
}


def test_all_is_sorted_and_complete():
    assert list(jssync.__all__) == sorted(jssync.__all__)
    assert set(jssync.__all__) >= API_NAMES
    for name in jssync.__all__:
        assert hasattr(jssync, name), name


def test_every_exported_exception_is_a_jssync_error():
    for name in jssync.__all__:
        obj = getattr(jssync, name)
        if inspect.isclass(obj) and issubclass(obj, BaseException):
            assert issubclass(obj, jssync.Error), name


def test_timeout_error_is_builtin_too():
    assert issubclass(jssync.TimeoutError, TimeoutError)


def test_api_errors_keep_codes():
    e = jssync.StreamNotFoundError(404, 10059, "stream not found")
    assert (e.code, e.err_code, e.description) == (404, 10059, "stream not found")


def test_public_modules_import():
    import jssync.liftbridge  # noqa: F401
    import jssync.micro  # noqa: F401
    import jssync.pcgroups  # noqa: F401
    import jssync.server  # noqa: F401
    import jssync.spark  # noqa: F401


def test_micro_is_a_submodule_and_its_errors_are_jssync_errors():
    assert jssync.micro.__name__ == "jssync.micro"
    assert list(jssync.micro.__all__) == sorted(jssync.micro.__all__)
    for name in jssync.micro.__all__:
        obj = getattr(jssync.micro, name)
        if inspect.isclass(obj) and issubclass(obj, BaseException):
            assert issubclass(obj, jssync.Error), name


def test_pcgroups_exports_are_sorted_and_its_errors_are_jssync_errors():
    import jssync.pcgroups as pcg

    assert list(pcg.__all__) == sorted(pcg.__all__)
    for name in pcg.__all__:
        obj = getattr(pcg, name)
        if inspect.isclass(obj) and issubclass(obj, BaseException):
            assert issubclass(obj, jssync.Error), name
            assert getattr(jssync, name) is obj, name

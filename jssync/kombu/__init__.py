"""JetStream as a kombu transport, so Celery can use NATS JetStream as its broker.

Use it with kombu or Celery (install ``jssync[celery]``)::

    kombu.Connection("nats://127.0.0.1:4222", transport="jssync.kombu:Transport")
    app.conf.broker_url = "nats://127.0.0.1:4222"
    app.conf.broker_transport = "jssync.kombu:Transport"

How kombu's model maps onto JetStream (docs/celery.md has the long form):

- A queue is one work-queue stream, ``<prefix>_<queue>`` on the subject ``<prefix>.q.<queue>``
  (queue names are escaped into subject and stream tokens), with one durable pull consumer
  ``<prefix>`` that every worker of the queue shares. Work-queue retention removes a
  message once it is acked, so the stream holds exactly what is still to do.
- Exchanges are kombu's virtual exchanges (direct, topic, fanout); the bindings live in the
  key-value bucket ``<prefix>_bindings``, so a publisher routes by bindings other processes
  declared (fanout copies reach every bound queue; Celery's remote control works). Each
  connection keeps them in memory, current through a watch of the bucket.
- A consumed queue has one pull request open at a time (a thread per queue and channel) for
  the free prefetch room: messages reach the channel as they are stored and ``drain_events``
  waits for them (no polling, no round trip per message). Cancel and close end that pull and
  -NAK what it brought and was not delivered. ``basic_get`` asks for one message (no wait).
- The consumer's settings (ack_wait, max_deliver, max_ack_pending) are those of the processes
  that consume the queue; a producer's declaration never changes them. ``Queue(expires=)``
  (``x-expires``) is the consumer's inactive threshold, and an expired queue's stream and
  bindings are deleted by a periodic check; ``auto_delete`` queues are deleted when their
  consumer is cancelled.
- ack, reject, requeue are +ACK, +TERM, -NAK. A message delivered and not acked comes back
  after ``ack_wait`` once its holder is gone; while the holder lives, the transport sends
  +WPI (in progress) for the messages it holds, so a long task is not delivered twice.
- The stream and consumer calls raise jssync errors: :attr:`Transport.connection_errors`
  and :attr:`Transport.channel_errors` sort them for kombu's retry logic.

Transport options (``transport_options`` / Celery's ``broker_transport_options``):
``subject_prefix`` (default ``"kombu"``), ``storage`` (``"file"`` or ``"memory"``),
``replicas`` (1), ``ack_wait`` (seconds, 1800), ``max_deliver`` (-1: no limit),
``max_ack_pending`` (-1: no limit), ``fetch_batch`` (most messages one pull asks for, and
the most a consumed queue holds received and not delivered; always within the free prefetch
room; 100), ``keepalive`` (send in-progress for held messages; True), ``expires_check`` (seconds between
checks for queues whose ``x-expires`` passed; 10), ``polling_interval``
(accepted for compatibility, unused: consumed queues wait on an open pull), ``connect_options``
(a dict passed to :func:`jssync.connect`: ``creds``, ``nkeys_seed``, ``token``, ``tls``,
``name``, ...), ``dead_letter_queue`` (a queue messages past ``max_deliver`` move to;
None: they stay in their stream; :mod:`jssync.kombu.deadletter`).

Importing this module registers the URL schemes ``jssync`` and ``nats`` with kombu (only where
kombu has no transport of that name), so ``jssync://host:4222`` URLs work after the import
and kombu's failover switch between ``nats://`` alternates finds this transport.
"""


from __future__ import annotations

import logging

from kombu.transport import TRANSPORT_ALIASES

# the module-level names of the one-module version, for code that reads them (not in __all__)
from .channel import UNSEEN_WAIT as UNSEEN_WAIT
from .channel import Channel, QoS
from .names import escape as escape
from .names import unescape as unescape
from .options import DEFAULT_OPTIONS as DEFAULT_OPTIONS
from .puller import PULL_EXPIRES as PULL_EXPIRES
from .transport import DEFAULT_PORT as DEFAULT_PORT
from .transport import EXPIRES_KEY as EXPIRES_KEY
from .transport import TICK as TICK
from .transport import Transport

__all__ = ["Channel", "QoS", "Transport"]

logger = logging.getLogger("jssync")


def _register_aliases() -> None:
    # kombu has no registration API; only names kombu itself does not use are added
    for scheme in ("jssync", "nats"):
        TRANSPORT_ALIASES.setdefault(scheme, "jssync.kombu:Transport")


_register_aliases()

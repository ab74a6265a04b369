"""Credentials and permissions: what jssync raises, where, and what it never shows.

Starts its own nats-server with two users. ``app`` may not publish or subscribe on
``admin.>``; ``restricted`` may not subscribe to ``_INBOX.>`` and so uses its own inbox
prefix for requests. Run: ``python examples/security.py``.
"""

from __future__ import annotations

import logging
import threading

import jssync
from jssync.server import NatsServer

CONFIG = """
authorization {
  users: [
    {user: app, password: app-secret-pw, permissions: {
        publish: {deny: ["admin.>"]}, subscribe: {deny: ["admin.>"]}}}
    {user: restricted, password: restricted-pw, permissions: {
        subscribe: {allow: ["_RESTRICTED.>", "work.>"]}}}
  ]
}
"""


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    with NatsServer(jetstream=True, config=CONFIG) as server:
        # wrong credentials: AuthorizationError, and the password is in no message
        try:
            jssync.connect(server.url, user="app", password="not-the-password", timeout=2)
        except jssync.AuthorizationError as exc:
            print("refused:", exc)

        # every refusal is also reported to error_cb (subjects lower-cased by the client library)
        publish_refused = threading.Event()

        def on_error(exc: Exception) -> None:
            if isinstance(exc, jssync.PermissionDeniedError) and exc.operation == "publish" \
                    and exc.subject == "admin.note":
                publish_refused.set()

        with jssync.connect(server.url, user="app", password="app-secret-pw", error_cb=on_error) as nc:
            print("connected:", nc)  # the repr shows no password

            # subscribe: refused on the calling thread
            try:
                nc.subscribe("admin.audit")
            except jssync.PermissionDeniedError as exc:
                print("subscribe refused:", exc.operation, exc.subject)

            # request: refused as soon as the server says so, not after the timeout
            try:
                nc.request("admin.shutdown", b"now", timeout=5)
            except jssync.PermissionDeniedError as exc:
                print("request refused:", exc.operation, exc.subject)

            # fire-and-forget publish returns at once; the refusal goes to error_cb
            nc.publish("admin.note", b"hello")
            assert publish_refused.wait(5)
            print("publish refused: reported to error_cb")

            # everything allowed still works on the same connection
            sub = nc.subscribe("work.items")
            nc.publish("work.items", b"job 1")
            print("allowed:", sub.next_msg(2).data)

        # a user that may not subscribe to _INBOX.> needs another inbox prefix for requests
        with jssync.connect(server.url, user="restricted", password="restricted-pw",
                            inbox_prefix="_RESTRICTED") as nc:
            nc.subscribe("work.echo", callback=lambda m: m.respond(m.data))
            print("request with a custom inbox:", nc.request("work.echo", b"ping", timeout=2).data)


if __name__ == "__main__":
    main()

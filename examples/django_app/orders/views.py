"""POST /orders/: publish an order to JetStream."""

from __future__ import annotations

import json

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

import jssync

from . import nats


@csrf_exempt  # an API for other programs, not a browser form
@require_POST
def publish_order(request: HttpRequest) -> JsonResponse:
    """Publish the JSON body ``{"item": "...", "qty": 1}`` on ``orders.new``.

    The ``Idempotency-Key`` header is the JetStream message id: a retried request is
    stored once and answered with ``"duplicate": true``.
    """
    key = request.headers.get("Idempotency-Key", "").strip()
    if not key:
        return JsonResponse({"error": "the Idempotency-Key header is required"}, status=400)
    try:
        order = json.loads(request.body)
    except ValueError:
        order = None
    if not isinstance(order, dict) or not isinstance(order.get("item"), str) \
            or not isinstance(order.get("qty"), int) or order["qty"] < 1:
        return JsonResponse({"error": 'the body must be JSON like {"item": "book", "qty": 1}'}, status=400)
    try:
        ack = nats.jetstream().publish(nats.NEW, json.dumps(order).encode(), msg_id=key, timeout=5.0)
    except jssync.Error as exc:
        return JsonResponse({"error": f"could not store the order: {exc}"}, status=503)
    body = {"id": key, "stream": ack.stream, "seq": ack.seq, "duplicate": bool(ack.duplicate)}
    return JsonResponse(body, status=200 if ack.duplicate else 201)

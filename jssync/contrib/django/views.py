"""``health``: a readiness probe view, ``path("healthz/", jssync.contrib.django.views.health)``."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_safe

from .client import health as _health


@require_safe
def health(request: HttpRequest) -> JsonResponse:
    """GET/HEAD: 200 with :func:`jssync.contrib.django.health`'s dict when the connection and
    JetStream answer, 503 with the same dict (and its ``"error"``) when not.

    Blocks up to 2 s per round trip (and the connect timeout on first use).
    """
    result = _health()
    return JsonResponse(result, status=200 if result["ok"] else 503)

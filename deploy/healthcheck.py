#!/usr/bin/env python3
"""Container health checks of the agentsearch image (installed as ``/usr/local/bin/agentsearch-healthcheck``).

``agentsearch-healthcheck`` (or ``http``): GET ``/healthz`` on this container's port; exit 0 on a 200.
``agentsearch-healthcheck worker``: exit 0 when arq's health-check keys of the three queues (embed,
bulk and fast) are fresh in Redis. arq keeps one such key per queue, refreshed by every worker of that
queue every ``worker_health_check_s`` and expiring just after, so this says "this deployment's
queues have a live worker and Redis answers", not "this very process is live" (see README).

The image's ``HEALTHCHECK`` runs the first form; compose overrides it with the second for the
worker services. Standard library plus ``redis`` (already in the image), one short call each; a
Redis failure names the URL through ``service.redact`` (installed beside it), so a password in
``REDIS_URL`` is never printed.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence

TIMEOUT_S = 3.0


def check_http(environ: Mapping[str, str]) -> str | None:
    """None when ``/healthz`` answers 200, else what went wrong."""
    port = environ.get("AGENTSEARCH_PORT", "8080")
    url = f"http://127.0.0.1:{port}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            return None if response.status == 200 else f"{url} answered {response.status}"
    except (urllib.error.URLError, OSError) as exc:
        return f"{url} did not answer: {exc}"


def worker_health_keys(prefix: str) -> tuple[str, str, str]:
    """arq's health-check keys (``<queue>:health-check``) of the embed, bulk and fast queues of ``prefix``."""
    return (f"{prefix}:queue:embed:health-check", f"{prefix}:queue:bulk:health-check", f"{prefix}:queue:fast:health-check")


def check_worker(environ: Mapping[str, str]) -> str | None:
    """None when every queue's health-check key exists, else what went wrong."""
    import redis

    url = environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    keys = worker_health_keys(environ.get("AGENTSEARCH_QUEUE_PREFIX", "agentsearch"))
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=TIMEOUT_S, socket_timeout=TIMEOUT_S)
        try:
            missing = [key for key in keys if not client.exists(key)]
        finally:
            client.close()
    except redis.RedisError as exc:
        from service.redact import mask_text, mask_url  # the image's venv holds the service package

        return f"redis at {mask_url(url)} did not answer: {mask_text(str(exc))}"
    return f"no live worker refreshed {', '.join(missing)}" if missing else None


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    environ = os.environ if environ is None else environ
    mode = args[0] if args else "http"
    checks = {"http": check_http, "worker": check_worker}
    if mode not in checks or len(args) > 1:
        print("usage: agentsearch-healthcheck [http|worker]", file=sys.stderr)
        return 2
    problem = checks[mode](environ)
    if problem:
        print(f"unhealthy: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

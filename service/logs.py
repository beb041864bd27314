"""Logging set-up for the command line's processes: one stderr handler with request ids and credentials masked."""

from __future__ import annotations

import logging


def configure_logging(level: str) -> None:
    from service.middleware import RequestIdFilter
    from service.redact import CredentialFilter

    handler = logging.StreamHandler()
    handler.addFilter(RequestIdFilter())
    handler.addFilter(CredentialFilter())  # a safety net: call sites mask URLs themselves
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)

"""Credentials never printed: mask the password of a URL (``mask_url``), of every URL in a text
(``mask_text``), and a logging filter that applies ``mask_text`` to each log record as a safety net.

``REDIS_URL`` may carry a password (``redis://:pw@host``, ``redis://user:pw@host``,
``unix:///run/redis.sock?password=pw``), ``QDRANT_URL`` and a provider's base URL may carry userinfo
or a key in the query string. Every log line, page and answer that names such a URL names it
through ``mask_url``; exception texts that might hold one go through ``mask_text``.
"""

from __future__ import annotations

import logging
import re
from typing import Any

MASK = "***"
# scheme://user:password@ : everything after the userinfo's first ':' (the password, up to the last '@'
# before the host) is masked.
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^\s:@/?#]*):(?P<password>[^\s/?#]*)@")
# A userinfo without ':' of 20 characters or more: an API key used as the user name.
_KEY_USERINFO = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^\s:@/?#]{20,}@")
# A query parameter whose name ends in a credential word (password, api_key, token...): its value is masked.
_QUERY_SECRET = re.compile(r"(?P<name>[?&;](?:[A-Za-z_-]*?)(?:password|pass|pwd|api[_-]?key|key|token|access[_-]?token|secret|client[_-]?secret|auth|sig|signature))=(?P<value>[^\s&#;'\"]+)", re.IGNORECASE)


def mask_url(url: str | None) -> str:
    """``url`` with its password (and any credential query parameter) replaced by ``***``, the rest as given.

    ``redis://:s3cret@host:6379/0`` -> ``redis://:***@host:6379/0``; a userinfo without ``:`` that is
    a key rather than a name (``https://sk-...@host``) is masked whole.
    """
    if not url:
        return ""
    masked = mask_text(url)
    return _KEY_USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", masked)


def mask_text(text: str) -> str:
    """``text`` with the password of every ``scheme://user:password@`` and every credential query value masked."""
    if "://" not in text and "=" not in text:
        return text
    masked = _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
    return _QUERY_SECRET.sub(lambda m: f"{m['name']}={MASK}", masked)


# Attributes every LogRecord has: anything else came in through ``extra=``.
_STANDARD_ATTRS = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


class CredentialFilter(logging.Filter):
    """Masks credentials in a record's message, arguments, ``extra`` fields and exception text.

    A safety net behind the call sites (which mask the URLs they name): a library's message or an
    exception text that carries a URL with a password is printed masked too.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = mask_text(record.msg)
        if record.args:
            if isinstance(record.args, dict):
                record.args = {key: _masked(value) for key, value in record.args.items()}
            else:
                record.args = tuple(_masked(value) for value in record.args)
        for name, value in list(record.__dict__.items()):
            if name not in _STANDARD_ATTRS and isinstance(value, str):
                setattr(record, name, mask_text(value))
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = mask_text(record.exc_text)
        return True


def _masked(value: Any) -> Any:
    if isinstance(value, str):
        return mask_text(value)
    if isinstance(value, BaseException):
        text = str(value)
        masked = mask_text(text)
        return masked if masked != text else value
    return value


__all__ = ["MASK", "CredentialFilter", "mask_text", "mask_url"]

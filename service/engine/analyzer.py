"""The analyzer: code- and identifier-aware terms for the BM25 text index, used for documents and queries.

Output is lowercase alphanumeric words joined by single spaces, so every backend's default word
tokenizer (qdrant-edge, qdrant-client local mode, a Qdrant server) splits it identically. For each
identifier it keeps the whole identifier (``getuserbyid``) and its parts (``get``, ``user``,
``by``, ``id``): camelCase, PascalCase, snake_case, kebab-case, dotted names and path parts all split.
Plural ``s`` is folded on every term of five letters or more (parts and whole identifiers alike) so
``emails`` meets ``email`` and ``getitems`` meets ``get_items``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Iterator

# Runs of letters/digits/underscores, plus connectors that join identifier parts (. - / :).
_IDENTIFIER = re.compile(r"[0-9A-Za-z_\u00C0-\uFFFF]+(?:[.\-/:][0-9A-Za-z_\u00C0-\uFFFF]+)*")
_PART_SPLIT = re.compile(r"[_.\-/:]+")
# camelCase boundaries: lower->Upper, Upper->Upper+lower (HTTPServer -> HTTP Server), letter<->digit.
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+|[^\W\d_]+", re.UNICODE)
_NON_ALNUM = re.compile(r"[^0-9a-z]+")
# A token written as a name: words joined by case changes or by _ . - / : (``getUser``, ``list_repos``).
_NAME_LIKE = re.compile(r"[A-Za-z0-9]*(?:[a-z][A-Z]|[A-Z][A-Z][a-z]|[A-Za-z0-9][_.\-/:][A-Za-z])[A-Za-z0-9_.\-/:]*")

MAX_TERM_LENGTH = 40
# Stored with every record (``analyzer``) so ``reindex`` can bring older terms up to date
# (``upgrade_terms``). 1: the first release; 2: the plural fold applies to whole identifiers too.
ANALYZER_VERSION = 2

STOPWORDS = frozenset(
    ["a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "how", "i", "in", "is", "it", "of", "on", "or", "the", "this", "to", "what", "which", "with"]
)


def _fold(text: str) -> str:
    """ASCII-fold and lowercase one word, keeping only [0-9a-z]."""
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    return _NON_ALNUM.sub("", folded.lower())


def _normalize(term: str) -> str:
    if len(term) >= 5 and term.endswith("s") and not term.endswith("ss"):
        return term[:-1]
    return term


def identifier_terms(identifier: str) -> Iterator[str]:
    """The terms of one identifier: the whole (joined) identifier first, then each part."""
    pieces = [p for p in _PART_SPLIT.split(identifier) if p]
    parts: list[str] = []
    for piece in pieces:
        sub = _CAMEL.findall(piece) or [piece]
        parts.extend(sub)
    folded_parts = [f for f in (_fold(p) for p in parts) if f]
    whole = "".join(folded_parts)
    # The whole identifier folds its plural like a one-word identifier does: a query typed as
    # one lowercase word ("getitems") must meet the whole of ``get_items`` / ``getItems``.
    if len(folded_parts) > 1 and whole and len(whole) <= MAX_TERM_LENGTH:
        yield _normalize(whole)
    for piece in pieces:
        folded_piece = _fold(piece)
        if folded_piece and folded_piece != whole and folded_piece not in folded_parts and len(folded_piece) <= MAX_TERM_LENGTH:
            yield _normalize(folded_piece)
    for part in folded_parts:
        if len(part) <= MAX_TERM_LENGTH:
            yield _normalize(part)


def name_parts(text: str) -> list[str]:
    """The words of a name or path, case kept: ``parse_searchBody`` -> ``parse``, ``search``, ``Body``."""
    return _CAMEL.findall(text)


def spoken(name: str) -> str:
    """A name as words, for a model to read: ``AusPetrolPrices`` -> ``Aus Petrol Prices``,
    ``create_qr_code`` -> ``create qr code``; other text is left as it is."""
    out: list[str] = []
    for token in name.split():
        if not _NAME_LIKE.fullmatch(token):
            out.append(token)
            continue
        pieces = [p for p in _PART_SPLIT.split(token) if p]
        out.extend(part for piece in pieces for part in (_CAMEL.findall(piece) or [piece]))
    return " ".join(out)


def analyze(text: str, *, drop_stopwords: bool = False) -> list[str]:
    """All terms of ``text`` in order, with repeats (BM25 counts them)."""
    terms: list[str] = []
    for match in _IDENTIFIER.finditer(text):
        for term in identifier_terms(match.group(0)):
            if drop_stopwords and term in STOPWORDS:
                continue
            terms.append(term)
    return terms


def terms_text(*texts: str | None) -> str:
    """The ``terms`` payload value for a document made of ``texts``."""
    return " ".join(term for text in texts if text for term in analyze(text))


def upgrade_terms(terms: str, version: int) -> str:
    """Terms an older analyzer (``version``) wrote, brought to today's rules that act on analyzed
    words: what ``reindex`` runs on stored records. A change in how text splits cannot be applied
    to its output; such a version needs the records ingested again, and says so here."""
    words = terms.split()
    if version < 2:
        words = [_normalize(word) for word in words]  # parts were folded already; folding is idempotent
    return " ".join(words)


def query_terms(query: str) -> str:
    """The analyzed query for BM25: unique terms, stopwords dropped unless nothing else is left."""
    terms = _unique(analyze(query, drop_stopwords=True)) or _unique(analyze(query))
    return " ".join(terms)


def _unique(terms: Iterable[str]) -> list[str]:
    seen: dict[str, None] = {}
    for term in terms:
        seen.setdefault(term, None)
    return list(seen)

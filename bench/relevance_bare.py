"""Bare rankings, the references the service is measured against: the MiniLM model alone (cosine over
each item's own plain text) and a plain BM25 over the same texts, with no service code in either.

BM25 is Okapi BM25 (k1 1.2, b 0.75, idf ln(1 + (N - df + 0.5) / (df + 0.5))) over a simple tokenizer:
lowercase ASCII words and numbers, identifiers split at case changes and underscores
(``getAuditEvents`` -> get, audit, events), no stemming, no stopwords. Ties keep the items' order.

Dense vectors can be kept in a cache folder between runs: one ``.npy`` file per list of texts, named
by a digest of the model and the texts, so a changed set never reads stale vectors.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from service.engine.embeddings import load_sentence_transformer, local_model_path

MODEL = "all-MiniLM-L6-v2"
K1 = 1.2
B = 0.75
_TOKEN = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def tokenize(text: str) -> list[str]:
    return [token.lower() for token in _TOKEN.findall(text)]


class BM25:
    """Okapi BM25 over a fixed list of texts; ``top`` answers the positions of the best ``limit``."""

    def __init__(self, texts: Sequence[str], *, k1: float = K1, b: float = B) -> None:
        self.k1, self.b = k1, b
        counts = [Counter(tokenize(text)) for text in texts]
        self.lengths = [sum(c.values()) for c in counts]
        self.average_length = (sum(self.lengths) / len(self.lengths)) if self.lengths else 0.0
        self.postings: dict[str, list[tuple[int, int]]] = {}
        for position, counter in enumerate(counts):
            for term, frequency in counter.items():
                self.postings.setdefault(term, []).append((position, frequency))
        documents = len(texts)
        self.idf = {term: math.log(1 + (documents - len(p) + 0.5) / (len(p) + 0.5)) for term, p in self.postings.items()}

    def scores(self, query: str) -> dict[int, float]:
        totals: dict[int, float] = {}
        for term in set(tokenize(query)):
            idf = self.idf.get(term)
            if idf is None:
                continue
            for position, frequency in self.postings[term]:
                norm = self.k1 * (1 - self.b + self.b * self.lengths[position] / self.average_length)
                totals[position] = totals.get(position, 0.0) + idf * frequency * (self.k1 + 1) / (frequency + norm)
        return totals

    def top(self, query: str, limit: int = 10) -> list[int]:
        totals = self.scores(query)
        return sorted(totals, key=lambda position: (-totals[position], position))[:limit]


def bm25_rankings(ids: Sequence[str], texts: Sequence[str], queries: Sequence[str], limit: int = 10) -> dict[str, list[str]]:
    """Each distinct query's top ``limit`` ids by BM25 over ``texts`` (``ids[i]`` names ``texts[i]``)."""
    index = BM25(texts)
    return {query: [ids[p] for p in index.top(query, limit)] for query in dict.fromkeys(queries)}


class BareModel:
    """The sentence-transformers model alone, normalized vectors, with an optional vector cache folder."""

    def __init__(self, cache: Path | None = None) -> None:
        self.cache = cache
        self._model: Any = None

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        path = self._cached(texts)
        if path is not None and path.is_file():
            kept: np.ndarray = np.load(path)
            return kept
        if self._model is None:
            self._model = load_sentence_transformer(local_model_path(MODEL))
        vectors = np.asarray(
            self._model.encode(list(texts), batch_size=32, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False),
            dtype=np.float32,
        )
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            np.save(path, vectors)
        return vectors

    def _cached(self, texts: Sequence[str]) -> Path | None:
        if self.cache is None:
            return None
        digest = hashlib.sha256(MODEL.encode())
        for text in texts:
            digest.update(hashlib.sha256(text.encode()).digest())
        return self.cache / f"bare-{digest.hexdigest()[:24]}.npy"


def dense_rankings(model: BareModel, ids: Sequence[str], texts: Sequence[str], queries: Sequence[str], limit: int = 10) -> dict[str, list[str]]:
    """Each distinct query's top ``limit`` ids by cosine between the model's vectors of query and text."""
    distinct = list(dict.fromkeys(queries))
    items = model.encode(texts)
    asked = getattr(model, "encode_queries", model.encode)(distinct)  # a runtime's own query path, where it has one
    rankings: dict[str, list[str]] = {}
    for start in range(0, len(distinct), 1024):
        similarities = asked[start : start + 1024] @ items.T
        best = np.argsort(-similarities, axis=1, kind="stable")[:, :limit]
        for offset, row in enumerate(best):
            rankings[distinct[start + offset]] = [ids[int(p)] for p in row]
    return rankings

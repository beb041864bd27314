"""Document views: a record's one stored vector, composed from the embedding of its whole text and of its name.

A record may carry, besides ``embed_text``, an ``embed_name``: what it is called, read as words
(``search_issues`` -> "search issues"). Its vector is then the unit-length sum of the two
embeddings, the name's weighted by ``NAME_WEIGHT``: ``normalize(E(text) + w * E(name))``. The
cosine of a query against that vector is, up to the vector's norm, the sum of its cosines against
the whole text and against the name alone: a field-weighted dense match, in one vector, so the
store, its searches and its indexes stay as they are.

Why: a record's embedded text is its name followed by a description, parameters and context, and
the model's mean pooling lets the long part drown the name; an agent's words, though, often meet
the name most directly ("check the weather" -> ``get_weather``). Measured with the bare model on
the MetaTool tools (199 tools as "name: description", queries from a seed-99 sample of 2,000
single-tool questions and all 497 two-tool requests), nDCG@10 single / two-tool, and "both tools in
the top 5" on the two-tool set:

| vector | single | two-tool | both in top 5 |
|---|---:|---:|---:|
| text alone | 0.691 | 0.575 | 0.322 |
| text + 0.2 name | 0.694 | 0.614 | 0.372 |
| text + 0.35 name | 0.692 | 0.631 | 0.409 |
| text + 0.5 name | 0.690 | 0.642 | 0.435 |
| text + 0.7 name | 0.681 | 0.653 | 0.447 |

Past 0.5 the single-tool questions start to lose (a record whose name says little, such as a
product name, drifts toward the names of others); 0.4 keeps them level and takes most of the
multi-intent gain. Repeating the name in the text instead ("name. name: description") lost
(0.648 / 0.503): the model reads a repetition as a different sentence, not as a weight.

The name is part of the record's content hash (``records.content_hash``), so a new name re-embeds
the record; a record with no name keeps the hash and vector it had.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from service.engine.embeddings import Embedder

NAME_WEIGHT = 0.4


class Document(NamedTuple):
    """What one record's vector is computed from: its text and, optionally, its name."""

    text: str
    name: str = ""


def document(payload: Mapping[str, Any]) -> Document:
    """A stored record's ``Document``, from its ``embed_text`` and ``embed_name`` fields."""
    return Document(str(payload.get("embed_text", "")), str(payload.get("embed_name") or ""))


def compose(text_vector: Sequence[float], name_vector: Sequence[float], weight: float = NAME_WEIGHT) -> list[float]:
    """The unit-length ``text_vector + weight * name_vector``."""
    total = np.asarray(text_vector, dtype=np.float32) + weight * np.asarray(name_vector, dtype=np.float32)
    norm = float(np.linalg.norm(total)) or 1.0
    return [float(x) for x in total / norm]


async def embed_views(embedder: Embedder, documents: Sequence[Document]) -> list[list[float]]:
    """Each document's vector: its text's embedding, composed with its name's where it has one.

    Two encode calls at most (texts, then the names, which are short); the vectors come back in
    the documents' order."""
    vectors = await embedder.embed_documents([doc.text for doc in documents])
    named = [position for position, doc in enumerate(documents) if doc.name]
    if named:
        name_vectors = await embedder.embed_documents([documents[position].name for position in named])
        for position, name_vector in zip(named, name_vectors, strict=True):
            vectors[position] = compose(vectors[position], name_vector)
    return vectors


__all__ = ["NAME_WEIGHT", "Document", "compose", "document", "embed_views"]

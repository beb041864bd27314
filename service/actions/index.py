"""The in-memory lexical index of the action catalog: words, a shared vocabulary and inverted postings.

Keyword + Jaro-Winkler scoring must cover every visible (service, action) pair, and with
``include_catalog`` that is the whole catalog (124,730 actions). Scoring each pair's strings one
by one would cost seconds; instead:

- every template is tokenized once, when it is loaded or changed, into a ``TemplateBlock``
  (action-name words, description words, service words, the service's context words: its
  description and categories, as ids of one append-only ``Vocabulary``);
- the blocks are compiled into an immutable ``ActionIndex``: the catalog's actions in one order,
  plus inverted postings (word id -> actions holding it) for names and descriptions and
  (word id -> templates) for service and service-context words. Compiling is concatenations and an argsort (~1 s for
  the full catalog on 2 busy cores), done lazily after a change;
- a query word is compared with the whole vocabulary once (rapidfuzz ``cdist``, Jaro-Winkler,
  ~1.5 ms for the catalog's 17,305 distinct words, cached), and the postings of the words it
  matched spread its best similarity to every action at once (``ActionIndex.best_over``).

What the model embeds for an action (``embed_text``) is its own text first, then its service's:

    <action name humanized>: <description> (<service display name>: <categories>; <service summary>)

the service summary being the first sentence of the service's description, at most
``SERVICE_SUMMARY_WORDS`` words. The whole stays within ``EMBED_MAX_WORDS`` words (~1.4 word pieces
a word on this catalog, so within the model's 256): a long action description is cut, never the
service part. ``EMBED_TEXT_LAYOUT`` names this layout; a template's revision carries it, so a new
layout makes the next catalog load rewrite every action and re-embed those whose text changed.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
from rapidfuzz import process
from rapidfuzz.distance import JaroWinkler

from service.actions.model import ActionDef, Risk, TemplateAuth, TemplateDef
from service.engine.analyzer import STOPWORDS

# camelCase / PascalCase / snake_case / digits: "getAuditEvents" -> get audit events, "v0.1_Call" -> v 0 1 call.
_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
# Host-name suffixes in template keys ("stripe.com") say nothing about a service.
_SERVICE_NOISE = frozenset({"com", "org", "net", "io", "www", "local", "co", "dev", "app"})

FUZZY_CUTOFF = 0.85
"""Jaro-Winkler similarity at or above which two different words count as a (typo) match."""
FUZZY_MIN_CHARS = 4
"""Shorter words match exactly only: at three letters Jaro-Winkler cannot tell a typo from another word."""
_MATCH_CACHE_SIZE = 4096

EMBED_TEXT_LAYOUT = 2
"""The layout of ``embed_text``; bump it with any change there (1: name, description, display name)."""
EMBED_MAX_WORDS = 160
"""The embedded text's length bound in words: within the model's 256 word pieces."""
SERVICE_SUMMARY_WORDS = 12
"""Words of the service description in an action's embedded text: enough to say what the service is;
more dilutes what tells the service's actions apart."""


def words(text: str) -> list[str]:
    """Lowercase ASCII words of ``text``, identifiers split at case changes, digits and separators."""
    if not text.isascii():
        text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    return [w.lower() for w in _WORD.findall(text)]


def query_words(query: str, max_words: int = 16) -> list[str]:
    """The query's distinct words without stopwords (kept when nothing else is left)."""
    all_words = list(dict.fromkeys(words(query)))
    # Stopwords and stray letters ("what's" -> what, s) carry no intent; numbers do.
    kept = [w for w in all_words if w not in STOPWORDS and (len(w) > 1 or w.isdigit())] or all_words
    return kept[:max_words]


def humanize(action: str) -> str:
    """``getAuditEvents`` -> ``get audit events``: the form names are compared and embedded in."""
    return " ".join(words(action)) or action.lower()


def service_words(*texts: str) -> list[str]:
    return [w for text in texts for w in words(text) if w not in _SERVICE_NOISE]


def content_words(items: Iterable[str]) -> set[str]:
    """The distinct words a query could ask for: no stopwords, no stray letters (numbers stay)."""
    return {w for w in items if w not in STOPWORDS and (len(w) > 1 or w.isdigit())}


def context_words(template: TemplateDef) -> list[str]:
    """Words of a service's description and categories: the context an action's own words lack."""
    return words(" ".join((template.description, *template.categories)))


def first_sentence(text: str, max_words: int) -> str:
    """The first sentence of ``text``, at most ``max_words`` words, whitespace collapsed."""
    flat = " ".join(text.split())
    end = flat.find(". ")
    sentence = flat[: end + 1] if end >= 0 else flat
    return " ".join(sentence.split()[:max_words])


def service_context(template: TemplateDef) -> str:
    """How an action's embedded text names its service: display name, categories, the service summary."""
    categories = ", ".join(" ".join(words(c)) for c in template.categories if words(c))
    detail = "; ".join(part for part in (categories, first_sentence(template.description, SERVICE_SUMMARY_WORDS)) if part)
    return f"{template.display_name}: {detail}" if detail else template.display_name


def embed_text(action: ActionDef, template: TemplateDef) -> str:
    """What the model embeds for an action (the layout in the module docstring). Changes only with its inputs."""
    head = humanize(action.name)
    context = service_context(template)
    budget = EMBED_MAX_WORDS - len(head.split()) - len(context.split())
    description = " ".join(action.description.split()[: max(0, budget)])
    body = f"{head}: {description}" if description else head
    return f"{body} ({context})"


def action_terms(template: TemplateDef, action: ActionDef) -> str:
    """The BM25 ``terms`` of an action: lowercase words joined by spaces, as the store contract wants."""
    own = words(action.name) + words(action.description)
    return " ".join(own + service_words(template.key, template.display_name) + context_words(template))


def service_context_of(template: TemplateDef) -> tuple[str, str, tuple[str, ...], int]:
    """What of the service its actions' texts and terms hold, in the current layout: a change means rewriting them."""
    return (template.display_name, template.description, template.categories, EMBED_TEXT_LAYOUT)


def template_revision(template: TemplateDef) -> str:
    """A digest of everything a template holds, and of the embedded-text layout: front ends compare it to find what changed."""
    data = {
        "embed_layout": EMBED_TEXT_LAYOUT,
        "display_name": template.display_name,
        "description": template.description,
        "categories": list(template.categories),
        "auth": [template.auth.type.value, template.auth.provider],
        "actions": [[a.name, a.description, a.risk.value, a.method, a.path] for a in sorted(template.actions, key=lambda a: a.name)],
    }
    return hashlib.sha256(orjson.dumps(data)).hexdigest()[:24]


class Vocabulary:
    """Word <-> id, append-only, shared by every block; fuzzy matches of query words are cached."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self.words: list[str] = []
        self._matches: OrderedDict[str, tuple[int, np.ndarray, np.ndarray]] = OrderedDict()

    def __len__(self) -> int:
        return len(self.words)

    def ids(self, items: Iterable[str]) -> np.ndarray:
        """Ids of the distinct words of ``items`` (added when new), in first-seen order."""
        out = []
        for word in dict.fromkeys(items):
            wid = self._ids.get(word)
            if wid is None:
                wid = self._ids[word] = len(self.words)
                self.words.append(word)
            out.append(wid)
        return np.asarray(out, dtype=np.int32)

    def encode(self, groups: Sequence[Sequence[str]]) -> tuple[np.ndarray, np.ndarray]:
        """Ids of every word of every group as CSR arrays (flat ids, ptr); repeats are harmless to postings."""
        ids, known = self._ids, self.words
        flat: list[int] = []
        for group in groups:
            for word in group:
                wid = ids.get(word)
                if wid is None:
                    wid = ids[word] = len(known)
                    known.append(word)
                flat.append(wid)
        ptr = np.zeros(len(groups) + 1, dtype=np.int64)
        ptr[1:] = np.cumsum([len(g) for g in groups])
        return np.asarray(flat, dtype=np.int32), ptr

    def match(self, word: str) -> tuple[np.ndarray, np.ndarray]:
        """(word ids, similarities): the word itself (1.0) and every vocabulary word within Jaro-Winkler reach."""
        cached = self._matches.get(word)
        if cached is not None and cached[0] == len(self.words):
            self._matches.move_to_end(word)
            return cached[1], cached[2]
        ids, sims = self._compute_match(word)
        self._matches[word] = (len(self.words), ids, sims)
        while len(self._matches) > _MATCH_CACHE_SIZE:
            self._matches.popitem(last=False)
        return ids, sims

    def _compute_match(self, word: str) -> tuple[np.ndarray, np.ndarray]:
        found: dict[int, float] = {}
        for variant in (word, word + "s", word + "es", word[:-1] if word.endswith("s") else ""):
            wid = self._ids.get(variant)
            if wid is not None:
                found[wid] = 1.0 if variant == word else 0.95
        if len(word) >= FUZZY_MIN_CHARS and self.words:
            sims = process.cdist([word], self.words, scorer=JaroWinkler.normalized_similarity, score_cutoff=FUZZY_CUTOFF, dtype=np.float32)[0]
            for wid in np.flatnonzero(sims).tolist():
                found.setdefault(wid, float(sims[wid]))
        ids = np.fromiter(found.keys(), dtype=np.int32, count=len(found))
        values = np.fromiter(found.values(), dtype=np.float32, count=len(found))
        return ids, values


RISK_ORDER = (Risk.READ, Risk.WRITE, Risk.DELETE)
"""Risk codes: the position in this tuple (0 read, 1 write, 2 delete)."""


@dataclass(frozen=True)
class ActionColumns:
    """A template's actions as parallel columns sorted by name: compact to store and to keep in memory.

    Holding 124,730 actions as columns of strings (not one object each) keeps the garbage
    collector from walking them: a full collection over per-action objects paused queries ~0.4 s.
    """

    names: tuple[str, ...]
    descriptions: tuple[str, ...]
    risks: tuple[int, ...]
    methods: tuple[str | None, ...]
    paths: tuple[str | None, ...]

    @classmethod
    def of(cls, actions: Iterable[ActionDef]) -> ActionColumns:
        ordered = sorted(actions, key=lambda a: a.name)
        return cls(
            names=tuple(a.name for a in ordered),
            descriptions=tuple(a.description for a in ordered),
            risks=tuple(RISK_ORDER.index(a.risk) for a in ordered),
            methods=tuple(a.method for a in ordered),
            paths=tuple(a.path for a in ordered),
        )

    @classmethod
    def from_payload(cls, data: Mapping[str, Any]) -> ActionColumns:
        names = tuple(data["names"])
        return cls(
            names=names,
            descriptions=tuple(data["descriptions"]),
            risks=tuple(int(r) for r in data["risks"]),
            methods=tuple(data.get("methods") or (None,) * len(names)),
            paths=tuple(data.get("paths") or (None,) * len(names)),
        )

    def to_payload(self) -> dict[str, list[Any]]:
        return {
            "names": list(self.names),
            "descriptions": list(self.descriptions),
            "risks": list(self.risks),
            "methods": list(self.methods),
            "paths": list(self.paths),
        }

    def __len__(self) -> int:
        return len(self.names)

    def action(self, position: int) -> ActionDef:
        return ActionDef(self.names[position], self.descriptions[position], RISK_ORDER[self.risks[position]], self.methods[position], self.paths[position])


@dataclass(frozen=True)
class TemplateBlock:
    """One template, tokenized: its action columns and their words as vocabulary ids (CSR arrays)."""

    key: str
    display_name: str
    description: str
    categories: tuple[str, ...]
    auth: TemplateAuth
    revision: str
    embed_layout: int
    """The ``EMBED_TEXT_LAYOUT`` its stored action records were written with."""
    columns: ActionColumns
    name_norm: tuple[str, ...]
    name_tok: np.ndarray
    name_ptr: np.ndarray
    text_tok: np.ndarray
    text_ptr: np.ndarray
    name_size: np.ndarray
    """Per action, the distinct content words of its name (at least 1)."""
    text_size: np.ndarray
    """Per action, the distinct content words of its description (at least 1)."""
    service_tok: np.ndarray
    context_tok: np.ndarray
    positions: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def build(
        cls, template: TemplateDef, revision: str, vocab: Vocabulary, columns: ActionColumns | None = None, embed_layout: int = EMBED_TEXT_LAYOUT
    ) -> TemplateBlock:
        """Tokenize a template; ``columns`` (already sorted) saves converting ``template.actions``."""
        columns = columns if columns is not None else ActionColumns.of(template.actions)
        name_words = [words(name) for name in columns.names]
        text_words = [words(d) if d else [] for d in columns.descriptions]
        name_tok, name_ptr = vocab.encode(name_words)
        text_tok, text_ptr = vocab.encode(text_words)
        return cls(
            key=template.key,
            display_name=template.display_name,
            description=template.description,
            categories=template.categories,
            auth=template.auth,
            revision=revision,
            embed_layout=embed_layout,
            columns=columns,
            name_norm=tuple(" ".join(w) or n.lower() for w, n in zip(name_words, columns.names, strict=True)),
            name_tok=name_tok,
            name_ptr=name_ptr,
            text_tok=text_tok,
            text_ptr=text_ptr,
            name_size=np.fromiter((max(1, len(content_words(w))) for w in name_words), dtype=np.float32, count=len(name_words)),
            text_size=np.fromiter((max(1, len(content_words(w))) for w in text_words), dtype=np.float32, count=len(text_words)),
            service_tok=vocab.ids(service_words(template.key, template.display_name)),
            context_tok=vocab.ids(sorted(content_words(context_words(template)))),
            positions={name: i for i, name in enumerate(columns.names)},
        )

    def service_context_of(self) -> tuple[str, str, tuple[str, ...], int]:
        """What of the service its stored actions' texts hold, and in which layout (see ``service_context_of``)."""
        return (self.display_name, self.description, self.categories, self.embed_layout)

    def __len__(self) -> int:
        return len(self.columns)

    def action(self, name: str) -> ActionDef | None:
        position = self.positions.get(name)
        return None if position is None else self.columns.action(position)


@dataclass(frozen=True)
class Postings:
    """word id -> the items (actions or templates) holding it, as CSR arrays."""

    ptr: np.ndarray
    items: np.ndarray

    @classmethod
    def invert(cls, tokens: np.ndarray, owners: np.ndarray, vocab_size: int) -> Postings:
        order = np.argsort(tokens, kind="stable")
        ptr = np.zeros(vocab_size + 1, dtype=np.int64)
        ptr[1:] = np.cumsum(np.bincount(tokens, minlength=vocab_size))
        return cls(ptr=ptr, items=owners[order].astype(np.int32))


class ActionIndex:
    """An immutable compiled view of every template block, in template-key order."""

    def __init__(self, blocks: Iterable[TemplateBlock], vocab: Vocabulary) -> None:
        self.blocks: list[TemplateBlock] = sorted(blocks, key=lambda b: b.key)
        self.vocab = vocab
        self.vocab_size = len(vocab)
        self.template_pos = {b.key: i for i, b in enumerate(self.blocks)}
        counts = np.array([len(b) for b in self.blocks], dtype=np.int64)
        self.starts = np.zeros(len(self.blocks) + 1, dtype=np.int64)
        self.starts[1:] = np.cumsum(counts)
        self.size = int(self.starts[-1])
        self.action_template = np.repeat(np.arange(len(self.blocks), dtype=np.int32), counts)
        self.name_norm: list[str] = [n for b in self.blocks for n in b.name_norm]
        self.risk_code = np.array([r for b in self.blocks for r in b.columns.risks], dtype=np.int8)
        self.names = self._invert_actions([(b.name_tok, b.name_ptr) for b in self.blocks])
        self.texts = self._invert_actions([(b.text_tok, b.text_ptr) for b in self.blocks])
        self.name_size = np.concatenate([b.name_size for b in self.blocks]) if self.blocks else np.zeros(0, np.float32)
        self.text_size = np.concatenate([b.text_size for b in self.blocks]) if self.blocks else np.zeros(0, np.float32)
        self.services = self._invert_templates([b.service_tok for b in self.blocks])
        self.contexts = self._invert_templates([b.context_tok for b in self.blocks])

    def _invert_templates(self, tokens: list[np.ndarray]) -> Postings:
        counts = np.array([len(t) for t in tokens], dtype=np.int64)
        flat = np.concatenate(tokens) if tokens else np.zeros(0, np.int32)
        owners = np.repeat(np.arange(len(tokens), dtype=np.int32), counts)
        return Postings.invert(flat, owners, self.vocab_size)

    def _invert_actions(self, parts: list[tuple[np.ndarray, np.ndarray]]) -> Postings:
        if not parts:
            return Postings.invert(np.zeros(0, np.int32), np.zeros(0, np.int32), self.vocab_size)
        tokens = np.concatenate([tok for tok, _ in parts])
        per_action = np.concatenate([np.diff(ptr) for _, ptr in parts])
        owners = np.repeat(np.arange(self.size, dtype=np.int32), per_action)
        return Postings.invert(tokens, owners, self.vocab_size)

    def block(self, template_idx: int) -> TemplateBlock:
        return self.blocks[template_idx]

    def locate(self, template: str, action: str) -> int | None:
        """The global index of an action, or None when the catalog no longer has it."""
        t = self.template_pos.get(template)
        if t is None:
            return None
        position = self.blocks[t].positions.get(action)
        return None if position is None else int(self.starts[t]) + position

    def action_at(self, idx: int) -> tuple[TemplateBlock, ActionDef]:
        t = int(self.action_template[idx])
        block = self.blocks[t]
        return block, block.columns.action(idx - int(self.starts[t]))

    def match(self, word: str) -> tuple[np.ndarray, np.ndarray]:
        """The vocabulary matches of a query word that this compiled view knows."""
        ids, sims = self.vocab.match(word)
        known = ids < self.vocab_size
        return ids[known], sims[known]

    @staticmethod
    def best_over(postings: Postings, ids: np.ndarray, sims: np.ndarray, size: int) -> np.ndarray:
        """Per item, the best similarity among the matched words it holds (0 when none)."""
        best = np.zeros(size, dtype=np.float32)
        for wid, sim in sorted(zip(ids.tolist(), sims.tolist(), strict=True), key=lambda pair: pair[1]):
            # Ascending similarity: a later (better) match overwrites an earlier one.
            best[postings.items[postings.ptr[wid] : postings.ptr[wid + 1]]] = sim
        return best


def word_similarity(word: str, candidates: Iterable[str]) -> float:
    """The best similarity of a query word to any of ``candidates``, by the vocabulary's rules."""
    best = 0.0
    for candidate in candidates:
        if candidate == word:
            return 1.0
        if candidate in (word + "s", word + "es") or word == candidate + "s":
            best = max(best, 0.95)
        elif len(word) >= FUZZY_MIN_CHARS:
            best = max(best, JaroWinkler.normalized_similarity(word, candidate, score_cutoff=FUZZY_CUTOFF))
    return best

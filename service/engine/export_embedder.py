"""The local model served from its ONNX export on disk alone, never torch: a one-shot process's embedder.

Loading torch and the packaged model costs a one-shot ``agentsearch search`` seconds; the ONNX export
that a service or ``agentsearch index --embed`` left in the model-artifact directory
(``onnx_encoder.artifact_path``) loads in a fraction of that. ``ExportEmbedder`` serves queries and
documents through that file only (ONNX and torch vectors agree within ``onnx_encoder.MIN_COSINE``).
Without the file, or with one onnxruntime cannot load, it fails at once with ``EmbeddingUnavailable``
saying how to get it, and search answers lexically with that notice: it never waits for torch.

The export was checked against torch by the process that made it; here each loaded file is checked
only for what needs no torch: one unit-length vector of the model's dimension per text.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
from pathlib import Path
from typing import Any

import numpy as np

from service.engine import onnx_encoder
from service.engine.embeddings import (
    _LOCAL_MODELS,
    _LOCAL_PACKAGES,
    LOCAL_PROVIDER,
    LocalEmbedder,
    local_max_tokens,
    local_model_path,
)
from service.errors import EmbeddingUnavailable


def export_path(model: str, artifact_dir: Path) -> Path | None:
    """Where the export of local model ``model`` (``local/<id>``) lives; None for any other model."""
    provider, _, model_id = model.partition("/")
    if provider != LOCAL_PROVIDER or model_id not in _LOCAL_MODELS:
        return None
    version = importlib.metadata.version(_LOCAL_PACKAGES[model_id])
    return onnx_encoder.artifact_path(artifact_dir, model_id, version)


class ExportEmbedder(LocalEmbedder):
    """A ``LocalEmbedder`` whose only runtime is the ONNX export at ``export``."""

    def __init__(self, model_id: str, export: Path, *, cache_size: int = 2048, hint: str = "") -> None:
        super().__init__(model_id, cache_size=cache_size, artifact_dir=None)
        self._export = export
        self._hint = hint
        self._loading: asyncio.Task[None] | None = None

    @property
    def runtime(self) -> str:
        return "onnx"

    def preload(self) -> None:
        """Start loading now, in a thread, so the file is open by the time a query needs it."""
        if self._loading is None:
            self._loading = asyncio.get_running_loop().create_task(self._load_quietly())

    async def _load_quietly(self) -> None:
        with contextlib.suppress(EmbeddingUnavailable):  # remembered as failed: the first query gets the notice
            await self.load()

    async def load(self) -> None:
        async with self._lock:
            if self._model is not None or self._state == "failed":
                if self._state == "failed":
                    raise EmbeddingUnavailable(self._error or "the embedding model's ONNX export is unavailable")
                return
            self._state = "loading"
            try:
                self._onnx = await asyncio.to_thread(self._open)
            except EmbeddingUnavailable as exc:
                self._state, self._error = "failed", str(exc)
                raise
            self._model = self._onnx
            self._state = "ready"

    def _open(self) -> onnx_encoder.OnnxEncoder:
        if not self._export.is_file():
            raise EmbeddingUnavailable(f"the model is not prepared for one-shot searches here{self._hint}")
        model_dir = Path(local_model_path(self._model_id))
        try:
            encoder = onnx_encoder.OnnxEncoder(self._export, model_dir, local_max_tokens(model_dir))
            vectors = encoder.encode(["a short probe text"])
        except Exception as exc:  # onnxruntime raises its own types for a truncated or foreign file
            raise EmbeddingUnavailable(f"the model's ONNX export {self._export} does not load ({type(exc).__name__}){self._hint}") from None
        norm = float(np.linalg.norm(vectors[0])) if vectors.shape == (1, self.dimensions) else 0.0
        if abs(norm - 1.0) > 1e-3:
            raise EmbeddingUnavailable(f"the model's ONNX export {self._export} returns vectors of shape {vectors.shape}, not unit {self.dimensions}-d ones{self._hint}")
        return encoder

    def _encode_slice(self, texts: list[str]) -> Any:
        assert self._onnx is not None
        with self._encode_lock:
            return self._onnx.encode(texts)

    async def close(self) -> None:
        if self._loading is not None and not self._loading.done():
            await asyncio.gather(self._loading, return_exceptions=True)  # its thread must end before the interpreter


__all__ = ["ExportEmbedder", "export_path"]

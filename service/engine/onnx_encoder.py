"""The local model's ONNX twin: exported once into the model-artifact directory, checked against torch, run by onnxruntime; and its int8 twin for queries.

The export (``torch.onnx`` of the packaged model with its mean pooling and normalisation, opset
``OPSET``) runs in a child process, ``python -m service.engine.onnx_encoder EXPORT_TO MODEL_DIR``:
tracing holds the GIL for seconds and raises warnings, neither of which may reach the service. The
child writes a temporary file beside the target and links it into place (``os.link`` refuses to
overwrite): a crash mid-export leaves no file under the target name, and of two processes exporting
at once the first link wins and the other uses the winner's file.

Before an export serves, ``prepare`` encodes ``PROBES`` both ways; a probe whose ONNX vector lies
below ``MIN_COSINE`` of torch's, a file onnxruntime cannot load or an export that fails raise
``OnnxUnavailable`` with the reason, and the caller keeps torch. A passed check keeps torch's probe
vectors beside the export (``reference_path``), and a later process checks the export against
those (``prepare_from_reference``) without loading torch at all. A process keeps one checked
encoder per file (and reuses it for an artifact directory that lacks the file, rather than export
the same model again).

Which path is faster depends on the text length. Measured by ``python -m bench.bench_embedding
--runtimes-only --rounds 5`` (2 cores shared with other work, load 2-3; fp32; batches of 32 texts;
ms per text, median of 5 alternating rounds):

==============  =====  =====  ==========  ==========
tokens (each)   torch  ONNX   torch/ONNX  served by
==============  =====  =====  ==========  ==========
16              2.55   2.34   1.09        ONNX
64              11.59  8.80   1.32        ONNX
128             27.26  23.36  1.17        ONNX
192             37.46  34.94  1.07        ONNX
256             83.61  101.0  0.83        torch
==============  =====  =====  ==========  ==========

So ``ONNX_MAX_TOKENS``: a slice (queries or documents) whose longest text has at most 192 tokens
goes through ONNX, a longer one through torch. One query: 5.8 ms p50 against torch's 17.1 ms (the
same run; ``BENCHMARKS.md``). Vectors agree either way (every probe at cosine >= ``MIN_COSINE``), so a
record's vector does not depend on the path that made it.

Queries go through an int8 twin of the export (``prepare_quantized``): the fp32 export's weights
quantised per output channel (``quantize_dynamic``, signed 8-bit, one scale per channel), in a child
process like the export, checked against the fp32 export on the same probes (cosine >= ``INT8_MIN_COSINE``
each) and kept beside it (``quantized_path``). One short query takes 1.65 ms against 3.85 through
fp32 (20 queries x 8, one process, 2 cores); a single query's cost is reading the weights, a
quarter the size in int8. Documents stay fp32, so the stored vectors do not change. Bare dense
ranking with int8 queries against fp32 documents (nDCG@10, fp32 -> int8): MetaTool single-tool
0.6734 -> 0.6725, two-tool 0.5565 -> 0.5551, CoSQA dev quick 0.7693 -> 0.7683, every query at
cosine >= 0.98 of its fp32 vector. One scale per whole tensor instead (the default) lost 0.0070 on
CoSQA, over the 0.005 bar, with queries down to cosine 0.88: per-channel scales are what make int8
usable here.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

OPSET = 17
MIN_COSINE = 0.999
# The int8 twin against the fp32 export, per probe: measured 0.980 at worst (the one-letter probe).
INT8_MIN_COSINE = 0.97
# A slice whose longest text has at most this many tokens is encoded by ONNX, a longer one by torch.
ONNX_MAX_TOKENS = 192
EXPORT_TIMEOUT_S = 600.0
# The int8 twin encodes queries on one thread: a short query took 2.45 ms on one and 2.49 on two,
# and four callers got 672 queries/s against 572, leaving the other core to the GIL's holder (the
# fp32 export keeps onnxruntime's default, one thread per core: 5.3 ms against 9.8 on one).
INT8_THREADS = 1
# How often a running export checks whether the process is shutting down.
_STOP_POLL_S = 0.2
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
# Short, long (past the 256-token truncation), non-ASCII and code: where tokenisation could differ.
PROBES = (
    "send an email to a colleague",
    "x",
    "def read_config(path: str) -> dict[str, Any]:\n    with open(path) as f:\n        return yaml.safe_load(f)",
    "Déjà vu: naïve café résumé, 東京 and Москва in one line",
    " ".join(f"word{i} of a long document that runs past the truncation limit" for i in range(60)),
)


class OnnxUnavailable(Exception):
    """The ONNX export cannot serve (export failed, file unloadable, a probe disagrees); the message says why."""


class OnnxStopped(OnnxUnavailable):
    """The preparation was stopped because the process is shutting down (not a fault of the export)."""


@dataclass(frozen=True)
class Batch:
    """Texts tokenised for one run: the padded feeds and the longest text's token count."""

    feeds: dict[str, np.ndarray]
    longest: int


class OnnxEncoder:
    """One onnxruntime session of an export, with the model's own tokenizer (truncation at ``max_tokens``)."""

    def __init__(self, path: Path, model_dir: Path, max_tokens: int, *, threads: int = 0) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        self.path = path
        self.calls = 0
        """Runs of the session: tests count them to see batching."""
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3  # errors only: onnxruntime's own warnings are not ours to show
        # Idle threads sleep rather than spin: the cores are shared with the event loop, torch and the workers.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.intra_op_num_threads = threads  # 0: onnxruntime's default, one per core
        self._session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self._tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self._tokenizer.enable_truncation(max_length=max_tokens)
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")

    def tokenize(self, texts: Sequence[str]) -> Batch:
        encodings = self._tokenizer.encode_batch(list(texts))
        feeds = {
            "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
        }
        return Batch(feeds, int(feeds["attention_mask"].sum(axis=1).max()) if encodings else 0)

    def run(self, batch: Batch) -> np.ndarray:
        """Unit-length vectors, one row per text."""
        self.calls += 1
        vectors: np.ndarray = self._session.run(["embedding"], batch.feeds)[0]
        return vectors

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return self.run(self.tokenize(texts))


def artifact_path(artifact_dir: Path, model_id: str, package_version: str) -> Path:
    """``<artifact_dir>/<model slug>-<package version>-opset<OPSET>.onnx``: a new model package or opset is a new file."""
    slug = "".join(c if c.isalnum() else "-" for c in model_id.lower()).strip("-")
    return artifact_dir / f"{slug}-{package_version}-opset{OPSET}.onnx"


# Checked encoders of this process, by (path, size, mtime): a file replaced on disk is checked afresh.
_checked: dict[tuple[str, int, int], OnnxEncoder] = {}
# The same, by file name (model, version, opset): reused for a directory that lacks the file.
_checked_by_name: dict[str, OnnxEncoder] = {}
_prepare_lock = threading.Lock()


def prepare(
    model_dir: Path,
    target: Path,
    reference: Callable[[list[str]], np.ndarray],
    *,
    max_tokens: int,
    stop: threading.Event | None = None,
) -> OnnxEncoder:
    """The checked encoder of ``target``, exported first if absent; ``OnnxUnavailable`` says why not.

    ``reference`` encodes texts with torch (unit-length rows); ``stop`` set ends a running export
    (the process is shutting down). Blocking: run it in a thread."""
    with _prepare_lock:
        if not target.exists():
            held = _checked_by_name.get(target.name)
            if held is not None:
                return held
            export(model_dir, target, stop=stop)
        encoder = _checked_file(target, model_dir, max_tokens, stop, lambda made: save_reference(target, check(made, reference)))
        _checked_by_name[target.name] = encoder
        return encoder


def _checked_file(
    target: Path, model_dir: Path, max_tokens: int, stop: threading.Event | None, verify: Callable[[OnnxEncoder], object], *, threads: int = 0
) -> OnnxEncoder:
    """The encoder of ``target``, loaded and passed by ``verify`` once per file version (``_checked``);
    call it holding ``_prepare_lock``."""
    if stop is not None and stop.is_set():
        raise OnnxStopped("the process is shutting down")
    key = _file_key(target)
    encoder = _checked.get(key)
    if encoder is None:
        encoder = _load(target, model_dir, max_tokens, threads)
        verify(encoder)
        _checked[key] = encoder
    return encoder


def reference_path(target: Path) -> Path:
    """Where torch's vectors of ``PROBES`` for the export ``target`` are kept (its model and version)."""
    return target.with_name(target.name + ".torch-probes.npz")


def save_reference(target: Path, vectors: np.ndarray) -> None:
    """Keep torch's vectors of ``PROBES`` beside the export, so a later process checks the export
    against them without loading torch (``prepare_from_reference``); written whole or not at all."""
    path = reference_path(target)
    partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with partial.open("wb") as out:
            np.savez(out, probes=np.array(PROBES), vectors=vectors)
        os.replace(partial, path)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        log.warning("torch's probe vectors not kept beside the ONNX export", extra={"path": str(path), "error": str(exc)})


def prepare_from_reference(model_dir: Path, target: Path, *, max_tokens: int) -> OnnxEncoder:
    """The encoder of an existing export, checked against torch's probe vectors an earlier check
    kept beside it (no torch here); ``OnnxUnavailable`` says why not (no export, no vectors or other
    probes kept, or a probe that disagrees), and the caller checks with torch instead."""
    path = reference_path(target)
    if not target.exists() or not path.exists():
        raise OnnxUnavailable(f"no checked export at {target.name}")
    try:
        with np.load(path) as kept:
            probes, vectors = list(kept["probes"]), kept["vectors"]
    except (OSError, ValueError, KeyError) as exc:
        raise OnnxUnavailable(f"torch's probe vectors at {path.name} cannot be read: {_first_line(exc)}") from None
    if probes != list(PROBES):
        raise OnnxUnavailable(f"{path.name} holds the vectors of other probes")
    with _prepare_lock:
        encoder = _checked_file(target, model_dir, max_tokens, None, lambda made: check(made, lambda _: vectors))
        _checked_by_name[target.name] = encoder
        return encoder


def _file_key(path: Path) -> tuple[str, int, int]:
    stat = path.stat()
    return (str(path), stat.st_size, stat.st_mtime_ns)


def _load(path: Path, model_dir: Path, max_tokens: int, threads: int = 0) -> OnnxEncoder:
    try:
        return OnnxEncoder(path, model_dir, max_tokens, threads=threads)
    except Exception as exc:  # onnxruntime raises its own types for a truncated or foreign file
        raise OnnxUnavailable(f"onnxruntime cannot load {path.name}: {type(exc).__name__}: {_first_line(exc)}") from None


def check(
    encoder: OnnxEncoder,
    reference: Callable[[list[str]], np.ndarray],
    *,
    min_cosine: float = MIN_COSINE,
    against: str = "torch",
) -> np.ndarray:
    """Refuse an encoder whose vector of any probe lies below ``min_cosine`` of the reference's
    (``reference`` encodes them: torch, or for the int8 twin the fp32 export); returns the reference's vectors."""
    probes = list(PROBES)
    try:
        ours = encoder.encode(probes)
    except Exception as exc:  # a file that loads but does not run (wrong inputs or outputs)
        raise OnnxUnavailable(f"{encoder.path.name} does not run: {type(exc).__name__}: {_first_line(exc)}") from None
    theirs = reference(probes)
    if ours.shape != theirs.shape:
        raise OnnxUnavailable(f"{encoder.path.name} returns vectors of shape {ours.shape}, {against} {theirs.shape}")
    cosines = np.sum(ours * theirs, axis=1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(theirs, axis=1))
    worst = int(np.argmin(cosines))
    if not cosines[worst] >= min_cosine:
        raise OnnxUnavailable(f"{encoder.path.name} disagrees with {against} on probe {worst}: cosine {cosines[worst]:.4f} < {min_cosine}")
    return theirs


def export(model_dir: Path, target: Path, *, stop: threading.Event | None = None) -> None:
    """Export the model to ``target`` in a child process; ``OnnxUnavailable`` if it fails, ``OnnxStopped``
    (the child killed) once ``stop`` is set."""
    log.info("exporting the embedding model to ONNX", extra={"path": str(target)})
    _run_child([str(target), str(model_dir)], target, "the ONNX export", stop)


def quantized_path(target: Path) -> Path:
    """Where the int8 twin of the export ``target`` lives: beside it, named after it."""
    return target.with_name(f"{target.stem}-int8{target.suffix}")


def prepare_quantized(model_dir: Path, checked: OnnxEncoder, *, max_tokens: int, stop: threading.Event | None = None) -> OnnxEncoder:
    """The int8 twin of the checked fp32 encoder ``checked``, quantised first if absent and checked
    against ``checked`` on ``PROBES`` (``INT8_MIN_COSINE``); ``OnnxUnavailable`` says why not.
    Blocking: run it in a thread."""
    target = quantized_path(checked.path)
    with _prepare_lock:
        if not target.exists():
            log.info("quantising the ONNX export to int8 for queries", extra={"path": str(target)})
            _run_child(["--int8", str(target), str(checked.path)], target, "the int8 quantisation", stop)
        return _checked_file(
            target, model_dir, max_tokens, stop, lambda made: check(made, checked.encode, min_cosine=INT8_MIN_COSINE, against="the fp32 export"), threads=INT8_THREADS
        )


def _run_child(arguments: list[str], target: Path, what: str, stop: threading.Event | None) -> None:
    """Run this module as a child with ``arguments`` until it has written ``target``; ``OnnxUnavailable``
    (``what`` failed, or took over ``EXPORT_TIMEOUT_S``) or ``OnnxStopped`` (``stop`` set: the child killed)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    command = [sys.executable, "-m", __name__, *arguments]
    stop = stop or threading.Event()
    try:
        child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    except OSError as exc:
        raise OnnxUnavailable(f"{what} did not start: {exc}") from None
    with child:
        try:
            # communicate() reads stderr while waiting (a full pipe would stall the child); the short
            # timeout lets a shutdown end the child instead of waiting for it.
            deadline = time.monotonic() + EXPORT_TIMEOUT_S
            while True:
                try:
                    _, stderr = child.communicate(timeout=_STOP_POLL_S)
                    break
                except subprocess.TimeoutExpired:
                    if stop.is_set():
                        raise OnnxStopped("the process is shutting down") from None
                    if time.monotonic() > deadline:
                        raise OnnxUnavailable(f"{what} did not finish in {EXPORT_TIMEOUT_S:.0f} s") from None
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
    if child.returncode != 0 or not target.exists():
        tail = (stderr or "").strip().splitlines()[-1:] or [f"exit status {child.returncode}"]
        raise OnnxUnavailable(f"{what} failed: {tail[0]}")


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:200]


# ---- the export child -----------------------------------------------------------------------------


def export_here(model_dir: Path, target: Path) -> None:
    """Trace the model (transformer, mean pooling, normalisation) to ONNX and link it into place."""
    import warnings

    import torch
    from sentence_transformers import SentenceTransformer

    warnings.simplefilter("ignore")  # tracer and deprecation chatter: the check at load judges the result
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    model = SentenceTransformer(str(model_dir), device="cpu", local_files_only=True)
    transformer = model[0].auto_model

    class Pooled(torch.nn.Module):
        def __init__(self, transformer: Any) -> None:
            super().__init__()
            self.transformer = transformer

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            hidden = self.transformer(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1)

    sample = model.tokenizer(["a sample text", "a second, longer sample text"], padding=True, return_tensors="pt")
    axes = {name: {0: "batch", 1: "tokens"} for name in _INPUTS}
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with torch.no_grad():
            torch.onnx.export(
                Pooled(transformer).eval(),
                tuple(sample[name] for name in _INPUTS),
                str(temporary),
                dynamo=False,
                opset_version=OPSET,
                input_names=list(_INPUTS),
                output_names=["embedding"],
                dynamic_axes={**axes, "embedding": {0: "batch"}},
            )
        _publish(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)


def _publish(temporary: Path, target: Path) -> None:
    """Put the finished export under the target name, never over another process's."""
    try:
        os.link(temporary, target)
    except FileExistsError:
        pass  # another process linked its export first: that one serves
    except OSError:  # a file system without hard links: an atomic rename (of an equal export)
        os.replace(temporary, target)


def quantize_here(source: Path, target: Path) -> None:
    """Write the int8 twin of the export ``source`` to ``target`` (weights per output channel) and link it into place."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        quantize_dynamic(str(source), str(temporary), weight_type=QuantType.QInt8, per_channel=True)
        _publish(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Export the packaged embedding model to ONNX, or quantise an export (run by the service itself).")
    parser.add_argument("--int8", action="store_true", help="quantise the export SOURCE to int8 instead of exporting")
    parser.add_argument("target", type=Path, help="the .onnx file to write (atomically; kept if present)")
    parser.add_argument("source", type=Path, help="the sentence-transformers model directory (with --int8: the fp32 export)")
    args = parser.parse_args(argv)
    if args.int8:
        quantize_here(args.source, args.target)
    else:
        export_here(args.source, args.target)
    return 0


if __name__ == "__main__":
    sys.exit(main())

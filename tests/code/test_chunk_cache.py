"""The chunk cache keeps each chunk's text deflated, reads it back as written, and still reads rows
an earlier release wrote as plain text."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from service.code.cache import CACHE_FILE, CachedChunk, ChunkCache, FileState

CODE = "def naïve_café(value):\n    return [value] * 3  # ünïcode\n" * 40


def _chunk(key: str, path: str, text: str) -> CachedChunk:
    return CachedChunk(key, path, 1, text.count("\n"), "function", "naïve_café", "h", "c", text)


def test_a_text_is_stored_deflated_and_read_back_as_written(tmp_path: Path) -> None:
    cache = ChunkCache(tmp_path)
    try:
        cache.replace_files([FileState("a.py", len(CODE), 1)], [_chunk("k1", "a.py", CODE)])
        assert cache.by_keys(["k1"])["k1"].text == CODE
        assert cache.chunks_of(["a.py"])["a.py"][0].text == CODE
        assert [c.text for rows in cache.iter_chunks() for c in rows] == [CODE]
        assert [row[3] for rows in cache.iter_layouts() for row in rows] == [CODE]
    finally:
        cache.close()
    with sqlite3.connect(tmp_path / CACHE_FILE) as db:
        stored = db.execute("SELECT text FROM chunks WHERE key = 'k1'").fetchone()[0]
    assert isinstance(stored, bytes) and len(stored) < len(CODE.encode()) / 4, "a repetitive text deflates"


def test_a_row_written_as_plain_text_is_still_read(tmp_path: Path) -> None:
    cache = ChunkCache(tmp_path)
    cache.close()
    with sqlite3.connect(tmp_path / CACHE_FILE) as db:
        db.execute(
            "INSERT INTO chunks (key, path, start_line, end_line, kind, symbol, chunk_hash, content_hash, text) VALUES (?, ?, 1, 2, 'function', NULL, 'h', 'c', ?)",
            ("old", "b.py", "def old():\n    pass\n"),
        )
    cache = ChunkCache(tmp_path)
    try:
        assert cache.by_keys(["old"])["old"].text == "def old():\n    pass\n"
    finally:
        cache.close()


def test_the_counts_follow_every_write_of_this_cache_and_of_another_connection(tmp_path: Path) -> None:
    """The counts are remembered between writes: each kind of write shows in the next count."""
    cache = ChunkCache(tmp_path)
    other = ChunkCache(tmp_path)  # another process's writer (a separate worker), as a second connection
    try:
        assert (cache.file_count(), cache.chunk_count()) == (0, 0)
        cache.replace_files([FileState("a.py", 1, 1), FileState("b.py", 1, 1)], [_chunk("k1", "a.py", CODE), _chunk("k2", "a.py", CODE), _chunk("k3", "b.py", CODE)])
        assert (cache.file_count(), cache.chunk_count()) == (2, 3)
        other.replace_files([FileState("c.py", 1, 1)], [_chunk("k4", "c.py", CODE), _chunk("k5", "c.py", CODE)], deleted=["b.py"])
        assert (cache.file_count(), cache.chunk_count()) == (2, 4), "a's two chunks and c's two"
        assert (cache.file_count(), cache.chunk_count()) == (other.file_count(), other.chunk_count())
        with sqlite3.connect(tmp_path / CACHE_FILE) as db:  # a write outside the cache's own methods
            db.execute("DELETE FROM chunks WHERE key = 'k1'")
        assert cache.chunk_count() == 3
        cache.replace_files([FileState("a.py", 1, 2)], [])
        assert (cache.file_count(), cache.chunk_count()) == (2, 2)
        cache.clear()
        assert (cache.file_count(), cache.chunk_count()) == (0, 0)
        assert (other.file_count(), other.chunk_count()) == (0, 0)
    finally:
        other.close()
        cache.close()

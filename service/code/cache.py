"""The chunk cache of one workspace on disk (SQLite): each file's size and mtime, and its chunks.

It is the record of what is indexed: a file whose size and mtime match its row is not read again;
the trigram index is derived from it; the store's points carry the same keys. A batch of files
is committed here last, after the store and the trigram index, so a crash in between only makes
the next revalidation redo that batch (every write before it is idempotent).

SQLite is in the standard library, survives crashes (WAL journal), and lets a search read a few
chunk texts by key or scan a directory's chunks in path order without loading the whole cache.
The texts are stored deflated (``_packed``): the cache is the one copy of a chunk's text the
service keeps besides the source file, and compressed it takes less than half the source's size.
"""

from __future__ import annotations

import bisect
import json
import sqlite3
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CACHE_FILE = "chunks.sqlite"
SCHEMA_VERSION = 1
# The meta row naming the paths of a trigram write not yet followed by its cache write.
TRIGRAM_PENDING = "trigram_pending"
_IN_BATCH = 500  # keys per "IN (...)" query, under SQLite's variable limit
MMAP_BYTES = 1 << 30  # address space, not memory: pages are the OS page cache's

_SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    path TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS chunks (
    key TEXT PRIMARY KEY,
    path TEXT NOT NULL,
    start_line INTEGER NOT NULL,
    end_line INTEGER NOT NULL,
    kind TEXT NOT NULL,
    symbol TEXT,
    chunk_hash TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    text TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS chunks_by_path ON chunks (path, start_line);
CREATE TABLE IF NOT EXISTS meta (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""


@dataclass(frozen=True, slots=True)
class CachedChunk:
    """One chunk as cached; ``content_hash`` is the record's (text and model), ``chunk_hash`` the text's."""

    key: str
    path: str
    start_line: int
    end_line: int
    kind: str
    symbol: str | None
    chunk_hash: str
    content_hash: str
    text: str


@dataclass(frozen=True, slots=True)
class FileState:
    path: str
    size: int
    mtime_ns: int


_COLUMNS = "key, path, start_line, end_line, kind, symbol, chunk_hash, content_hash, text"


# Chunk texts are stored deflated (zlib, level 6): code compresses to about 0.42 of its size and
# inflates at about 6 us a chunk. A row written before compression holds TEXT, read as it is.
_TEXT_LEVEL = 6


def _packed(text: str) -> bytes:
    return zlib.compress(text.encode("utf-8"), _TEXT_LEVEL)


def _unpacked(stored: bytes | str) -> str:
    return stored if isinstance(stored, str) else zlib.decompress(stored).decode("utf-8")


def _row(row: Sequence[Any]) -> CachedChunk:
    key, path, start_line, end_line, kind, symbol, chunk_hash, content_hash, text = row
    return CachedChunk(key, path, start_line, end_line, kind, symbol, chunk_hash, content_hash, _unpacked(text))


class ChunkCache:
    """One workspace's cache file. Use from one thread (the event loop)."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / CACHE_FILE
        self._db = sqlite3.connect(self.path, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        # Reads through a memory map: a full regex scan reads every chunk text (a quarter faster).
        self._db.execute(f"PRAGMA mmap_size={MMAP_BYTES}")
        self._db.executescript(_SCHEMA)
        # (the database's data_version, files, chunks) when last counted: a count of 273k chunks
        # scans an index (2-12 ms), and every search reports both counts.
        self._counts: tuple[int, int, int] | None = None
        if self.get_meta("schema") not in (None, SCHEMA_VERSION):
            self.clear()
        self.set_meta("schema", SCHEMA_VERSION)

    def close(self) -> None:
        self._db.close()

    # ---- files -----------------------------------------------------------------------------

    def file_states(self) -> dict[str, tuple[int, int]]:
        return {path: (size, mtime) for path, size, mtime in self._db.execute("SELECT path, size, mtime_ns FROM files")}

    def file_count(self) -> int:
        return self._counted()[1]

    def chunk_count(self) -> int:
        return self._counted()[2]

    def _counted(self) -> tuple[int, int, int]:
        """The counts, counted again only after a write: this connection's own (which forget
        them) or another process's commit (which moves ``PRAGMA data_version``)."""
        version = int(self._db.execute("PRAGMA data_version").fetchone()[0])
        if self._counts is None or self._counts[0] != version:
            files = int(self._db.execute("SELECT COUNT(*) FROM files").fetchone()[0])
            chunks = int(self._db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0])
            self._counts = (version, files, chunks)
        return self._counts

    def paths(self) -> list[str]:
        return [row[0] for row in self._db.execute("SELECT path FROM files ORDER BY path")]

    # ---- chunks ----------------------------------------------------------------------------

    def chunks_of(self, paths: Iterable[str]) -> dict[str, list[CachedChunk]]:
        """Every cached chunk of ``paths``, by path, in line order."""
        found: dict[str, list[CachedChunk]] = {}
        for batch in _batches(list(paths)):
            marks = ",".join("?" * len(batch))
            rows = self._db.execute(f"SELECT {_COLUMNS} FROM chunks WHERE path IN ({marks}) ORDER BY path, start_line", batch)
            for row in rows:
                chunk = _row(row)
                found.setdefault(chunk.path, []).append(chunk)
        return found

    def chunks_at(self, lines: Mapping[str, Iterable[int]]) -> dict[tuple[str, int], CachedChunk]:
        """The chunk holding each ``(path, line)`` asked for (by path, its lines); a line no chunk
        holds (a blank line between chunks) is left out. Reads the chunks' spans first and whole
        chunks only for those that hold a line asked for."""
        spans: dict[str, list[tuple[int, int, str]]] = {}
        for batch in _batches(list(lines)):
            marks = ",".join("?" * len(batch))
            query = f"SELECT path, start_line, end_line, key FROM chunks WHERE path IN ({marks}) ORDER BY path, start_line"
            for path, start, end, key in self._db.execute(query, batch):
                spans.setdefault(path, []).append((start, end, key))
        wanted: dict[tuple[str, int], str] = {}
        for path, numbers in lines.items():
            file_spans = spans.get(path, [])
            starts = [start for start, _end, _key in file_spans]
            for number in numbers:
                index = bisect.bisect_right(starts, number) - 1
                if index >= 0 and file_spans[index][1] >= number:
                    wanted[(path, number)] = file_spans[index][2]
        chunks = self.by_keys(set(wanted.values()))
        return {place: chunks[key] for place, key in wanted.items() if key in chunks}

    def by_keys(self, keys: Iterable[str]) -> dict[str, CachedChunk]:
        found: dict[str, CachedChunk] = {}
        for batch in _batches(list(keys)):
            marks = ",".join("?" * len(batch))
            for row in self._db.execute(f"SELECT {_COLUMNS} FROM chunks WHERE key IN ({marks})", batch):
                found[row[0]] = _row(row)
        return found

    def iter_chunks(self, prefix: str = "", *, batch: int = 512) -> Iterator[list[CachedChunk]]:
        """Chunks in (path, line) order, in batches; ``prefix`` limits them to one file or directory."""
        for rows in self._ordered(_COLUMNS, prefix, batch):
            yield [_row(row) for row in rows]

    def count_under(self, prefix: str = "", paths: Sequence[str] | None = None) -> int:
        """How many chunks ``paths`` hold (when given), else the file or directory ``prefix`` (all: "")."""
        if paths is not None:
            total = 0
            for batch in _batches(list(paths)):
                marks = ",".join("?" * len(batch))
                total += int(self._db.execute(f"SELECT COUNT(*) FROM chunks WHERE path IN ({marks})", batch).fetchone()[0])
            return total
        if not prefix:
            return self.chunk_count()
        query = "SELECT COUNT(*) FROM chunks WHERE path = ? OR (path >= ? AND path < ?)"
        return int(self._db.execute(query, (prefix, prefix + "/", prefix + "0")).fetchone()[0])

    def iter_hashes(self, prefix: str = "", paths: Sequence[str] | None = None, *, batch: int = 1024) -> Iterator[list[tuple[str, str, str]]]:
        """``(key, path, content_hash)`` of the chunks ``count_under`` counts, in batches, without their texts."""
        if paths is None:
            yield from self._ordered("key, path, content_hash", prefix, batch)
            return
        for files in _batches(list(paths)):
            marks = ",".join("?" * len(files))
            cursor = self._db.execute(f"SELECT key, path, content_hash FROM chunks WHERE path IN ({marks}) ORDER BY path, start_line", files)
            while rows := cursor.fetchmany(batch):
                yield rows

    def iter_layouts(self, prefix: str = "", *, batch: int = 1024) -> Iterator[list[tuple[str, int, int, str]]]:
        """Light rows ``(path, start_line, end_line, text)`` in (path, line) order, in batches: what a
        full regex scan reads (``chunks_of`` then gives the whole chunks of the few files that match)."""
        for rows in self._ordered("path, start_line, end_line, text", prefix, batch):
            yield [(path, start, end, _unpacked(text)) for path, start, end, text in rows]

    def _ordered(self, columns: str, prefix: str, batch: int) -> Iterator[list[Any]]:
        if prefix:
            # Paths under "a/b/" sort between "a/b/" and "a/b0" ('0' follows '/'); plus the file "a/b".
            query = f"SELECT {columns} FROM chunks WHERE path = ? OR (path >= ? AND path < ?) ORDER BY path, start_line"
            cursor = self._db.execute(query, (prefix, prefix + "/", prefix + "0"))
        else:
            cursor = self._db.execute(f"SELECT {columns} FROM chunks ORDER BY path, start_line")
        while rows := cursor.fetchmany(batch):
            yield rows

    # ---- writes: one transaction per batch of files ------------------------------------------

    def replace_files(self, files: Sequence[FileState], chunks: Sequence[CachedChunk], deleted: Sequence[str] = ()) -> None:
        """Set the rows of ``files`` (their chunks replaced by ``chunks``) and drop ``deleted`` files;
        the trigram intent (``note_trigram_pending``) ends in the same transaction."""
        self._counts = None
        with _transaction(self._db):
            self._db.execute("DELETE FROM meta WHERE name = ?", (TRIGRAM_PENDING,))
            gone = [*deleted, *(f.path for f in files)]
            for batch in _batches(gone):
                marks = ",".join("?" * len(batch))
                self._db.execute(f"DELETE FROM chunks WHERE path IN ({marks})", batch)
            for batch in _batches(list(deleted)):
                marks = ",".join("?" * len(batch))
                self._db.execute(f"DELETE FROM files WHERE path IN ({marks})", batch)
            self._db.executemany(
                "INSERT OR REPLACE INTO files (path, size, mtime_ns) VALUES (?, ?, ?)",
                [(f.path, f.size, f.mtime_ns) for f in files],
            )
            self._db.executemany(
                f"INSERT OR REPLACE INTO chunks ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (c.key, c.path, c.start_line, c.end_line, c.kind, c.symbol, c.chunk_hash, c.content_hash, _packed(c.text))
                    for c in chunks
                ],
            )

    def clear(self) -> None:
        self._counts = None
        with _transaction(self._db):
            self._db.execute("DELETE FROM chunks")
            self._db.execute("DELETE FROM files")
            self._db.execute("DELETE FROM meta WHERE name != 'schema'")

    # ---- the trigram intent ------------------------------------------------------------------

    def note_trigram_pending(self, paths: Sequence[str]) -> None:
        """Before the trigram index gets ``paths``' new chunks: if the process dies before
        ``replace_files`` records them here, the next open puts those paths in the trigram index
        back as this cache has them (``trigram_pending``), instead of rebuilding it whole."""
        self.set_meta(TRIGRAM_PENDING, list(paths))

    def trigram_pending(self) -> list[str]:
        """The paths of a trigram write whose cache write never came (empty: none)."""
        return list(self.get_meta(TRIGRAM_PENDING) or [])

    def clear_trigram_pending(self) -> None:
        self._db.execute("DELETE FROM meta WHERE name = ?", (TRIGRAM_PENDING,))

    # ---- meta --------------------------------------------------------------------------------

    def get_meta(self, name: str) -> Any:
        row = self._db.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return None if row is None else json.loads(row[0])

    def set_meta(self, name: str, value: Any) -> None:
        self._db.execute("INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)", (name, json.dumps(value)))


class _transaction:
    """BEGIN ... COMMIT, ROLLBACK on any error (the connection runs in autocommit mode)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN")

    def __exit__(self, exc_type: object, *_: object) -> None:
        self._db.execute("ROLLBACK" if exc_type is not None else "COMMIT")


def _batches(items: list[str]) -> Iterator[list[str]]:
    for start in range(0, len(items), _IN_BATCH):
        yield items[start : start + _IN_BATCH]

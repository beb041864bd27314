"""The data sets folder: AGENTSEARCH_DATASETS moves it, and a missing file says where to put it."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.datasets import ACTIONS_CATALOG, DEFAULT, ENV, DatasetMissing, dataset, root


def test_the_variable_moves_the_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "actions").mkdir()
    (tmp_path / ACTIONS_CATALOG).write_bytes(b"")
    monkeypatch.setenv(ENV, str(tmp_path))
    assert root() == tmp_path
    assert dataset(ACTIONS_CATALOG) == tmp_path / ACTIONS_CATALOG


def test_without_the_variable_the_folder_is_shared_data_beside_the_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    assert root() == DEFAULT == Path(__file__).resolve().parents[2] / "shared" / "data"


def test_a_missing_data_set_says_where_to_put_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, str(tmp_path))
    with pytest.raises(DatasetMissing) as missing:
        dataset(ACTIONS_CATALOG)
    assert str(tmp_path / ACTIONS_CATALOG) in str(missing.value)
    assert ENV in str(missing.value)

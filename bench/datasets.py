"""Where the public data sets live, for the benchmarks and the tests that read them.

The data sets are not in the repository. They sit in one folder, ``AGENTSEARCH_DATASETS`` when that
variable is set, otherwise ``shared/data`` beside the checkout (``../shared/data`` from the
repository root), laid out as:

    actions/openapi-actions.jsonl.gz   the APIs.guru OpenAPI catalog as action templates, one per line
    code/cosqa-corpus.json             CoSQA: Python snippets
    code/cosqa-dev-500.json            CoSQA: 500 dev queries with the snippet each one should find
    tools/metatool-tools.json          MetaTool: tool name -> description
    tools/metatool-queries.csv         MetaTool: single-tool queries and their gold tool
    tools/metatool-multi-tool.json     MetaTool: multi-tool queries and their two gold tools

A missing file raises ``DatasetMissing`` naming the folder it was looked for in and the variable
that moves it, so a test or benchmark that needs it fails saying what to put where.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "AGENTSEARCH_DATASETS"
DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "data"

ACTIONS_CATALOG = "actions/openapi-actions.jsonl.gz"
COSQA_CORPUS = "code/cosqa-corpus.json"
COSQA_QUERIES = "code/cosqa-dev-500.json"
METATOOL_TOOLS = "tools/metatool-tools.json"
METATOOL_QUERIES = "tools/metatool-queries.csv"
METATOOL_MULTI_TOOL = "tools/metatool-multi-tool.json"


class DatasetMissing(FileNotFoundError):
    """A data set file is not where the data sets folder says; the message says where to put it."""


def root() -> Path:
    """The data sets folder: ``AGENTSEARCH_DATASETS``, else ``shared/data`` beside the checkout."""
    configured = os.environ.get(ENV)
    return Path(configured).expanduser() if configured else DEFAULT


def dataset(relative: str) -> Path:
    """The path of one data set file (``actions/openapi-actions.jsonl.gz``); raises when it is absent."""
    folder = root()
    path = folder / relative
    if not path.is_file():
        where = f"{ENV}={folder}" if os.environ.get(ENV) else f"{folder}, the default; {ENV} moves it"
        raise DatasetMissing(
            f"data set {relative} is missing: put it at {path} (the data sets folder is {where}; "
            f"see CONTRIBUTING.md, 'Data sets')"
        )
    return path

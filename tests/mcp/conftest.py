"""Fixtures of the MCP tests: the catalog tests' real rerank endpoint, for the deadline."""

from tests.catalog.test_answers import rerank_server

__all__ = ["rerank_server"]

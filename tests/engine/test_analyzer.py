"""The analyzer: identifier-aware terms shared by documents and queries."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from service.engine.analyzer import analyze, query_terms, terms_text


def test_camel_snake_dotted_and_path_parts_split_and_whole_kept() -> None:
    terms = analyze("getUserById snake_case_name os.path.join src/auth/tokenStore.ts HTTPServer")
    for expected in ["getuserbyid", "get", "user", "by", "id", "snakecasename", "snake", "case", "name",
                     "ospathjoin", "os", "path", "join", "auth", "token", "store", "httpserver", "http", "server"]:
        assert expected in terms, expected


def test_query_and_document_meet_on_identifier_parts() -> None:
    document = set(terms_text("def parseConfigFile(path): ...").split())
    assert set(query_terms("parse config file").split()) <= document
    assert "parseconfigfile" in document


def test_query_drops_stopwords_unless_nothing_else_is_left() -> None:
    assert query_terms("how to send the emails") == "send email"
    assert query_terms("the") == "the"


@given(st.text(max_size=200))
def test_output_is_lowercase_alphanumeric_words(text: str) -> None:
    for term in analyze(text):
        assert re.fullmatch(r"[0-9a-z]+", term), term
        assert len(term) <= 40

"""The in-memory lexical index: words, fuzzy vocabulary matches, postings and keyword coverage."""

from __future__ import annotations

import numpy as np
import pytest

from service.actions.index import (
    ActionIndex,
    TemplateBlock,
    Vocabulary,
    embed_text,
    humanize,
    query_words,
    template_revision,
    words,
)
from service.actions.model import ActionDef, AuthType, InstanceAuth, InstanceDef, Risk, SearchRequest, TemplateDef, Tier
from service.actions.ranking import CandidatePairs, keyword_coverage
from service.actions.visibility import select_units


def test_words_split_identifiers_and_fold() -> None:
    assert words("getAuditEvents") == ["get", "audit", "events"]
    assert words("post__v0.1_BulkCall") == ["post", "v", "0", "1", "bulk", "call"]
    assert words("HTTPServer list_repos Café") == ["http", "server", "list", "repos", "cafe"]
    assert humanize("list_repos") == "list repos"
    assert query_words("how to send the emails") == ["send", "emails"]
    assert query_words("the") == ["the"]


def test_embed_text_holds_name_description_and_service() -> None:
    action = ActionDef("send_email", "Send an email message", Risk.WRITE)
    assert embed_text(action, "Google Gmail") == "send email: Send an email message (Google Gmail)"
    assert embed_text(ActionDef("ping", "", Risk.READ), "Svc") == "ping (Svc)"


def test_revision_changes_with_content_only() -> None:
    a = TemplateDef("t", "T", actions=(ActionDef("a", "x", Risk.READ), ActionDef("b", "y", Risk.READ)))
    b = TemplateDef("t", "T", actions=(ActionDef("b", "y", Risk.READ), ActionDef("a", "x", Risk.READ)))
    c = TemplateDef("t", "T", actions=(ActionDef("a", "x", Risk.WRITE), ActionDef("b", "y", Risk.READ)))
    assert template_revision(a) == template_revision(b) != template_revision(c)


def test_vocabulary_matches_exact_plural_and_typos() -> None:
    vocab = Vocabulary()
    vocab.ids(["list", "repos", "email", "get", "set"])
    ids, sims = vocab.match("lsit")
    found = dict(zip((vocab.words[i] for i in ids), sims.tolist(), strict=True))
    assert found["list"] > 0.9
    ids, sims = vocab.match("emails")
    assert dict(zip((vocab.words[i] for i in ids), sims.tolist(), strict=True))["email"] == pytest.approx(0.95)
    ids, _ = vocab.match("got")  # three letters: exact only, "get" is another word
    assert not ids.size


def _index(*templates: TemplateDef) -> ActionIndex:
    vocab = Vocabulary()
    return ActionIndex([TemplateBlock.build(t, template_revision(t), vocab) for t in templates], vocab)


GITHUB = TemplateDef(
    "github",
    "GitHub",
    actions=(
        ActionDef("list_repos", "List repositories for the authenticated user", Risk.READ),
        ActionDef("list_repos_for_org", "List repositories of an organization", Risk.READ),
        ActionDef("create_issue", "Open an issue", Risk.WRITE),
    ),
)
STRIPE = TemplateDef("stripe.com", "Stripe", actions=(ActionDef("create_charge", "Charge a card", Risk.WRITE),))


def test_postings_spread_the_best_similarity_to_every_action() -> None:
    index = _index(GITHUB, STRIPE)
    ids, sims = index.match("repos")
    best = index.best_over(index.names, ids, sims, index.size)
    names = [index.action_at(i)[1].name for i in np.flatnonzero(best)]
    assert sorted(names) == ["list_repos", "list_repos_for_org"]
    assert index.locate("stripe.com", "create_charge") == 3 and index.locate("stripe.com", "nope") is None


def test_keyword_coverage_counts_name_description_and_service_words() -> None:
    index = _index(GITHUB, STRIPE)
    work = InstanceDef("stripe_work", "stripe.com", Tier.USER, "alice", InstanceAuth(AuthType.API_KEY, secret_name="K"))
    units = select_units(index, [work], SearchRequest("x", include_catalog=True))
    pairs = CandidatePairs.of(index, units)
    coverage = keyword_coverage(index, units, pairs, ["stripe"])
    by_action = {index.action_at(int(a))[1].name: float(c) for a, c in zip(pairs.action, coverage, strict=True)}
    assert by_action["create_charge"] == pytest.approx(0.9)  # a service word
    assert by_action["list_repos"] == 0.0
    coverage = keyword_coverage(index, units, pairs, ["lsit", "repos"])
    by_action = {index.action_at(int(a))[1].name: float(c) for a, c in zip(pairs.action, coverage, strict=True)}
    assert by_action["list_repos"] > 0.9 and by_action["create_issue"] == 0.0

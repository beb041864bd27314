"""The in-memory lexical index: words, fuzzy vocabulary matches, postings and keyword coverage."""

from __future__ import annotations

import numpy as np
import pytest

from service.actions.index import (
    EMBED_MAX_WORDS,
    EMBED_TEXT_LAYOUT,
    SERVICE_SUMMARY_WORDS,
    ActionIndex,
    TemplateBlock,
    Vocabulary,
    action_terms,
    embed_text,
    humanize,
    query_words,
    service_context_of,
    template_revision,
    words,
)
from service.actions.model import ActionDef, AuthType, InstanceAuth, InstanceDef, Risk, SearchRequest, TemplateDef, Tier
from service.actions.ranking import CandidatePairs, keyword_evidence
from service.actions.visibility import select_units


def test_words_split_identifiers_and_fold() -> None:
    assert words("getAuditEvents") == ["get", "audit", "events"]
    assert words("post__v0.1_BulkCall") == ["post", "v", "0", "1", "bulk", "call"]
    assert words("HTTPServer list_repos Café") == ["http", "server", "list", "repos", "cafe"]
    assert humanize("list_repos") == "list repos"
    assert query_words("how to send the emails") == ["send", "emails"]
    assert query_words("the") == ["the"]


def test_embed_text_holds_name_description_then_the_services_name_categories_and_summary() -> None:
    action = ActionDef("send_email", "Send an email message", Risk.WRITE)
    gmail = TemplateDef("gmail", "Google Gmail", "Email by Google. Secure, smart and easy to use.", ("email", "open_data"))
    assert embed_text(action, gmail) == "send email: Send an email message (Google Gmail: email, open data; Email by Google.)"
    assert embed_text(ActionDef("ping", "", Risk.READ), TemplateDef("svc", "Svc")) == "ping (Svc)"
    assert embed_text(ActionDef("ping", "", Risk.READ), TemplateDef("svc", "Svc", categories=("monitoring",))) == "ping (Svc: monitoring)"
    # The service summary is the description's first sentence, at most SERVICE_SUMMARY_WORDS words.
    wordy = TemplateDef("w", "W", " ".join(f"w{i}" for i in range(40)) + ". More.")
    assert embed_text(ActionDef("ping", "", Risk.READ), wordy) == f"ping (W: {' '.join(f'w{i}' for i in range(SERVICE_SUMMARY_WORDS))})"


def test_embed_text_stays_within_its_word_budget_and_keeps_the_service_part() -> None:
    long_description = " ".join(f"word{i}" for i in range(1_000))
    text = embed_text(ActionDef("list_things", long_description, Risk.READ), TemplateDef("t", "Things API", "Lists things.", ("tools",)))
    assert len(text.split()) == EMBED_MAX_WORDS
    assert text.startswith("list things: word0 word1") and text.endswith("(Things API: tools; Lists things.)")


def test_action_terms_carry_the_services_names_description_and_categories() -> None:
    template = TemplateDef("stripe.com", "Stripe Payments", "Online payment processing", ("financial",))
    terms = action_terms(template, ActionDef("createRefund", "Refund a charge", Risk.WRITE)).split()
    assert terms[:5] == ["create", "refund", "refund", "a", "charge"]
    assert {"stripe", "payments", "online", "payment", "processing", "financial"} <= set(terms) and "com" not in terms


def test_revision_changes_with_content_only() -> None:
    a = TemplateDef("t", "T", actions=(ActionDef("a", "x", Risk.READ), ActionDef("b", "y", Risk.READ)))
    b = TemplateDef("t", "T", actions=(ActionDef("b", "y", Risk.READ), ActionDef("a", "x", Risk.READ)))
    c = TemplateDef("t", "T", actions=(ActionDef("a", "x", Risk.WRITE), ActionDef("b", "y", Risk.READ)))
    d = TemplateDef("t", "T", categories=("tools",), actions=a.actions)
    assert template_revision(a) == template_revision(b) != template_revision(c)
    assert template_revision(d) != template_revision(a)


def test_actions_written_in_an_older_text_layout_count_as_changed() -> None:
    template = TemplateDef("t", "T", "A service.", ("tools",), actions=(ActionDef("a", "x", Risk.READ),))
    current = TemplateBlock.build(template, template_revision(template), Vocabulary())
    older = TemplateBlock.build(template, "stored-before", Vocabulary(), embed_layout=EMBED_TEXT_LAYOUT - 1)
    assert current.service_context_of() == service_context_of(template) != older.service_context_of()
    renamed = TemplateDef("t", "T2", "A service.", ("tools",), actions=template.actions)
    assert service_context_of(renamed) != current.service_context_of()


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
STRIPE = TemplateDef("stripe.com", "Stripe", "Payments for internet businesses", ("financial",), actions=(ActionDef("create_charge", "Charge a card", Risk.WRITE),))


def test_postings_spread_the_best_similarity_to_every_action() -> None:
    index = _index(GITHUB, STRIPE)
    ids, sims = index.match("repos")
    best = index.best_over(index.names, ids, sims, index.size)
    names = [index.action_at(i)[1].name for i in np.flatnonzero(best)]
    assert sorted(names) == ["list_repos", "list_repos_for_org"]
    assert index.locate("stripe.com", "create_charge") == 3 and index.locate("stripe.com", "nope") is None


def test_keyword_coverage_counts_name_description_service_and_context_words() -> None:
    index = _index(GITHUB, STRIPE)
    work = InstanceDef("stripe_work", "stripe.com", Tier.USER, "alice", InstanceAuth(AuthType.API_KEY, secret_name="K"))
    units = select_units(index, [work], SearchRequest("x", include_catalog=True))
    pairs = CandidatePairs.of(index, units)

    def by_action(qwords: list[str]) -> dict[str, float]:
        coverage = keyword_evidence(index, units, pairs, qwords).coverage
        return {index.action_at(int(a))[1].name: float(c) for a, c in zip(pairs.action, coverage, strict=True)}

    assert by_action(["stripe"])["create_charge"] == pytest.approx(0.9)  # a service word
    assert by_action(["stripe"])["list_repos"] == 0.0
    assert by_action(["lsit", "repos"])["list_repos"] > 0.9 and by_action(["lsit", "repos"])["create_issue"] == 0.0
    # The service's description and categories are context: weaker evidence than the action's own words.
    assert by_action(["payments"])["create_charge"] == pytest.approx(0.5)
    assert by_action(["financial"])["create_charge"] == pytest.approx(0.5) and by_action(["financial"])["list_repos"] == 0.0


def test_own_share_prefers_the_action_with_fewer_other_words() -> None:
    index = _index(GITHUB, STRIPE)
    units = select_units(index, [], SearchRequest("x", include_catalog=True))
    pairs = CandidatePairs.of(index, units)
    own = keyword_evidence(index, units, pairs, ["list", "repos"]).own_share(index, pairs, np.arange(len(pairs.action)))
    by_action = {index.action_at(int(a))[1].name: float(s) for a, s in zip(pairs.action, own, strict=True)}
    assert by_action["list_repos"] == 1.0 and by_action["list_repos_for_org"] == pytest.approx(2 / 3)
    assert by_action["create_charge"] == 0.0

"""The action surface's value objects: templates and their actions, caller instances, search requests.

Closed sets are enums (``Risk``, ``Tier``, ``AuthType``); everything a request carries is parsed into
these frozen dataclasses first (``service.actions.parsing``), so nothing downstream sees raw JSON.
Storage keys and the two collections live here too, so ingest, the catalog cache and ranking agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from service.auth import GLOBAL_TENANT, team_tenant
from service.engine.records import collection_spec
from service.engine.store import CollectionSpec

SURFACE_NAME = "actions"
ACTIONS_COLLECTION = "actions"
META_COLLECTION = "actions_meta"

# One point per template action, embedded in the background by RecordIndex. Global catalog data.
ACTIONS_SPEC = collection_spec(ACTIONS_COLLECTION, keyword_fields=("template", "risk"))
# Templates' own metadata and callers' instances: small, never embedded, tenant-keyed. A separate
# collection keeps /v1/index/status counts about embeddable action records only.
META_SPEC = CollectionSpec(name=META_COLLECTION, keyword_fields=("kind", "key", "template"))

ACTION_KIND = "action"
TEMPLATE_KIND = "template"
TEMPLATE_ACTIONS_KIND = "template_actions"
INSTANCE_KIND = "instance"

DEFAULT_LIMIT = 20
MAX_LIMIT = 100


class Risk(StrEnum):
    READ = "read"
    WRITE = "write"
    DELETE = "delete"


class Tier(StrEnum):
    """Who owns an instance; ordered from the most shared to the most specific."""

    GLOBAL = "global"
    ORG = "org"
    TEAM = "team"
    USER = "user"

    @property
    def specificity(self) -> int:
        """A user's own instance shadows a team's, a team's an org's, an org's a global one of the same name."""
        return list(Tier).index(self)


class AuthType(StrEnum):
    OAUTH = "oauth"
    API_KEY = "api_key"


class RankingMode(StrEnum):
    """Which evidence ranks a search: the served blend, or one channel alone (what an evaluation compares it with)."""

    SERVED = "served"
    LEXICAL = "lexical"
    DENSE = "dense"


@dataclass(frozen=True)
class ActionDef:
    """One action of a template, as an OpenAPI operation."""

    name: str
    description: str
    risk: Risk
    method: str | None = None
    path: str | None = None


@dataclass(frozen=True)
class TemplateAuth:
    """How instances of a template authenticate; shown on catalog (setup_required) rows."""

    type: AuthType = AuthType.API_KEY
    provider: str | None = None


@dataclass(frozen=True)
class TemplateDef:
    """A service template of the global catalog and its whole action list."""

    key: str
    display_name: str
    description: str = ""
    categories: tuple[str, ...] = ()
    auth: TemplateAuth = TemplateAuth()
    actions: tuple[ActionDef, ...] = ()


@dataclass(frozen=True)
class InstanceAuth:
    """``oauth`` with its provider, or ``api_key`` with the label of the secret (never its value)."""

    type: AuthType
    provider: str | None = None
    secret_name: str | None = None


@dataclass(frozen=True)
class InstanceDef:
    """A configured instance of a template, owned by one tenant (``tenant`` is derived from tier, owner
    and, for a team, the team's org)."""

    name: str
    template: str
    tier: Tier
    owner: str | None
    auth: InstanceAuth
    account_email: str | None = None
    connected: bool = True
    org: str | None = None
    """The org of a team instance's team (a team belongs to its org); None for the other tiers."""

    @property
    def tenant(self) -> str:
        return tenant_of(self.tier, self.owner, self.org)


@dataclass(frozen=True)
class SearchRequest:
    query: str
    include_catalog: bool = False
    exclude: tuple[str, ...] = ()
    limit: int = DEFAULT_LIMIT
    ranking: RankingMode = RankingMode.SERVED
    # What parsing changed in the request (a query cut to its prefix, a limit clamped): shown first in notices.
    notices: tuple[str, ...] = ()

    @property
    def browse(self) -> bool:
        return not self.query.strip()


def tenant_of(tier: Tier, owner: str | None, org: str | None = None) -> str:
    """The tenant key an instance lives under: ``global``, ``org:<id>``, ``team:<org>/<team>`` or ``user:<sub>``."""
    if tier is Tier.GLOBAL:
        return GLOBAL_TENANT
    if tier is Tier.TEAM:
        if not org or not owner:
            raise ValueError("a team instance's tenant needs its team and the team's org")
        return team_tenant(org, owner)
    return f"{tier.value}:{owner}"


def action_key(template: str, action: str) -> str:
    """The record key of one action; ``#`` never occurs in a template key (parsing refuses it)."""
    return f"{template}#{action}"


def template_meta_key(template: str) -> str:
    return f"template:{template}"


def template_actions_key(template: str) -> str:
    return f"template-actions:{template}"


def instance_meta_key(tenant: str, name: str) -> str:
    return f"instance:{tenant}:{name}"

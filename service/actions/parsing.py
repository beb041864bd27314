"""Parsing the action surface's request bodies into value objects, with errors that say what to fix.

Everything is checked before anything is written: a bad template, instance or search request is a
400 (403 for an instance the caller may not own) and the index stays as it was. Secret values are
never accepted: an instance names the secret backing it by label (``STRIPE_API_KEY``); a field
that would carry a value, or a label that looks like a credential, is refused.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from service.actions.model import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    ActionDef,
    AuthType,
    InstanceAuth,
    InstanceDef,
    RankingMode,
    Risk,
    SearchRequest,
    TemplateAuth,
    TemplateDef,
    Tier,
)
from service.auth import Caller, split_team_tenant
from service.errors import Forbidden, ValidationError
from service.validation import BODY_BOUNDED, Fields, bounded_text

MAX_TEMPLATES_PER_REQUEST = 5_000
MAX_ACTIONS_PER_TEMPLATE = 50_000
MAX_INSTANCES_PER_REQUEST = 500
MAX_EXCLUDE_ENTRIES = 100
# A longer query is searched by its first MAX_QUERY_CHARS characters, cut at a word boundary, with a notice.
MAX_QUERY_CHARS = 1_000

# Template keys come from real catalogs ("1password.com:events", "vtex.local:Orders-API-(PII-version)"):
# anything printable, but never ',' (exclude lists split on it) nor '#' (it joins template and action keys).
_TEMPLATE_KEY = re.compile(r"^[^\s,#\x00-\x1f\x7f][^,#\x00-\x1f\x7f]{0,199}(?<!\s)$")
_ACTION_NAME = re.compile(r"^[^\s\x00-\x1f\x7f][^\x00-\x1f\x7f]{0,199}$")
_INSTANCE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,99}$")
_EXCLUDE_ENTRY = re.compile(r"^[^\x00-\x1f\x7f,]{1,200}$")
_PROVIDER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
_SECRET_LABEL = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-/:]{0,127}$")
_OWNER = re.compile(r"^[^\s\x00-\x1f\x7f][^\x00-\x1f\x7f]{0,199}$")
_EMAIL = re.compile(r"^[^@\s]{1,128}@[^@\s]{1,253}\.[^@\s]{1,63}$")
_TRAILING = ", \t\r\n"  # trailing commas (and the space around them) end an exclude list harmlessly
_HTTP_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "TRACE"})

# Field names that can only mean "here is the secret itself".
_SECRET_VALUE_FIELDS = frozenset(
    {"value", "secret", "secret_value", "api_key", "apikey", "key", "token", "access_token", "refresh_token", "password", "client_secret"}
)
# Well-known credential shapes (Stripe, OpenAI, GitHub, Slack, AWS, Google, GitLab, Shopify, JWTs).
_CREDENTIAL_SHAPES = re.compile(
    r"^(?:[sprk]k_(?:live|test)_[A-Za-z0-9]{8,}|sk-[A-Za-z0-9_\-]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"
    r"|xox[abprs]-[A-Za-z0-9\-]{10,}|(?:AKIA|ASIA)[A-Z0-9]{16}|AIza[A-Za-z0-9_\-]{30,}|glpat-[A-Za-z0-9_\-]{16,}"
    r"|shp(?:at|ss|ca)_[A-Fa-f0-9]{20,}|eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]+)"
)
_OPAQUE_RUN = re.compile(r"[A-Za-z0-9+/=]{24,}")


def looks_like_secret_value(text: str) -> bool:
    """A known credential format, or a long opaque run with digits and high entropy (a random key).

    Labels are names people type (``STRIPE_API_KEY``, ``github/deploy-token``): words split by
    separators, few digits. Keys are long unbroken random runs.
    """
    if _CREDENTIAL_SHAPES.match(text):
        return True
    for run in _OPAQUE_RUN.findall(text):
        digits = sum(ch.isdigit() for ch in run)
        if digits >= 3 and _entropy_bits(run) >= 3.5:
            return True
    return False


def _entropy_bits(text: str) -> float:
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


# ---- templates ---------------------------------------------------------------------------------


def parse_templates_body(data: Any) -> list[TemplateDef]:
    """``{"templates": [...]}`` -> template definitions; 400 on the first problem, naming where."""
    body = Fields(data)
    items = body.list("templates", required=True, max_items=MAX_TEMPLATES_PER_REQUEST)
    body.reject_unknown({"templates"})
    templates = [parse_template(item, f"templates[{i}]") for i, item in enumerate(items)]
    duplicates = sorted(key for key, n in Counter(t.key for t in templates).items() if n > 1)
    if duplicates:
        raise ValidationError(f"template keys must be unique in one request; repeated: {', '.join(map(repr, duplicates[:5]))}")
    return templates


def parse_template(item: Any, where: str = "template") -> TemplateDef:
    fields = Fields(item, where)
    key = fields.str("template", required=True, max_length=200)
    if not _TEMPLATE_KEY.match(key):
        raise ValidationError(
            f"{where}.template {key!r} is not a valid template key: 1-200 printable characters, no ',' or '#', "
            "no leading or trailing space"
        )
    display_name = fields.str("display_name", required=True, max_length=200, non_empty=True).strip()
    description = fields.str("description", default="", max_length=4_000)
    categories = fields.str_list("categories", max_items=20, max_length=100)
    auth = _template_auth(fields.obj("auth"))
    raw_actions = fields.list("actions", required=True, max_items=MAX_ACTIONS_PER_TEMPLATE)
    fields.reject_unknown({"template", "display_name", "description", "categories", "auth", "actions"})
    actions = tuple(_action(a, f"{where}.actions[{i}]") for i, a in enumerate(raw_actions))
    repeated = sorted(name for name, n in Counter(a.name for a in actions).items() if n > 1)
    if repeated:
        raise ValidationError(f"{where}.actions: action names must be unique in a template; repeated: {', '.join(map(repr, repeated[:5]))}")
    return TemplateDef(key=key, display_name=display_name, description=description, categories=tuple(categories), auth=auth, actions=actions)


def _template_auth(fields: Fields | None) -> TemplateAuth:
    if fields is None:
        return TemplateAuth()
    auth_type = _auth_type(fields)
    provider = fields.str("provider", max_length=64)
    fields.reject_unknown({"type", "provider"})
    if auth_type is AuthType.OAUTH:
        if not provider or not _PROVIDER.match(provider):
            raise ValidationError(f"{fields.where}.provider is required for oauth: a provider id such as 'google'")
        return TemplateAuth(AuthType.OAUTH, provider)
    if provider is not None:
        raise ValidationError(f"{fields.where}.provider is only allowed when type is 'oauth'")
    return TemplateAuth(AuthType.API_KEY)


def _action(item: Any, where: str) -> ActionDef:
    fields = Fields(item, where)
    name = fields.str("action", required=True, max_length=200)
    if not _ACTION_NAME.match(name):
        raise ValidationError(f"{where}.action {name!r} is not a valid action name: 1-200 printable characters")
    description = fields.str("description", default="", max_length=4_000)
    risk = _enum(Risk, fields.str("risk", required=True, max_length=20), f"{where}.risk")
    method = fields.str("method", max_length=10)
    if method is not None and method.upper() not in _HTTP_METHODS:
        raise ValidationError(f"{where}.method must be an HTTP method ({', '.join(sorted(_HTTP_METHODS))}), got {method!r}")
    path = fields.str("path", max_length=2_000)
    fields.reject_unknown({"action", "description", "risk", "method", "path"})
    return ActionDef(name=name, description=description, risk=risk, method=method.upper() if method else None, path=path)


# ---- instances ---------------------------------------------------------------------------------


def parse_instances_body(data: Any, caller: Caller) -> list[InstanceDef]:
    """``{"instances": [...]}`` -> instances the caller may write; 400 for bad input, 403 for a tenant it is not in."""
    body = Fields(data)
    items = body.list("instances", required=True, max_items=MAX_INSTANCES_PER_REQUEST)
    body.reject_unknown({"instances"})
    instances = [parse_instance(item, caller, f"instances[{i}]") for i, item in enumerate(items)]
    repeated = sorted(f"{t}/{n}" for (t, n), c in Counter((i.tenant, i.name) for i in instances).items() if c > 1)
    if repeated:
        raise ValidationError(f"instance names must be unique per owner in one request; repeated: {', '.join(repeated[:5])}")
    return instances


_INSTANCE_FIELDS = {"name", "template", "tier", "owner", "auth", "account_email", "connected"}


def parse_instance(item: Any, caller: Caller, where: str = "instance") -> InstanceDef:
    fields = Fields(item, where)
    _refuse_secret_values(fields.data, where)
    name = fields.str("name", required=True, max_length=100)
    if not _INSTANCE_NAME.match(name):
        raise ValidationError(
            f"{where}.name {name!r} is not a valid instance name: 1-100 letters, digits, '_', '.', ':' or '-', starting with a letter or digit"
        )
    template = fields.str("template", required=True, max_length=200)
    if not _TEMPLATE_KEY.match(template):
        raise ValidationError(f"{where}.template {template!r} is not a valid template key")
    tier = _enum(Tier, fields.str("tier", default=Tier.USER.value, max_length=20), f"{where}.tier")
    owner, org = resolve_owner(tier, fields.str("owner", max_length=200), caller, where)
    auth_fields = fields.obj("auth", required=True)
    assert auth_fields is not None
    auth = _instance_auth(auth_fields)
    account_email = fields.str("account_email", max_length=320)
    if account_email is not None:
        if auth.type is not AuthType.OAUTH:
            raise ValidationError(f"{where}.account_email is only for oauth instances (the OAuth account's email)")
        if not _EMAIL.match(account_email):
            raise ValidationError(f"{where}.account_email {account_email!r} is not an email address")
    connected = fields.bool("connected", default=True)
    fields.reject_unknown(_INSTANCE_FIELDS)
    return InstanceDef(
        name=name, template=template, tier=tier, owner=owner, auth=auth, account_email=account_email, connected=connected, org=org
    )


def _refuse_secret_values(data: Mapping[str, Any], where: str) -> None:
    auth = data.get("auth")
    places = [(where, data)] + ([(f"{where}.auth", auth)] if isinstance(auth, Mapping) else [])
    for place, obj in places:
        for field_name in obj:
            if str(field_name).lower() in _SECRET_VALUE_FIELDS:
                raise ValidationError(
                    f"{place}.{field_name}: secret values are never accepted or stored; send auth.secret_name, "
                    "the label of the secret (e.g. STRIPE_API_KEY)"
                )


def _instance_auth(fields: Fields) -> InstanceAuth:
    auth_type = _auth_type(fields)
    provider = fields.str("provider", max_length=64)
    secret_name = fields.str("secret_name", max_length=128)
    fields.reject_unknown({"type", "provider", "secret_name"})
    if auth_type is AuthType.OAUTH:
        if secret_name is not None:
            raise ValidationError(f"{fields.where}.secret_name is only for api_key instances")
        if not provider or not _PROVIDER.match(provider):
            raise ValidationError(f"{fields.where}.provider is required for oauth: a provider id such as 'google'")
        return InstanceAuth(AuthType.OAUTH, provider=provider)
    if provider is not None:
        raise ValidationError(f"{fields.where}.provider is only allowed when type is 'oauth'")
    if not secret_name:
        raise ValidationError(f"{fields.where}.secret_name is required for api_key: the label of the secret (e.g. STRIPE_API_KEY)")
    if looks_like_secret_value(secret_name) or not _SECRET_LABEL.match(secret_name):
        raise ValidationError(
            f"{fields.where}.secret_name must be the label of a secret (letters, digits, '_', '.', '-', '/', ':'; e.g. STRIPE_API_KEY), "
            "not the secret's value; the value is never accepted or stored"
        )
    return InstanceAuth(AuthType.API_KEY, secret_name=secret_name)


def resolve_owner(tier: Tier, owner: str | None, caller: Caller, where: str) -> tuple[str | None, str | None]:
    """(owner id, the team's org) of an instance at ``tier``; defaults to the caller's own. 403 outside the caller's tenants.

    A team owner is one of the caller's teams, in the caller's org (the org is None for other tiers).
    An admin may write for any tenant (operators seed org instances; another org's team is
    ``<org>/<team>``); only an admin writes global ones.
    """
    if owner is not None and not _OWNER.match(owner):
        raise ValidationError(f"{where}.owner {owner!r} is not a valid owner id")
    if tier is Tier.GLOBAL:
        if owner is not None:
            raise ValidationError(f"{where}.owner must be absent for tier 'global'")
        if not caller.admin:
            raise Forbidden(f"{where}: global instances need an admin token")
        return None, None
    if tier is Tier.TEAM:
        return _team_owner(owner, caller, where)
    if tier is Tier.USER:
        owner = owner or caller.sub
        allowed = owner == caller.sub
    else:
        owner = owner or caller.org
        if owner is None:
            raise ValidationError(f"{where}.owner is required for tier 'org': the token carries no org claim")
        allowed = owner == caller.org
    if not allowed and not caller.admin:
        raise Forbidden(f"{where}: a {tier.value} instance may only be written for your own {tier.value} (owner {owner!r} is not yours)")
    return owner, None


def _team_owner(owner: str | None, caller: Caller, where: str) -> tuple[str, str]:
    """(team, org) of a team instance: the caller's team within its org (``Caller.team_owner_tenant``)."""
    if owner is None:
        if len(caller.teams) != 1:
            raise ValidationError(f"{where}.owner is required for tier 'team': name one of the token's teams")
        owner = caller.teams[0]
    try:
        tenant = caller.team_owner_tenant(owner)
    except ValidationError as exc:
        raise ValidationError(f"{where}.owner: {exc.message}") from None
    parts = split_team_tenant(tenant) if tenant is not None else None
    if parts is None:
        raise Forbidden(f"{where}: a team instance may only be written for your own team (owner {owner!r} is not yours)")
    org, team = parts
    return team, org


# ---- search ------------------------------------------------------------------------------------


def parse_search_body(data: Any) -> SearchRequest:
    """A search request; a query over MAX_QUERY_CHARS is cut and a limit over MAX_LIMIT clamped, each with a notice."""
    fields = Fields(data)
    query, query_notice = bounded_text(fields.str("query", required=True, max_length=BODY_BOUNDED), MAX_QUERY_CHARS)
    include_catalog = fields.bool("include_catalog", default=False)
    exclude = parse_exclude(fields.raw("exclude"))
    limit, limit_notice = fields.clamped_int("limit", default=DEFAULT_LIMIT, minimum=1, maximum=MAX_LIMIT)
    ranking = _ranking_mode(fields.str("ranking", max_length=200))
    fields.reject_unknown({"query", "include_catalog", "exclude", "limit", "ranking"})
    if not query.strip():
        limit_notice = None  # browse mode lists every instance: no limit applies to clamp
    notices = tuple(n for n in (query_notice, limit_notice) if n)
    return SearchRequest(query=query, include_catalog=include_catalog, exclude=exclude, limit=limit, ranking=ranking, notices=notices)


def _ranking_mode(value: str | None) -> RankingMode:
    if value is None:
        return RankingMode.SERVED
    try:
        return RankingMode(value)
    except ValueError:
        allowed = ", ".join(mode.value for mode in RankingMode)
        raise ValidationError(f"ranking must be one of {allowed} (served is the default); got {value!r}") from None


def parse_exclude(value: Any) -> tuple[str, ...]:
    """A comma-separated string (``"gmail_work,stripe"``) or a list of strings -> entries, trimmed.

    Trailing commas (``"a,b,"``, as a list joined in a loop leaves them) are ignored; an empty entry
    between two names (``"a,,b"``) is refused, as it most likely lost a name."""
    if value is None:
        return ()
    if isinstance(value, str):
        if not value.strip():
            return ()
        kept = value.rstrip(_TRAILING)
        entries: Sequence[Any] = kept.split(",") if kept else []
    elif isinstance(value, list):
        entries = value
    else:
        raise ValidationError("exclude must be a comma-separated string of services (e.g. 'gmail_work,stripe') or a list of strings")
    if len(entries) > MAX_EXCLUDE_ENTRIES:
        raise ValidationError(f"exclude has {len(entries)} entries; the limit is {MAX_EXCLUDE_ENTRIES}")
    cleaned = []
    for position, entry in enumerate(entries, start=1):
        if not isinstance(entry, str):
            raise ValidationError(f"exclude entry {position} must be a string")
        entry = entry.strip()
        if not entry:
            raise ValidationError(f"exclude entry {position} is empty; separate instance names or template keys with single commas")
        if not _EXCLUDE_ENTRY.match(entry):
            raise ValidationError(f"exclude entry {position} {entry[:50]!r} is not an instance name or template key")
        cleaned.append(entry)
    return tuple(dict.fromkeys(cleaned))


def _auth_type(fields: Fields) -> AuthType:
    return _enum(AuthType, fields.str("type", required=True, max_length=20), f"{fields.where}.type")


def _enum(kind: Any, value: str, where: str) -> Any:
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(member.value for member in kind)
        raise ValidationError(f"{where} must be one of {allowed}, got {value!r}") from None

"""A minimal lint of deploy/Dockerfile: the properties the deployment relies on, read statically.

Checked: at least two named stages, the last one copying from an earlier one; in the stage that
installs the project, torch is installed first from the CPU index at the version pyproject.toml
pins (a bare ``torch`` resolved later pulls a CUDA build); the final stage runs as a numeric,
non-root ``USER`` (Kubernetes' ``runAsNonRoot`` can only verify a numeric one), sets
``HF_HUB_OFFLINE=1``, exposes 8080, has a ``HEALTHCHECK`` on ``/healthz`` (directly or through
``agentsearch-healthcheck``) and an ``ENTRYPOINT`` that runs ``agentsearch``; every ``COPY`` source
outside another stage exists in the build context (the repository root).
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .common import Problem, display_path

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PORT = "8080"
# What the HEALTHCHECK may run: the image's script (it GETs /healthz) or a direct request.
HEALTHCHECK_TARGETS = ("agentsearch-healthcheck", "/healthz")


@dataclass(frozen=True)
class Instruction:
    line: int
    keyword: str
    args: str


@dataclass
class Stage:
    name: str | None
    line: int
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


def parse_dockerfile(text: str) -> list[Instruction]:
    """Instructions with their first line number: comments dropped, ``\\`` continuations joined."""
    instructions: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if not pending:
            start = number
        continued = stripped.endswith("\\")
        pending.append(stripped[:-1].strip() if continued else stripped)
        if not continued:
            keyword, _, args = " ".join(pending).partition(" ")
            instructions.append(Instruction(start, keyword.upper(), args.strip()))
            pending = []
    return instructions


def stages_of(instructions: list[Instruction]) -> list[Stage]:
    stages: list[Stage] = []
    for instruction in instructions:
        if instruction.keyword == "FROM":
            match = re.search(r"\s+AS\s+(\S+)\s*$", instruction.args, re.IGNORECASE)
            stages.append(Stage(match.group(1) if match else None, instruction.line))
        elif stages:
            stages[-1].instructions.append(instruction)
    return stages


def torch_pin(pyproject: Path) -> str | None:
    """The ``X`` of ``torch==X`` in pyproject.toml's dependencies."""
    data = tomllib.loads(pyproject.read_text())
    for requirement in data.get("project", {}).get("dependencies", []):
        match = re.fullmatch(r"torch\s*==\s*([\w.+-]+)", requirement.strip())
        if match:
            return match.group(1)
    return None


def _exec_form(args: str) -> list[str]:
    """An instruction's command as words: JSON exec form or shell form."""
    try:
        parsed = json.loads(args)
    except json.JSONDecodeError:
        return shlex.split(args)
    return [str(part) for part in parsed] if isinstance(parsed, list) else [str(parsed)]


def check_dockerfile(path: Path, context: Path, pyproject: Path) -> tuple[list[Problem], str]:
    """Problems of the Dockerfile at ``path`` built with ``context``; and a summary line."""
    file = display_path(path)
    try:
        instructions = parse_dockerfile(path.read_text())
    except OSError as exc:
        return [Problem(file, "", f"cannot read: {exc}")], "not read"
    stages = stages_of(instructions)
    problems: list[Problem] = []
    if len(stages) < 2 or any(stage.name is None for stage in stages):
        problems.append(Problem(file, "FROM", "expected a multi-stage build: two or more stages, each named with AS"))
    if not stages:
        return problems, "no stages"
    final = stages[-1]
    earlier = {stage.name for stage in stages[:-1]}
    if not any(f"--from={name}" in copy.args for copy in final.all("COPY") for name in earlier):
        problems.append(Problem(file, f"line {final.line}", "the final stage copies nothing from an earlier stage"))
    problems += _check_torch_first(stages, pyproject, file)
    problems += _check_final_stage(final, file)
    problems += _check_copy_sources(stages, context, file)
    summary = f"{file}: {len(stages)} stages ({', '.join(str(s.name) for s in stages)}), torch CPU first, final stage USER, HEALTHCHECK, EXPOSE, ENTRYPOINT"
    return problems, summary


def _check_torch_first(stages: list[Stage], pyproject: Path, file: str) -> list[Problem]:
    pin = torch_pin(pyproject)
    if pin is None:
        return [Problem(display_path(pyproject), "project.dependencies", "expected a torch==X pin (the CPU build is installed first)")]
    for stage in stages:
        runs = stage.all("RUN")
        project = next((i for i, run in enumerate(runs) if re.search(r"pip install\b.*(\s\.(\s|$)|agentsearch.*\.whl)", run.args)), None)
        if project is None:
            continue
        torch = next((i for i, run in enumerate(runs) if re.search(rf"\btorch=={re.escape(pin)}(\s|$)", run.args)), None)
        if torch is None or torch > project:
            return [Problem(file, f"line {runs[project].line}", f"install torch=={pin} (pyproject's pin) from the CPU index before the project")]
        if CPU_INDEX not in runs[torch].args or "--index-url" not in runs[torch].args:
            return [Problem(file, f"line {runs[torch].line}", f"install torch with --index-url {CPU_INDEX} (the CPU build)")]
        return []
    return [Problem(file, "", "no stage installs the project (pip install . or its wheel)")]


def _check_final_stage(final: Stage, file: str) -> list[Problem]:
    problems: list[Problem] = []
    where = f"final stage (line {final.line})"
    users = final.all("USER")
    user = users[-1].args.split(":", 1)[0] if users else None
    if user is None or user in {"root", "0"}:
        problems.append(Problem(file, where, "run as a non-root USER"))
    elif not user.isdigit():
        problems.append(Problem(file, where, f"USER {user!r}: use a numeric uid so Kubernetes' runAsNonRoot can verify it"))
    env = " ".join(i.args for i in final.all("ENV"))
    if not re.search(r"\bHF_HUB_OFFLINE[= ]1\b", env):
        problems.append(Problem(file, where, "set ENV HF_HUB_OFFLINE=1: the model is packaged, nothing may be downloaded"))
    if not any(PORT in i.args.split() for i in final.all("EXPOSE")):
        problems.append(Problem(file, where, f"EXPOSE {PORT}"))
    healthchecks = final.all("HEALTHCHECK")
    if not healthchecks or healthchecks[-1].args.upper().startswith("NONE"):
        problems.append(Problem(file, where, "add a HEALTHCHECK on /healthz"))
    elif not any(target in healthchecks[-1].args for target in HEALTHCHECK_TARGETS):
        problems.append(Problem(file, f"line {healthchecks[-1].line}", "the HEALTHCHECK must ask /healthz (or run agentsearch-healthcheck)"))
    entrypoints = final.all("ENTRYPOINT")
    if not entrypoints or not any(Path(word).name == "agentsearch" for word in _exec_form(entrypoints[-1].args)):
        problems.append(Problem(file, where, "ENTRYPOINT must run agentsearch"))
    return problems


def _ignored_patterns(context: Path) -> list[str]:
    try:
        lines = (context / ".dockerignore").read_text().splitlines()
    except OSError:
        return []
    return [line.strip().rstrip("/") for line in lines if line.strip() and not line.startswith(("#", "!"))]


def _check_copy_sources(stages: list[Stage], context: Path, file: str) -> list[Problem]:
    problems = []
    ignored = _ignored_patterns(context)
    for stage in stages:
        for copy in stage.all("COPY") + stage.all("ADD"):
            words = [w for w in _exec_form(copy.args) if not w.startswith("--")]
            if "--from=" in copy.args or len(words) < 2:
                continue
            for source in words[:-1]:
                if not any(context.glob(source)):
                    problems.append(Problem(file, f"line {copy.line}", f"COPY source {source} is not in the build context {display_path(context)}"))
                elif any(fnmatch.fnmatch(source.rstrip("/"), pattern) for pattern in ignored):
                    problems.append(Problem(file, f"line {copy.line}", f"COPY source {source} is excluded by .dockerignore"))
    return problems

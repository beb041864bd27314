"""``make deploy-check`` (``python -m deploy.check``): validate deploy/ without a container engine.

Three checks, each in its own module, all static:

- ``compose_check``: docker-compose.yml interpolated as Compose does, against the Compose
  specification's JSON schema (vendored by ``check-jsonschema``), then its references and topology;
- ``k8s_check``: every manifest under k8s/ against the Kubernetes JSON schemas (shipped by
  ``kubernetes-validate``, strict), then the references between objects;
- ``dockerfile_check``: a minimal lint of the Dockerfile (stages, torch CPU first, non-root USER,
  HEALTHCHECK, ENTRYPOINT, COPY sources).

The agentsearch environment of every compose service and Kubernetes container also goes through
the service's own settings validation. Exit status 0 when all pass, 1 with one line per problem.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .common import REPO_ROOT, Problem
from .compose_check import check_compose
from .dockerfile_check import check_dockerfile
from .k8s_check import KUBERNETES_VERSION, KUSTOMIZATION, check_kubernetes, manifest_files

DEPLOY_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Report:
    """What each check looked at, and every problem found."""

    summaries: list[str]
    problems: list[Problem]

    @property
    def ok(self) -> bool:
        return not self.problems


def run_checks(
    *,
    compose: Path | None = DEPLOY_DIR / "docker-compose.yml",
    k8s_dir: Path | None = DEPLOY_DIR / "k8s",
    dockerfile: Path | None = DEPLOY_DIR / "Dockerfile",
    context: Path = REPO_ROOT,
    kubernetes_version: str = KUBERNETES_VERSION,
) -> Report:
    """Run the checks on the given files (``None`` skips one); the defaults are the shipped deploy/."""
    summaries: list[str] = []
    problems: list[Problem] = []
    if compose is not None:
        found, summary = check_compose(compose)
        problems += found
        summaries.append(f"compose: {summary}")
    if k8s_dir is not None:
        kustomization = k8s_dir / KUSTOMIZATION
        found, summary = check_kubernetes(
            manifest_files(k8s_dir),
            version=kubernetes_version,
            kustomization=kustomization if kustomization.is_file() else None,
        )
        problems += found
        summaries.append(f"kubernetes: {k8s_dir.name}/: {summary}")
    if dockerfile is not None:
        found, summary = check_dockerfile(dockerfile, context, context / "pyproject.toml")
        problems += found
        summaries.append(f"dockerfile: {summary}")
    return Report(summaries, problems)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--compose", type=Path, default=DEPLOY_DIR / "docker-compose.yml")
    parser.add_argument("--k8s-dir", type=Path, default=DEPLOY_DIR / "k8s")
    parser.add_argument("--dockerfile", type=Path, default=DEPLOY_DIR / "Dockerfile")
    parser.add_argument("--kubernetes-version", default=KUBERNETES_VERSION, help=f"schemas of this minor release (default {KUBERNETES_VERSION})")
    args = parser.parse_args(argv)
    report = run_checks(compose=args.compose, k8s_dir=args.k8s_dir, dockerfile=args.dockerfile, kubernetes_version=args.kubernetes_version)
    for summary in report.summaries:
        print(f"checked {summary}")
    for problem in report.problems:
        print(f"PROBLEM {problem}", file=sys.stderr)
    print(f"deploy-check: {'ok' if report.ok else f'{len(report.problems)} problem(s)'}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())

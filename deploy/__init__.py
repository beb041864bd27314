"""Deployment files (Dockerfile, compose, Kubernetes manifests) and their static checks: ``python -m deploy.check``."""

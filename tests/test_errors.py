"""Every exception class defined in service/ and workers/ is drawn in the tree of errors.py's docstring."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import service
import service.errors
import workers


def _modules() -> list[str]:
    names = ["service", "workers"]
    for package in (service, workers):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if not info.name.endswith(".__main__"):  # runs the CLI on import
                names.append(info.name)
    return sorted(names)


def _exceptions() -> dict[str, str]:
    """``module.Class`` -> class name, for every BaseException subclass a module defines."""
    found: dict[str, str] = {}
    for name in _modules():
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == name:
                found[f"{name}.{attr}"] = value.__name__
    return found


def test_the_scan_finds_the_errors_of_several_modules() -> None:
    found = _exceptions()
    assert "service.errors.AgentSearchError" in found
    assert len({qualified.rsplit(".", 1)[0] for qualified in found}) > 5


def test_every_exception_class_is_drawn_in_the_errors_tree() -> None:
    tree = service.errors.__doc__ or ""
    missing = sorted(q for q, name in _exceptions().items() if not re.search(rf"\b{re.escape(name)}\b", tree))
    assert not missing, f"draw these in service/errors.py's docstring tree, with their status or who catches them: {missing}"


def test_every_class_of_errors_py_is_an_exception_drawn_in_its_tree() -> None:
    tree = service.errors.__doc__ or ""
    for name, value in vars(service.errors).items():
        if inspect.isclass(value) and value.__module__ == service.errors.__name__:
            assert issubclass(value, Exception), name
            assert re.search(rf"\b{name}\b", tree), name

"""The layers of the tree, checked on every import statement (lazy ones included).

From the bottom: ``core`` (errors, validation) → ``crypto`` → ``protocol.maths`` (pure numpy,
no I/O) and ``protocol.algorithms`` (the registry) → ``protocol.wire`` (the REST format) and
``data`` (loaders) → ``infra`` (what the services share) → the services ``participant``,
``coordinator``, ``counting`` → the front end (``fedclust``: the command line, the
simulator, the estimators, the Python client). A layer imports only from the layers it is
allowed; the three services never import each other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {
    "core": "core", "crypto": "crypto", "data": "data", "infra": "infra",
    "protocol": "protocol", "participant": "participant", "coordinator": "coordinator",
    "counting": "counting",
}
SERVICES = ("participant", "coordinator", "counting")
#: Each layer and the fedclust layers it may import (itself always).
ALLOWED: dict[str, frozenset[str]] = {
    "core": frozenset(),
    "crypto": frozenset({"core"}),
    "maths": frozenset({"core"}),
    "algorithms": frozenset({"core"}),
    "wire": frozenset({"core", "crypto", "maths", "algorithms"}),
    "data": frozenset({"core", "maths"}),
    "infra": frozenset({"core", "crypto", "maths", "algorithms", "wire"}),
    "participant": frozenset({"core", "crypto", "maths", "algorithms", "wire", "data", "infra"}),
    "coordinator": frozenset({"core", "crypto", "maths", "algorithms", "wire", "infra"}),
    "counting": frozenset({"core", "crypto", "maths", "algorithms", "wire", "infra"}),
}


def _layer(module: str) -> str:
    """The layer of a ``fedclust.…`` module name."""
    parts = module.split(".")
    if len(parts) == 1:
        return "front"
    top = parts[1]
    if top == "protocol":
        return parts[2] if len(parts) > 2 and parts[2] in ("maths", "algorithms", "wire") \
            else "protocol"
    return top if top in FOLDERS else "front"


def _module_of(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(["fedclust", *parts])


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every fedclust module a file imports, with its line (relative imports resolved)."""
    module = _module_of(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.startswith("fedclust")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            if name.startswith("fedclust"):
                # ``from fedclust.protocol import maths`` imports a subpackage
                out += [(node.lineno, f"{name}.{a.name}") if _layer(name) == "protocol"
                        else (node.lineno, name) for a in node.names]
    return out


def _sources() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py")
                  if "migrations" not in p.parts or p.name != "env.py")


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_module_imports_only_the_layers_below_it(path: Path) -> None:
    own = _layer(_module_of(path))
    if own == "protocol":  # protocol/__init__.py: a docstring only
        assert _imports(path) == []
        return
    wrong = [
        f"line {line}: {name} ({_layer(name)})" for line, name in _imports(path)
        if _layer(name) != own and _layer(name) not in ALLOWED[own]
    ]
    assert not wrong, f"{own} may import {sorted(ALLOWED[own])}; it imports {wrong}"


def test_the_maths_is_pure() -> None:
    """No module of the maths imports a web, database or settings library."""
    banned = ("fastapi", "starlette", "httpx", "sqlalchemy", "alembic", "pydantic", "uvicorn")
    found = []
    for path in (ROOT / "protocol" / "maths").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            found += [f"{path.relative_to(ROOT)}: {n}" for n in names
                      if n.split(".")[0] in banned]
    assert not found


def test_every_source_folder_is_checked() -> None:
    """A new top-level package folder must be given a layer here."""
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}
    assert packages - {"fedclust", "tests", "benchmarks"} == set(FOLDERS)

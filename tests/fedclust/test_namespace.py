"""One namespace on install: the wheel puts only ``fedclust`` into site-packages, and nothing in
the tree imports the top-level folders by their bare names (which layer imports which:
``tests/test_layers.py``)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("core", "crypto", "data", "infra", "protocol", "participant", "coordinator", "counting")


def _imported_modules(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def _sources() -> list[Path]:
    """Every Python file once (fedclust/protocol and its siblings are links to the folders)."""
    files = {p.resolve() for name in ("fedclust", *FOLDERS, "tests", "benchmarks")
             for p in (ROOT / name).rglob("*.py")}
    return sorted(files)


def test_no_source_imports_a_bare_folder_name() -> None:
    offending = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in _sources()
        for name in _imported_modules(path)
        if name.split(".")[0] in FOLDERS
    ]
    assert len(_sources()) > 100
    assert offending == []


def test_the_wheel_installs_one_top_level_package(tmp_path: Path) -> None:
    source = tmp_path / "source"  # built from a copy: an in-tree build leaves build/ behind
    shutil.copytree(ROOT, source, symlinks=True, ignore=shutil.ignore_patterns(
        ".venv", ".git", "build", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis"))
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet",
         "--wheel-dir", str(tmp_path / "wheel"), str(source)],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = (tmp_path / "wheel").glob("fedclust-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"fedclust"}
    for folder in FOLDERS:
        assert f"fedclust/{folder}/__init__.py" in names
    assert "fedclust/protocol/maths/fcm.py" in names
    assert "fedclust/coordinator/api/__init__.py" in names
    for asset in ("index.html", "app.js", "style.css"):  # the dashboard, as package data
        assert f"fedclust/coordinator/ui/{asset}" in names
    for service in ("coordinator", "counting"):  # each service's schema revisions
        for script in ("env.py", "script.py.mako", "versions/v0001_baseline.py"):
            assert f"fedclust/{service}/migrations/{script}" in names

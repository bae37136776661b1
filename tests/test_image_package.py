"""The package deploy/Dockerfile installs, built the same way without Docker.

The Dockerfile COPYs a few files and folders into ``/src`` and runs ``pip install .``. Here
its COPY lines (read from the Dockerfile, so a folder it forgets is missed here too) lay the
same files into a temporary ``src``, the wheel is built from that folder (``pip wheel``, with
the build backend installed here), unpacked, and run from another folder with only the
wheel's code importable as ``fedclust``: every module of the source tree must be in it, and
the image's commands must work from it — ``fedclust --version``, the services' probe, and
``coordinator migrate`` / ``counter migrate``, which need Alembic's revision files (package
data). No Docker daemon here: the image itself is not built.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from fedclust.demo import free_port
from tests.fedclust.test_migrate_cli import coordinator_toml, counting_toml

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
#: The source folders of the package and where setuptools maps them (pyproject.toml).
PACKAGES = {
    "fedclust": "fedclust", "core": "fedclust/core", "crypto": "fedclust/crypto",
    "data": "fedclust/data", "infra": "fedclust/infra", "protocol": "fedclust/protocol",
    "participant": "fedclust/participant", "coordinator": "fedclust/coordinator",
    "counting": "fedclust/counting",
}


def _copy_as_dockerfile(src: Path) -> None:
    """Each ``COPY a b ... dest`` of the Dockerfile, into ``src`` (its WORKDIR /src)."""
    copies = re.findall(r"(?m)^COPY\s+(.+)$", DOCKERFILE.read_text("utf-8"))
    assert copies, "the Dockerfile has no COPY line"
    for line in copies:
        *sources, dest = line.split()
        target = src / dest
        for source in sources:
            origin = ROOT / source
            into = target / origin.name if dest.endswith("/") else target
            if origin.is_dir():  # Docker keeps symbolic links as links
                shutil.copytree(origin, into, symlinks=True,
                                ignore=shutil.ignore_patterns("__pycache__"))
            else:
                into.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, into)


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from the Dockerfile's copy, unpacked."""
    root = tmp_path_factory.mktemp("image")
    src, out, unpacked = root / "src", root / "dist", root / "site"
    src.mkdir()
    _copy_as_dockerfile(src)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(out), str(src)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = out.glob("fedclust-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(unpacked)
    return unpacked


def _run(unpacked: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python *args`` in ``cwd`` with the unpacked wheel first on the import path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEDCLUST_")}
    env["PYTHONPATH"] = str(unpacked)
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=120, check=False,
    )


def test_every_module_of_the_source_tree_is_in_the_wheel(unpacked: Path) -> None:
    for folder, package in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            if path.is_symlink() or "__pycache__" in path.parts:
                continue
            relative = path.relative_to(ROOT / folder)
            if folder == "fedclust" and relative.parts[0] in PACKAGES:
                continue  # a link to another source folder, checked as that folder
            assert (unpacked / package / relative).is_file(), f"{folder}/{relative}"
    assert list((unpacked / "fedclust/coordinator/ui").iterdir()), "the dashboard's files"


def test_the_images_commands_run_from_the_wheel(unpacked: Path, tmp_path: Path) -> None:
    where = _run(unpacked, tmp_path, "-c", "import fedclust; print(fedclust.__file__)")
    assert where.stdout.strip() == str(unpacked / "fedclust" / "__init__.py"), where.stderr
    version = _run(unpacked, tmp_path, "-m", "fedclust", "--version")
    assert version.returncode == 0 and version.stdout.startswith("fedclust "), version.stderr
    for role, write in (("coordinator", coordinator_toml), ("counter", counting_toml)):
        config = write(tmp_path, f"sqlite:///{role}.db")
        table = "[coordinator]" if role == "coordinator" else "[counting]"
        port = free_port()  # nothing listens there
        config.write_text(config.read_text("utf-8").replace(table, f"{table}\nport = {port}"))
        migrated = _run(unpacked, tmp_path, "-m", "fedclust", role, "migrate", "--config",
                        str(config))
        assert migrated.returncode == 0, migrated.stderr
        assert "upgraded from no revision" in migrated.stdout
        probed = _run(unpacked, tmp_path, "-m", "fedclust.probe", role, "--config", str(config))
        assert probed.returncode == 1  # it read the config: the port is the configured one
        assert probed.stderr.startswith(
            f"fedclust probe: {role} not ready: http://127.0.0.1:{port}/readyz: "
        ), probed.stderr

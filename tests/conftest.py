"""Shared test fixtures: where the shared datasets live (skip cleanly when absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedclust.data.loaders import DATASETS_ENV, shared_datasets_dir

# The PostgreSQL fixtures: postgres, postgres_url, database_url (sqlite and postgresql).
pytest_plugins = ["tests.pg"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--run-slow", action="store_true",
        help="also run the tests marked slow (long reproductions, the whole protection matrix)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` are skipped unless ``--run-slow`` is given."""
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --run-slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def datasets() -> Path:
    """The shared datasets folder: $FEDCLUST_DATASETS, else ../shared/datasets beside the
    project root (:func:`shared_datasets_dir`)."""
    found = shared_datasets_dir()
    if found is None:
        pytest.skip(f"shared datasets not found (${DATASETS_ENV}, else ../shared/datasets)")
    return found

"""The terminal tables (``fedclust.tables``, rich): each value in its row, plain text whatever
the terminal, and rich never loaded by ``fedclust --version``."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fedclust.deep_simulate import (
    DeepGroup,
    DeepIteration,
    DeepSimulationDocument,
    format_deep_result,
)
from fedclust.report import format_result
from fedclust.tables import render_table
from tests.fedclust._results import sample_document


def _rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines()]


def test_render_table_aligns_numbers_right_and_text_left() -> None:
    lines = render_table(["name", "n"], [["a", "1.5"], ["bbb", "10.25"]], numeric=[1],
                         indent=2).splitlines()
    assert lines[0] == "  name       n"
    assert set(lines[1].strip()) == {"─"}
    assert lines[2:] == ["  a        1.5", "  bbb    10.25"]


def test_render_table_shows_markup_and_emoji_codes_as_text() -> None:
    text = render_table(["[b]h[/b]"], [["[red]x[/red] :smile:"]])
    assert "[b]h[/b]" in text and "[red]x[/red] :smile:" in text


def test_sweep_and_centers_tables_hold_each_value_in_its_row() -> None:
    text = format_result(sample_document(names=["height", "a_very_long_name"]), title="job j")
    rows = _rows(text)
    assert ["K", "FedFuzzDB", "silhouette", "rounds", "stop"] in rows
    assert ["2", "0.9000", "0.5000", "7", "converged"] in rows
    assert ["*", "3", "0.4000", "0.7000", "8", "converged"] in rows  # the selected K
    assert ["4", "0.6000", "0.6000", "9", "converged"] in rows
    assert ["center", "height", "a_very_lo~"] in rows
    assert ["0", "0.0000", "1.0000"] in rows
    assert ["1", "withheld", "(see", "notes)"] in rows
    assert ["2", "20.0000", "21.0000"] in rows
    lines = text.splitlines()
    assert lines[:2] == ["job j: ffcm on toy (3 participants, seed 1)", ""]
    assert "selected K = 3 (minimum FedFuzzDB); elbow K = 2" in lines
    assert lines[lines.index("centers at K = 3:") - 2] == ""  # after the sweep's blank line


def test_sweep_table_has_an_ari_column_when_the_truth_is_known() -> None:
    doc = sample_document()
    doc = doc.model_copy(update={"sweep": [
        e.model_copy(update={"ari": a}) for e, a in zip(doc.sweep, [0.5, 0.912, None],
                                                          strict=True)
    ]})
    rows = _rows(format_result(doc, title="t"))
    assert ["K", "FedFuzzDB", "silhouette", "ARI", "rounds", "stop"] in rows
    assert ["*", "3", "0.4000", "0.7000", "0.912", "8", "converged"] in rows
    assert ["4", "0.6000", "0.6000", "9", "converged"] in rows  # no ARI: an empty cell


def test_tables_are_plain_text_whatever_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    wide = format_result(sample_document(width=12), title="t")
    monkeypatch.setenv("COLUMNS", "20")
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("TERM", "xterm-256color")
    narrow = format_result(sample_document(width=12), title="t")
    assert narrow == wide
    assert "\x1b" not in narrow
    assert max(len(line) for line in narrow.splitlines()) > 100  # twelve columns, not wrapped
    assert all(line == line.rstrip() for line in narrow.splitlines())


def test_deep_tables_hold_each_value_in_its_row() -> None:
    fedcref = DeepSimulationDocument(
        algorithm="fedcref", dataset="digits", seed=0, protection="masking", participants=4,
        preset="code", device="cpu",
        params={}, true_groups=3, groups_found=2, ari=0.8,
        groups=[DeepGroup(members=["p0:0", "p1:1"], truth=[0, 0], protected=True)],
        wrong_associations=1, isolated_clusters=2, initial_accuracy=0.7, final_accuracy=0.85,
        iterations=[
            DeepIteration(iteration=1, groups=3, isolated_clusters=4, wrong_associations=None,
                          mean_accuracy=None, frozen=0),
            DeepIteration(iteration=12, groups=2, isolated_clusters=2, wrong_associations=1,
                          mean_accuracy=0.85, frozen=3),
        ],
        stop_reason="stable", seconds=12.34, notes=["n1"],
    )
    rows = _rows(format_deep_result(fedcref))
    assert ["it", "groups", "isolated", "wrong", "ACC", "frozen"] in rows
    assert ["1", "3", "4", "None", "-", "0"] in rows
    assert ["12", "2", "2", "1", "0.850", "3"] in rows
    distill = DeepSimulationDocument(
        algorithm="fed-distill", dataset="digits", seed=0, protection="masking",
        participants=4, preset="code", device="cpu", mode="distill",
        params={"class_sets": [[0, 1, 2], [3, 4, 5, 6]]},
        true_groups=2, groups_found=2, ari=1.0,
        groups=[DeepGroup(members=["g0-c0"], truth=[0], accuracy=0.9, protected=True)],
        accuracy_per_true_group=[0.912, 0.85, 0.5], local_accuracy_per_true_group=[0.8, 0.7],
        overall_accuracy=0.88, local_overall_accuracy=0.75, seconds=3.0, notes=[],
    )
    text = format_deep_result(distill)
    rows = _rows(text)
    assert ["true", "group", "classes", "accuracy", "local-only"] in rows
    assert ["0", "0,1,2", "0.912", "0.800"] in rows
    assert ["1", "3,4,5,6", "0.850", "0.700"] in rows
    assert ["2", "0.500", "-"] in rows
    assert "  overall accuracy 0.880 (local-only 0.750)" in text.splitlines()


def test_importing_the_command_line_does_not_load_rich() -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, fedclust.cli; print('rich' in sys.modules)"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    assert loaded == "False"

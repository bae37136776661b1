"""A participant's messy CSV read as its ``[data]`` table says: missing values, decimal
commas, another text encoding (the CLI's --missing, --decimal and --encoding)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedclust.participant.config import ParticipantConfig

HEAD = (
    '[participant]\nid = "org-a"\ncoordinator_url = "http://coordinator"\n'
    'counting_url = "http://counting"\ntoken = "tok-org-a-0123456789"\n'
)


def _config(folder: Path, data: str) -> ParticipantConfig:
    file = folder / "participant.toml"
    file.write_text(HEAD + '[data]\npath = "rows.csv"\n' + data, encoding="utf-8")
    return ParticipantConfig.from_file(file)


def test_decimal_commas_latin1_and_missing_rows(tmp_path: Path) -> None:
    text = "größe;b\n1,5;2,25\n;3,0\n-0,5;NA\n4,0;5,5\n"
    (tmp_path / "rows.csv").write_bytes(text.encode("latin-1"))
    with pytest.raises(ValueError, match="is not utf-8 text"):
        _config(tmp_path, "").data.load()
    with pytest.raises(ValueError, match=r"column 'größe' .* 1 missing value"):
        _config(tmp_path, 'decimal = ","\nencoding = "latin-1"\n').data.load()
    with pytest.warns(UserWarning, match="left out 2 row"):
        X = _config(
            tmp_path, 'decimal = ","\nencoding = "latin-1"\nmissing = "drop"\n'
        ).data.load()
    np.testing.assert_array_equal(X, [[1.5, 2.25], [4.0, 5.5]])


@pytest.mark.parametrize(("data", "problem"), [
    ('missing = "skip"\n', '[data] missing must be "fail" or "drop".'),
    ('decimal = ";"\n', '[data] decimal must be "." or ",".'),
    ('stream = true\ndecimal = ","\n', "[data] stream = true reads UTF-8 files with decimal"),
])
def test_bad_data_options_are_named(tmp_path: Path, data: str, problem: str) -> None:
    (tmp_path / "rows.csv").write_text("a,b\n1,2\n", encoding="utf-8")
    with pytest.raises(ValueError) as error:
        _config(tmp_path, data)
    assert problem in str(error.value)

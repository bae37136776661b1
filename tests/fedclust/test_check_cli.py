"""``fedclust coordinator|counter|participant check``: the configuration read by the service's
own loader, then the files it needs; OK (exit 0), or the loader's first error, else every
problem found (exit 1)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from fedclust.cli import main
from fedclust.crypto.tokens import token_sha256
from fedclust.infra.preflight import certificate_problems, database_problems
from fedclust.infra.tls import TlsSettings
from fedclust.pki import init_ca, issue

ANALYST = token_sha256("analyst")


def coordinator_toml(folder: Path, url: str, tls: str = "") -> Path:
    path = folder / "coordinator.toml"
    path.write_text(
        f'[coordinator]\ndatabase_url = "{url}"\ncounting_url = "http://127.0.0.1:9"\n'
        f'counting_token = "tok"\n\n[[analysts]]\nname = "alice"\ntoken_sha256 = "{ANALYST}"\n'
        + tls,
        encoding="utf-8",
    )
    return path


def participant_toml(folder: Path, *, data: str, state_dir: str = "state") -> Path:
    path = folder / "participant.toml"
    path.write_text(
        '[participant]\nid = "hospital-a"\ncoordinator_url = "http://127.0.0.1:8700"\n'
        'counting_url = "http://127.0.0.1:8701"\ntoken = "a-participant-token"\n'
        f'state_dir = "{state_dir}"\n\n[data]\npath = "{data}"\ncolumns = ["x", "y"]\n',
        encoding="utf-8",
    )
    return path


def check(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    code = main([*argv])
    return code, capsys.readouterr().out.splitlines()


def test_a_good_coordinator_config_is_ok(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ca = init_ca(tmp_path / "ca")
    cert = issue("coordinator", tmp_path / "ca", tmp_path / "certs", dns=["localhost"])
    tls = (f'\n[tls]\ncertificate = "{cert.certificate}"\nkey = "{cert.key}"\n'
           f'ca = "{ca.certificate}"\n')
    config = coordinator_toml(tmp_path, "sqlite:///db/coordinator.db", tls)
    code, out = check(capsys, "coordinator", "check", "--config", str(config))
    assert (code, out) == (0, [f"coordinator configuration {config}: OK"])
    assert not (tmp_path / "db").exists()  # a check creates nothing


def test_a_coordinator_config_with_a_bad_database_lists_the_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a-file").write_text("", encoding="utf-8")
    config = coordinator_toml(tmp_path, "sqlite:///a-file/coordinator.db")
    code, out = check(capsys, "coordinator", "check", "--config", str(config))
    assert code == 1
    assert out[0] == f"coordinator configuration {config}: 1 problem(s)"
    assert out[1].startswith("  - coordinator.database_url: cannot create ")
    assert "a-file is not a folder" in out[1]


def test_a_missing_certificate_is_named_by_its_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tls = '\n[tls]\ncertificate = "missing.pem"\nkey = "missing-key.pem"\n'
    config = coordinator_toml(tmp_path, "sqlite:///c.db", tls)
    code, out = check(capsys, "coordinator", "check", "--config", str(config))
    assert code == 1
    assert out[1] == f"  - {config}: [tls] certificate: no file at {tmp_path / 'missing.pem'}."


def test_the_counting_service_check_names_an_unknown_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "counting.toml"
    config.write_text(
        f'[counting]\ndatabase_url = "nosuchdb://h/x"\n'
        f'coordinator_token_sha256 = "{token_sha256("coordinator")}"\n',
        encoding="utf-8",
    )
    code, out = check(capsys, "counter", "check", "--config", str(config))
    assert (code, out[1:]) == (1, ["  - counting.database_url: SQLAlchemy knows no database "
                                   "'nosuchdb'"])
    config.write_text(config.read_text().replace("nosuchdb://h/x", "sqlite:///k.db"))
    assert check(capsys, "counter", "check", "--config", str(config))[0] == 0


def test_a_participant_check_reports_every_problem_and_then_ok(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a-file").write_text("", encoding="utf-8")
    config = participant_toml(tmp_path, data="rows.csv", state_dir="a-file/state")
    code, out = check(capsys, "participant", "check", "--config", str(config))
    assert code == 1 and out[0] == f"participant configuration {config}: 2 problem(s)"
    assert out[1] == f"  - [data] path: data file {tmp_path / 'rows.csv'} does not exist."
    assert out[2].startswith("  - [participant] state_dir: cannot create ")
    # The data file read as the agent reads it: a column the file lacks is a problem.
    (tmp_path / "rows.csv").write_text("x,z\n1,2\n3,4\n5,6\n", encoding="utf-8")
    config = participant_toml(tmp_path, data="rows.csv")
    code, out = check(capsys, "participant", "check", "--config", str(config))
    assert code == 1 and out[1].startswith("  - [data] path: ") and "'y'" in out[1]
    (tmp_path / "rows.csv").write_text("x,y\n1,2\n3,4\n5,6\n", encoding="utf-8")
    assert check(capsys, "participant", "check", "--config", str(config)) == (
        0, [f"participant configuration {config}: OK"]
    )


def test_an_unreadable_config_is_one_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = check(capsys, "participant", "check", "--config", str(tmp_path / "none.toml"))
    assert code == 1 and len(out) == 2 and "none.toml" in out[1]


def test_expired_certificates_and_database_urls(tmp_path: Path) -> None:
    ca = init_ca(tmp_path / "ca", days=1)
    tls = TlsSettings(ca=ca.certificate)
    assert certificate_problems(tls) == []
    later = datetime.now(UTC) + timedelta(days=3)
    (problem,) = certificate_problems(tls, now=later)
    assert problem.startswith(f"[tls] ca: {ca.certificate} (CN=fedclust federation CA) expired")
    assert database_problems("not a url", key="k")[0].startswith("k is not a SQLAlchemy URL")
    assert database_problems(f"sqlite:///{tmp_path}/new/deeper/x.db", key="k") == []

"""The config files' pydantic models (infra.config_toml): one schema for the TOML file, the
variables and the secret files; one-line errors naming the table and the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from fedclust.client import AnalystFile
from fedclust.coordinator.settings import CoordinatorFile, CoordinatorSettings
from fedclust.counting.settings import CountingFile, CountingSettings
from fedclust.crypto.tokens import token_sha256
from fedclust.infra.config_env import EnvSchema
from fedclust.infra.config_toml import parse
from fedclust.infra.tls import CLIENT_KEYS, COUNTING_KEYS, SERVER_KEYS
from fedclust.participant.config import ParticipantFile

DIGEST = token_sha256("coordinator")
COORDINATOR: dict[str, Any] = {"coordinator": {"counting_url": "http://n", "counting_token": "t"}}
COUNTING: dict[str, Any] = {"counting": {"coordinator_token_sha256": DIGEST}}
PARTICIPANT: dict[str, Any] = {
    "participant": {"id": "a", "counting_url": "http://n"}, "data": {"path": "a.csv"},
}


def merged(doc: dict[str, Any], table: str, **keys: Any) -> dict[str, Any]:
    return {**doc, table: {**doc.get(table, {}), **keys}}


@pytest.mark.parametrize(
    ("model", "doc", "message"),
    [
        (CoordinatorFile, merged(COORDINATOR, "coordinator", port="8800"),
         "[coordinator] port must be an integer."),
        (CoordinatorFile, merged(COORDINATOR, "coordinator", port=0),
         "[coordinator] port must be in [1, 65535]; got 0."),
        (CountingFile, merged(COUNTING, "counting", metrics=1),
         "[counting] metrics must be true or false."),
        (CountingFile, merged(COUNTING, "counting", paillier_bits=512),
         "[counting] paillier_bits must be >= 1024; got 512."),
        (CountingFile, merged(COUNTING, "counting", uploads_in_flight=True),
         "[counting] uploads_in_flight must be an integer >= 1."),
        (CountingFile, {**COUNTING, "participants": [{"id": "p", "token_sha256": DIGEST},
                                                     {"id": "q"}]},
         "[[participants]] entry 2 is missing 'token_sha256'."),
        (CountingFile, {**COUNTING, "participants": {"id": "p"}},
         "[[participants]] must be an array of tables."),
        (CoordinatorFile, {**COORDINATOR, "analysts": [{"name": "a", "token_sha256": DIGEST,
                                                        "rol": "admin"}]},
         "unknown key(s) 'rol' in [[analysts]] entry 1; expected: name, role, token_sha256."),
        (CountingFile, {**COUNTING, "tsl": {}},
         "unknown key(s) 'tsl' in the file; expected: counting, participants, tls."),
        (CountingFile, {**COUNTING, "tls": {"key": ""}},
         "[tls] key must be the path of a PEM file."),
        (ParticipantFile, {"participant": PARTICIPANT["participant"]},
         "missing the [data] table."),
        (ParticipantFile, merged(PARTICIPANT, "data", columns=["x", 1]),
         "[data] columns must be a non-empty list of column names (or, for a .npy file, of "
         "column indices >= 0)."),
        (ParticipantFile, merged(PARTICIPANT, "policy", value_bound=float("inf")),
         '[policy] value_bound must be "auto" or a number B > 0 declaring |x| <= B for every '
         "raw value."),
        (ParticipantFile, merged(PARTICIPANT, "policy", allowed_algorithms=[]),
         "[policy] allowed_algorithms must name at least one algorithm."),
        (ParticipantFile, merged(PARTICIPANT, "policy", protections=["none", "magic"]),
         "[policy] protections must be a non-empty list of protections among 'masking', "
         "'none', 'paillier' (\"none\" only to take part in unprotected jobs, whose statistics "
         "reach the coordinator in the clear)."),
        (AnalystFile, {"analyst": {"url": "http://c"}},
         "unknown key(s) 'url' in [analyst]; expected: coordinator_url, token."),
        (AnalystFile, {"participant": {}},
         "unknown key(s) 'participant' in the file; expected: analyst, tls."),
        (ParticipantFile, merged(PARTICIPANT, "policy", rosters="fixed"),
         '[policy] accepted_rosters (a list of lists of participant ids) is needed with '
         'rosters = "fixed", and only then.'),
    ],
)
def test_an_error_is_one_line_naming_the_table_and_the_key(
    model: type[BaseModel], doc: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError) as info:
        parse(model, doc)
    assert str(info.value) == message


def test_a_wrongly_typed_secret_is_not_echoed() -> None:
    with pytest.raises(ValueError) as info:
        parse(CoordinatorFile, merged(COORDINATOR, "coordinator", counting_token=987654321))
    assert str(info.value) == "[coordinator] counting_token must be a non-empty string."


def test_the_variables_are_the_models_keys() -> None:
    """No hand-written list: each table's variables are its model's keys."""
    coordinator = EnvSchema.of(CoordinatorFile).sections
    assert set(coordinator["coordinator"]) == {
        "host", "port", "database_url", "metrics", "uploads_in_flight", "counting_url",
        "counting_token", "task_timeout_seconds", "public_url",
    }
    assert set(coordinator["tls"]) == SERVER_KEYS
    assert not EnvSchema.of(CoordinatorFile).is_table("analysts")  # one JSON array
    counting = EnvSchema.of(CountingFile).sections
    assert set(counting["counting"]) == {
        "host", "port", "database_url", "metrics", "uploads_in_flight", "min_participants",
        "paillier_bits", "coordinator_token_sha256",
    }
    assert set(counting["tls"]) == COUNTING_KEYS
    participant = EnvSchema.of(ParticipantFile)
    assert set(participant.sections["tls"]) == CLIENT_KEYS
    assert set(participant.sections["model"]) == {"device"}
    assert not participant.is_table("peers")


def test_a_bad_database_url_is_refused_for_both_services(tmp_path: Path) -> None:
    for name, body in (("coordinator", COORDINATOR), ("counting", COUNTING)):
        doc = merged(body, name, database_url="not a url")
        load = CoordinatorSettings.from_mapping if name == "coordinator" else (
            lambda d: CountingSettings._from_mapping(d, base=tmp_path)
        )
        with pytest.raises(ValueError, match=r"^database_url is not a valid SQLAlchemy URL\.$"):
            load(doc)


def test_the_counting_service_refuses_a_participant_twice_or_sharing_a_token() -> None:
    entry = {"id": "p", "token_sha256": token_sha256("p")}
    with pytest.raises(ValueError, match=r"^participant 'p' is listed more than once\.$"):
        CountingSettings._from_mapping({**COUNTING, "participants": [entry, entry]},
                                       base=Path.cwd())
    shared = {"id": "p", "token_sha256": DIGEST}
    with pytest.raises(ValueError, match=r"^participant 'p' shares a token"):
        CountingSettings._from_mapping({**COUNTING, "participants": [shared]}, base=Path.cwd())


def test_only_a_given_counting_database_url_resolves_against_the_files_folder(
    tmp_path: Path,
) -> None:
    """The default ``sqlite:///counting.db`` stays in the working directory, where earlier
    versions kept it (moving it would start an upgraded service on an empty database)."""
    default = CountingSettings._from_mapping(COUNTING, base=tmp_path)
    assert default.database_url == "sqlite:///counting.db"
    given = CountingSettings._from_mapping(
        merged(COUNTING, "counting", database_url="sqlite:///state/c.db"), base=tmp_path
    )
    assert given.database_url == f"sqlite:///{tmp_path / 'state' / 'c.db'}"

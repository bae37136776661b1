"""One identifier rule: the wire's type, the services' path parameters, the config files'
participant ids and :func:`core.validation.is_identifier` accept and refuse the same strings."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import TypeAdapter, ValidationError

from fedclust.core.models import Identifier
from fedclust.core.validation import is_identifier
from fedclust.crypto.tokens import token_sha256
from fedclust.infra.app import identifier_path
from fedclust.infra.auth import ParticipantCredential

CASES = [
    ("hospital-a", True),
    ("A.b_C-9", True),
    ("x" * 64, True),
    ("x" * 65, False),
    ("hospital a", False),
    ("hospital-a\n", False),
    ("hôpital", False),
    ("a:b", False),
]


def _path_accepts(value: str) -> bool:
    app = FastAPI()

    @app.get("/things/{name}")
    def thing(name: Annotated[str, identifier_path()]) -> str:
        return name

    status: int = TestClient(app).get(f"/things/{quote(value, safe='')}").status_code
    assert status in (200, 422)
    return status == 200


def _wire_accepts(value: str) -> bool:
    try:
        TypeAdapter(Identifier).validate_python(value)
    except ValidationError:
        return False
    return True


def _credential_accepts(value: str) -> bool:
    try:
        ParticipantCredential(value, token_sha256("t"))
    except ValueError as exc:
        assert "participant id must be 1-64 characters" in str(exc)
        return False
    return True


@pytest.mark.parametrize(("value", "expected"), CASES)
def test_every_identifier_check_agrees(value: str, expected: bool) -> None:
    assert is_identifier(value) is expected
    assert _wire_accepts(value) is expected
    assert _path_accepts(value) is expected
    assert _credential_accepts(value) is expected


def test_the_empty_string_and_non_strings_are_no_identifiers() -> None:
    assert not is_identifier("")
    assert not _wire_accepts("")
    assert not is_identifier(7)
    assert not is_identifier(None)

"""The OpenAPI document in deploy/openapi/counting.json is the live app's."""

from __future__ import annotations

import json

from fedclust.counting.openapi import DEFAULT_PATH, openapi_document


def test_exported_openapi_matches_the_live_app() -> None:
    stored = json.loads(DEFAULT_PATH.read_text(encoding="utf-8"))
    assert stored == openapi_document(), (
        f"{DEFAULT_PATH} is out of date: regenerate it with `python -m fedclust.counting.openapi`"
    )


def test_operation_ids_and_tags_are_stable() -> None:
    operations = {
        op["operationId"]: op["tags"]
        for path in openapi_document()["paths"].values()
        for op in path.values()
    }
    assert operations == {
        "put_roster": ["counts"],
        "report_count": ["counts"],
        "get_total": ["counts"],
        "announce_cohort": ["counts"],
        "register_unmasking": ["counts"],
        "get_paillier_key": ["paillier"],
        "report_paillier_contribution": ["paillier"],
        "paillier_decrypt": ["paillier"],
        "put_member": ["members"],
        "revoke_member": ["members"],
        "health": ["meta"],
    }

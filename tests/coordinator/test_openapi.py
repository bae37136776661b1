"""The coordinator's OpenAPI document in the repository matches the live app."""

from __future__ import annotations

import json
from pathlib import Path

from fedclust.coordinator.app import openapi_document
from fedclust.coordinator.openapi import render

DOCUMENT = Path(__file__).resolve().parents[2] / "deploy" / "openapi" / "coordinator.json"

OPERATIONS = {
    ("post", "/api/v1/participants/enrol"): ("enrol_participant", "participants"),
    ("get", "/api/v1/participants"): ("list_participants", "participants"),
    ("get", "/api/v1/participants/jobs/{job_id}/result"): (
        "get_participant_job_result", "participants",
    ),
    ("post", "/api/v1/jobs"): ("create_job", "jobs"),
    ("get", "/api/v1/jobs"): ("list_jobs", "jobs"),
    ("get", "/api/v1/jobs/{job_id}"): ("get_job", "jobs"),
    ("get", "/api/v1/jobs/{job_id}/result"): ("get_job_result", "jobs"),
    ("get", "/api/v1/jobs/{job_id}/result/{table}.csv"): ("get_job_result_table", "jobs"),
    ("get", "/api/v1/algorithms"): ("list_algorithms", "jobs"),
    ("post", "/api/v1/jobs/{job_id}/cancel"): ("cancel_job", "jobs"),
    ("get", "/api/v1/jobs/{job_id}/disclosures"): ("get_job_disclosures", "jobs"),
    ("get", "/api/v1/jobs/{job_id}/history"): ("get_job_history", "jobs"),
    ("get", "/api/v1/tasks/next"): ("next_task", "tasks"),
    ("get", "/api/v1/blobs/{sha256}"): ("get_blob", "tasks"),
    ("post", "/api/v1/jobs/{job_id}/tasks/{task_id}/contribution"): (
        "submit_contribution", "tasks",
    ),
    ("post", "/api/v1/jobs/{job_id}/tasks/{task_id}/answer"): ("answer_task", "tasks"),
    ("post", "/api/v1/audit/heads"): ("anchor_audit_head", "audit"),
    ("get", "/api/v1/audit/heads/{participant_id}"): ("list_audit_receipts", "audit"),
    ("post", "/api/v1/participants/join"): ("join_federation", "participants"),
    ("post", "/api/v1/admin/invitations"): ("create_invitation", "admin"),
    ("delete", "/api/v1/admin/participants/{participant_id}"): ("revoke_participant", "admin"),
    ("get", "/api/v1/admin/audit"): ("list_admin_events", "admin"),
    ("get", "/api/v1/health"): ("health", "meta"),
    ("get", "/api/v1/ca"): ("get_ca_certificate", "meta"),
}
#: Routes without a bearer token: liveness, redeeming an invitation (the invite is the
#: credential) and the CA certificate (public; a new member checks it against its invite).
UNAUTHENTICATED = {"/api/v1/health", "/api/v1/participants/join", "/api/v1/ca"}


def test_exported_document_matches_the_live_app() -> None:
    stored = json.loads(DOCUMENT.read_text(encoding="utf-8"))
    assert stored == openapi_document(), (
        f"{DOCUMENT} is out of date; regenerate it with "
        "`python -m fedclust.coordinator.openapi > deploy/openapi/coordinator.json`"
    )


def test_render_is_the_stored_text() -> None:
    assert render() == DOCUMENT.read_text(encoding="utf-8")


def test_operation_ids_and_tags_are_the_documented_ones() -> None:
    paths = openapi_document()["paths"]
    found = {
        (method, path): (op["operationId"], op["tags"][0])
        for path, ops in paths.items()
        for method, op in ops.items()
    }
    assert found == OPERATIONS
    for (method, path), _ in OPERATIONS.items():
        if path not in UNAUTHENTICATED:  # every other route requires a bearer token
            assert paths[path][method]["security"] == [{"HTTPBearer": []}]
        else:
            assert "security" not in paths[path][method]

"""Hostile values in wire messages fail validation (422 at the services), never overflow."""

from __future__ import annotations

import math

import pytest
from pydantic import BaseModel, ValidationError

from fedclust.protocol.wire import messages as msg


@pytest.mark.parametrize(
    "shape",
    [[2**70], [2**63], [2**32, 2**32], [2**16, 2**16, 2**16, 2**16], [10_000_000, 10_000_000]],
    ids=["2^70", "2^63", "wraps-to-0", "wraps-4d", "product-over-limit"],
)
def test_an_oversized_shape_is_refused_without_overflow(shape: list[int]) -> None:
    with pytest.raises(ValidationError) as caught:
        msg.WireArray.model_validate({"dtype": "float64", "shape": shape, "data": ""})
    errors = caught.value.errors()
    assert errors, "a shape whose product wraps to 0 must not validate with empty data"
    assert all(e["type"] in ("less_than_equal", "value_error") for e in errors)


def test_the_element_limit_is_exact() -> None:
    largest = msg.WireArray.model_validate(
        {"dtype": "float64", "shape": [msg.MAX_ARRAY_ELEMENTS, 0], "data": ""}
    )
    assert math.prod(largest.shape) == 0
    with pytest.raises(ValidationError, match="at most 10000000"):
        msg.WireArray.model_validate(
            {"dtype": "float64", "shape": [msg.MAX_ARRAY_ELEMENTS, 2], "data": ""}
        )


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_a_scalar_reply_float_must_be_finite(value: str) -> None:
    body = (
        '{"job_id": "j", "task_id": 0, '
        '"reply": {"kind": "local_fcm", "centers": {"dtype": "float64", "shape": [0], '
        '"data": ""}, "weights": {"dtype": "float64", "shape": [0], "data": ""}, '
        f'"n_iter": 0, "global_objective": {value}}}}}'
    )
    with pytest.raises(ValidationError) as caught:
        msg.Contribution.model_validate_json(body)
    assert [e["type"] for e in caught.value.errors()] == ["finite_number"]


def test_a_job_parameter_must_be_finite() -> None:
    spec = {"algorithm": "fkm", "participants": ["a"], "k": 2, "eps": float("inf")}
    with pytest.raises(ValidationError) as caught:
        msg.JobCreate.model_validate(spec)
    assert [e["loc"] for e in caught.value.errors()] == [("eps",)]


def test_a_progress_document_keeps_an_infinite_first_shift() -> None:
    progress = msg.JobProgress(stage="sweep", k=2, round=1, shift=float("inf"))
    assert progress.shift == float("inf")


@pytest.mark.parametrize("task_id", [msg.MAX_WIRE_INT + 1, 2**63, 2**70])
def test_a_task_id_beyond_the_wire_bound_is_refused(task_id: int) -> None:
    with pytest.raises(ValidationError) as caught:
        msg.Contribution.model_validate(
            {"job_id": "j", "task_id": task_id, "reply": {"kind": "ack"}}
        )
    assert [e["type"] for e in caught.value.errors()] == ["less_than_equal"]


@pytest.mark.parametrize(
    ("model", "fields"),
    [
        (msg.CountReport, {"job_id": "j", "count": 2**64}),
        (msg.PaillierContribution, {"job_id": "j", "round": 2**64}),
        (msg.KfedCentersTask, {"k_local": 2, "seed": 2**64}),
        (msg.SecureSetupTask, {"setup": 2**64, "roster": ["a"], "threshold": 1,
                               "identities": {}}),
    ],
    ids=["count", "round", "seed", "setup"],
)
def test_integers_beyond_64_bits_are_refused(
    model: type[BaseModel], fields: dict[str, object]
) -> None:
    with pytest.raises(ValidationError) as caught:
        model.model_validate(fields)
    assert {e["type"] for e in caught.value.errors()} == {"less_than_equal"}


def test_an_encrypted_field_shape_is_bounded_by_its_product() -> None:
    field = {"spec": {}, "shape": [10_000_000, 10_000_000], "n_contributions": 3,
             "key_sha256": "0" * 64, "ciphertexts": []}
    with pytest.raises(ValidationError, match="at most 10000000"):
        msg.EncryptedField.model_validate(field)

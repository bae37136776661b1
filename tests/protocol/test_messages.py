"""The wire format: exact arrays, strict models, clear refusals of malformed bodies."""

from __future__ import annotations

import base64
from typing import get_args

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from numpy.typing import NDArray
from pydantic import BaseModel, ValidationError

from fedclust.protocol import algorithms
from fedclust.protocol.algorithms.fedcref_params import FedCRefParams
from fedclust.protocol.wire import messages as msg
from fedclust.protocol.wire.result_tables import CENTER_KEYS


@given(hnp.arrays(np.float64, hnp.array_shapes(min_dims=0, max_dims=3, max_side=5),
                  elements=st.floats(allow_nan=False, allow_infinity=False)))
def test_float_arrays_cross_the_wire_bit_for_bit(array: NDArray[np.float64]) -> None:
    wire = msg.WireArray.model_validate_json(msg.WireArray.of(array).model_dump_json())
    back = wire.to_numpy()
    assert back.shape == array.shape
    assert back.dtype == np.float64
    assert back.tobytes() == np.ascontiguousarray(array).tobytes()


def test_int_arrays_keep_their_values() -> None:
    counts = np.array([3, 0, 2**40], dtype=np.int64)
    np.testing.assert_array_equal(msg.WireArray.of(counts).to_numpy(), counts)
    assert msg.WireArray.of(counts).dtype == "int64"


def test_the_encoding_is_compact() -> None:
    # 8 bytes per value in base64 (4/3 overhead), not a decimal string per value.
    wire = msg.WireArray.of(np.random.default_rng(0).normal(size=1000))
    assert len(wire.data) == 4 * ((8000 + 2) // 3)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"dtype": "float64", "shape": [2], "data": base64.b64encode(
            np.array([1.0, np.nan]).tobytes()).decode()}, "NaN or infinity"),
        ({"dtype": "float64", "shape": [3], "data": base64.b64encode(
            np.zeros(2).tobytes()).decode()}, "holds 2 values but shape"),
        ({"dtype": "float64", "shape": [1], "data": "***"}, "not valid base64"),
        ({"dtype": "float32", "shape": [1], "data": ""}, "dtype"),
        ({"dtype": "float64", "shape": [10**5, 10**5], "data": ""}, "at most"),
        ({"dtype": "float64", "shape": [0], "data": "", "extra": 1}, "Extra inputs"),
    ],
    ids=["nan", "short", "base64", "dtype", "huge", "extra-field"],
)
def test_malformed_arrays_are_refused(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        msg.WireArray.model_validate(fields)


def test_contribution_discriminates_the_reply_kind() -> None:
    body = msg.Contribution(job_id="j", task_id=3, reply=msg.LocalKReply(k=4)).model_dump_json()
    parsed = msg.Contribution.model_validate_json(body)
    assert isinstance(parsed.reply, msg.LocalKReply) and parsed.reply.k == 4
    with pytest.raises(ValidationError):
        msg.Contribution.model_validate_json(body.replace('"local_k"', '"no_such_kind"'))


def test_job_create_needs_exactly_one_k() -> None:
    with pytest.raises(ValidationError, match="exactly one of k and k_range"):
        msg.JobCreate(algorithm="fedfcm", participants=["a"], k=3, k_range=(2, 4))
    with pytest.raises(ValidationError, match="k_range must be"):
        msg.JobCreate(algorithm="fedfcm", participants=["a"], k_range=(5, 2))
    with pytest.raises(ValidationError, match="distinct"):
        msg.JobCreate(algorithm="fedfcm", participants=["a", "a"], k=3)
    assert msg.JobCreate(algorithm="fkm", participants=["a"], k_range=(2, 4)).ks == [2, 3, 4]


#: A valid block of each registered algorithm with parameters (a new one needs its sample).
_BLOCKS = {
    "distill": {"public": msg.WireArray.of(np.zeros((4, 3))).model_dump(), "n_classes": 2},
    "fedcref": {"theta": 0.5},
}


def test_job_create_has_one_block_per_registered_params_model() -> None:
    """The blocks come from the registry: each typed by its algorithm's model, absent by
    default, and described as required or defaulted."""
    specs = [s for s in map(algorithms.get, algorithms.names()) if s.params is not None]
    assert {s.params_block for s in specs} == set(_BLOCKS)
    for spec in specs:
        assert spec.params_block is not None
        field = msg.JobCreate.model_fields[spec.params_block]
        assert spec.params in get_args(field.annotation) and field.default is None
        assert field.description is not None
        assert ("Required" in field.description) == spec.params_required


@pytest.mark.parametrize("algorithm", algorithms.names())
def test_a_job_takes_its_own_params_block_only(algorithm: str) -> None:
    spec = algorithms.get(algorithm)
    terms: dict[str, object] = {"algorithm": algorithm, "participants": ["a", "b", "c"],
                                "protection": "none"}
    if spec.family == "sweep":
        terms["k"] = 3
    own = spec.params_block
    given = {} if own is None else {own: _BLOCKS[own]}
    if own is not None:
        assert spec.params is not None
        job = msg.JobCreate.model_validate({**terms, **given})
        assert job.params(spec.params) == spec.params.model_validate(_BLOCKS[own])
    for block, sample in _BLOCKS.items():
        if block != own:
            with pytest.raises(ValidationError, match=f"'{algorithm}' takes no {block} block"):
                msg.JobCreate.model_validate({**terms, **given, block: sample})
    if own is not None and spec.params_required:
        with pytest.raises(ValidationError, match=f"'{algorithm}' needs a {own} block"):
            msg.JobCreate.model_validate(terms)
    elif spec.params is not None:  # left out: the model's defaults
        assert msg.JobCreate.model_validate(terms).params(spec.params) == spec.params()
    else:
        job = msg.JobCreate.model_validate(terms)
        assert job.algorithm_params is None
        with pytest.raises(ValueError, match=f"a '{algorithm}' job has no FedCRefParams"):
            job.params(FedCRefParams)


def test_job_create_feature_names_are_distinct_printable_names() -> None:
    spec = msg.JobCreate(algorithm="fkm", participants=["a"], k=2, feature_names=["x", "y"])
    assert spec.feature_names == ["x", "y"]
    with pytest.raises(ValidationError, match="feature_names must be distinct"):
        msg.JobCreate(algorithm="fkm", participants=["a"], k=2, feature_names=["x", "x"])
    with pytest.raises(ValidationError, match="feature_names"):
        msg.JobCreate(algorithm="fkm", participants=["a"], k=2, feature_names=["x\ny"])
    with pytest.raises(ValidationError, match="feature_names"):
        msg.JobCreate(algorithm="fkm", participants=["a"], k=2, feature_names=[])


@pytest.mark.parametrize("reserved", list(CENTER_KEYS))
def test_job_create_refuses_feature_names_that_are_centers_table_keys(reserved: str) -> None:
    with pytest.raises(ValidationError, match=rf"may not include '{reserved}'.*'k', 'center', "
                       r"'selected' are the key columns"):
        msg.JobCreate(algorithm="fkm", participants=["a"], k=2, feature_names=["x", reserved])


def test_drawn_seeds_are_valid_job_seeds() -> None:
    seeds = {msg.draw_seed() for _ in range(20)}
    assert len(seeds) > 1 and all(0 <= s < 2**32 for s in seeds)
    assert msg.JobCreate(algorithm="fkm", participants=["a"], k=2, seed=max(seeds)).seed == max(
        seeds
    )


def test_no_reply_model_has_a_field_for_a_row_count() -> None:
    # By construction: N_l goes to the counting service in a CountReport, never in a reply.
    union, _ = get_args(msg.Reply)  # Annotated[Union[...], discriminator]
    replies: tuple[type[BaseModel], ...] = get_args(union)
    assert len(replies) == 19
    for model in replies:
        fields = set(model.model_fields)
        if model is msg.DeclarationReply:
            # A declared public bound, a power of two R: the bucket R/2 < N_l <= R.
            assert "row_bound" in fields and msg.field_protection("row_bound", "declaration") == (
                "declared"
            )
        if model is msg.FedCRefFedavgReply:
            # The rows of a participant's clusters in one FedCRef group: a sum-type field,
            # masked with the others' under protection (like fkm's counts without it).
            assert fields & set(msg.sum_fields(
                msg.FedCRefFedavgTask(n_params=1, members={"a": [0]}, seeds={"a": 0},
                                      epochs=0), 1)) == {"weighted_params", "rows"}
            continue
        if model is msg.StatisticReply:
            # A registered statistic's fields: every one sum-type (sum_fields), masked with
            # the others' under protection; its algorithm's ledger notes say what they are.
            assert msg.StatisticTask in get_args(get_args(msg.SumTaskSpec)[0])
            continue
        assert not {"count", "n", "n_samples", "size", "rows"} & fields, model


def test_a_statistic_task_takes_exactly_its_declared_params() -> None:
    centers = msg.WireArray.of(np.zeros((2, 2)))
    msg.StatisticTask(name="silhouette_sums", centers=centers)
    with pytest.raises(ValidationError, match="'silhouette_sums' takes no parameter m"):
        msg.StatisticTask(name="silhouette_sums", centers=centers, params={"m": 2.5})
    with pytest.raises(ValidationError, match="finite_number"):
        msg.StatisticTask.model_validate_json(
            f'{{"name": "silhouette_sums", "centers": {centers.model_dump_json()}, '
            '"params": {"m": NaN}}'
        )


@pytest.mark.parametrize("shape", [(2, 2), (1, 1, 2), (0, 2)])
def test_the_moment_sums_take_one_public_point(shape: tuple[int, ...]) -> None:
    msg.StatisticTask.of("moment_sums", np.zeros((1, 2)))
    with pytest.raises(ValidationError, match=r"'moment_sums' takes centers of shape \(1, 'D'\)"):
        msg.StatisticTask.of("moment_sums", np.zeros(shape))


@pytest.mark.parametrize(
    ("params", "error"),
    [({"m": 2.0}, "needs parameter 'q'"), ({"m": 2.0, "q": 0.0}, r"'q' .* finite number > 0.0"),
     ({"m": 2.0, "q": 1.0, "p": 2.0}, "takes no parameter p")],
    ids=["missing", "out-of-range", "unknown"],
)
def test_a_statistic_task_is_checked_against_its_declared_params(
    params: dict[str, float], error: str
) -> None:
    centers = msg.WireArray.of(np.zeros((2, 2)))
    msg.StatisticTask(name="fuzzy_db_sums", centers=centers, params={"m": 2.0, "q": 1.0})
    with pytest.raises(ValidationError, match=error):
        msg.StatisticTask(name="fuzzy_db_sums", centers=centers, params=params)

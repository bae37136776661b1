"""The organisation decides its protection, and the agent holds every task to the job's
declared terms (participant.terms, participant.policy): replayed as the attacks of issue 20
were measured — an unprotected job against the default policy, crafted local_k and bare-sum
tasks, a report_count of a job never declared, a roster of members the coordinator invented."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedclust.coordinator.secure_sum import field_encodings
from fedclust.core.errors import RefusedError
from fedclust.participant.agent import JobState
from fedclust.participant.config import ParticipantConfig
from fedclust.participant.policy import Policy
from fedclust.participant.terms import SUM_KINDS, OwnBounds, require_feature_names, require_task
from fedclust.protocol.maths.declaration import Declaration
from fedclust.protocol.wire import messages as msg
from tests.participant.test_agent import (
    CENTERS,
    ME,
    ROSTER,
    Counting,
    blobs,
    declared,
    run,
    task,
    terms,
    write_config,
    write_rows,
)

A, B = "operator-a", "operator-b"  # members the coordinator's operator enrolled itself


@pytest.fixture
def counting(tmp_path: Path) -> Iterator[Counting]:
    service = Counting(tmp_path / "counting.db")
    yield service
    service.app.state.store.close()


def declare(job: str = "job-1", **fields: Any) -> msg.Task:
    spec = msg.DeclareTask(terms=terms(fields.get("algorithm", "ffcm"), **fields))
    return task(0, spec, spec.terms.algorithm, job=job)


def refusal(reply: msg.Reply) -> str:
    assert isinstance(reply, msg.RefusalReply), reply
    return reply.reason


# -- the organisation decides its protection ------------------------------------------------------
def test_an_unprotected_job_is_refused_at_the_declaration_by_the_default_policy(
    tmp_path: Path, counting: Counting
) -> None:
    write_rows(tmp_path, blobs())
    config = write_config(tmp_path, opt_in_none=False)
    assert ParticipantConfig.from_file(config).policy.protections == {"masking", "paillier"}
    replies = run(config, [
        declare("job-1", protection="none"),
        task(1, msg.StatisticTask.of("fcm_sums", CENTERS, m=2.0), job="job-1"),  # its statistic
        declare("job-2", protection="masking"),
    ], counting).replies()
    assert refusal(replies[0]) == (
        "the job declares protection 'none', which this participant's policy does not accept "
        "(protections: masking, paillier): refused."
    )
    assert "'job-1' was never declared" in refusal(replies[1])  # nothing computed
    assert isinstance(replies[2], msg.DeclarationReply)


def test_an_organisation_that_opts_in_takes_part_in_unprotected_jobs(
    tmp_path: Path, counting: Counting
) -> None:
    write_rows(tmp_path, blobs())
    replies = run(write_config(tmp_path), declared([
        task(1, msg.StatisticTask.of("fcm_sums", CENTERS, m=2.0)),
    ]), counting).replies()
    assert [r.kind for r in replies] == ["declaration", "statistic"]


def test_protections_are_read_from_the_file_and_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_rows(tmp_path, blobs())
    file = write_config(tmp_path, policy='[policy]\nprotections = ["none"]\n', opt_in_none=False)
    assert ParticipantConfig.from_file(file).policy.protections == {"none"}
    monkeypatch.setenv("FEDCLUST_POLICY__PROTECTIONS", '["paillier", "none"]')
    assert ParticipantConfig.load(file).policy.protections == {"paillier", "none"}
    for bad in ("[]", '["plain"]'):
        file.write_text(file.read_text().replace('["none"]', bad))
        monkeypatch.delenv("FEDCLUST_POLICY__PROTECTIONS")
        with pytest.raises(ValueError, match=r"\[policy\] protections must be a non-empty list"):
            ParticipantConfig.from_file(file)
        monkeypatch.setenv("FEDCLUST_POLICY__PROTECTIONS", '["none"]')


# -- every task against the declared terms --------------------------------------------------------
@pytest.mark.parametrize(
    ("fields", "k_min", "k_max"),
    [({"local_k_range": None}, 60, 61), ({"local_k_range": (2, 5)}, 2, 61)],
    ids=["no-local-range", "outside-the-range"],
)
def test_a_crafted_local_k_task_is_refused_whatever_the_rows(
    tmp_path: Path, fields: dict[str, Any], k_min: int, k_max: int
) -> None:
    """Measured: answered at k = 60 and refused with "ValueError" at k = 61 by an agent
    holding 60 rows, its N_l exactly. Now refused by the terms, with one reason for 60 rows
    and for 61."""
    reasons = []
    for n in (60, 61):
        folder = tmp_path / str(n)
        folder.mkdir()
        write_rows(folder, blobs(n))
        service = Counting(folder / "counting.db")
        crafted = task(1, msg.LocalKTask(k_min=k_min, k_max=k_max, m=2.0, seed=1))
        replies = run(write_config(folder), [declare(**fields), crafted], service).replies()
        service.app.state.store.close()
        assert isinstance(replies[0], msg.DeclarationReply)
        reasons.append(refusal(replies[1]))
    assert reasons[0] == reasons[1]
    assert "outside the terms the job declared" in reasons[0]
    assert "60" not in reasons[0].replace(f"[{k_min}, {k_max}]", "")


def test_a_bare_sum_in_a_masking_job_is_refused(tmp_path: Path, counting: Counting) -> None:
    write_rows(tmp_path, blobs())
    replies = run(write_config(tmp_path), [
        declare(protection="masking"),
        task(1, msg.StatisticTask.of("fcm_sums", CENTERS, m=2.0)),
        task(2, msg.ReportCountTask()),  # its count goes to the counting service: answered
    ], counting).replies()
    assert refusal(replies[1]) == (
        "a bare 'fcm_sums' sum would reach the coordinator in the clear, but the job declared "
        "protection 'masking': the task is outside the terms the job declared; refused."
    )
    assert refusal(replies[2]).startswith("the counting service refused")  # no roster there


def test_report_count_of_a_job_never_declared_is_refused(
    tmp_path: Path, counting: Counting
) -> None:
    """Measured: the agent answered report_count for any job id. Now only after the job's
    declaration admitted it (whatever the roster rule)."""
    write_rows(tmp_path, blobs())
    counting.put_roster("job-x", ROSTER)  # the coordinator's side of the job exists
    policy = '[policy]\nrosters = "any"\n'
    replies = run(
        write_config(tmp_path, policy=policy), [task(0, msg.ReportCountTask(), job="job-x")],
        counting,
    ).replies()
    assert "job 'job-x' was never declared to this participant" in refusal(replies[0])
    assert counting.reported("job-x") == (0, 0)


def test_roster_members_known_refuses_members_it_does_not_know(
    tmp_path: Path, counting: Counting
) -> None:
    """Measured: a roster [p1, A, B] with A, B enrolled by the coordinator's operator was
    joined. With roster_members = "known" only a roster of configured peers is."""
    write_rows(tmp_path, blobs())
    key = base64.b64encode(bytes(range(32))).decode()
    policy = (
        '[policy]\nroster_members = "known"\n'
        f'[peers]\nhospital-b = "{key}"\nhospital-c = "{key}"\n'
    )
    config = write_config(tmp_path, policy=policy)
    assert ParticipantConfig.from_file(config).policy.known_peers == {"hospital-b", "hospital-c"}
    replies = run(config, [
        declare("job-1", participants=[ME, A, B]),
        declare("job-2", participants=ROSTER),
    ], counting).replies()
    assert refusal(replies[0]) == (
        f"the job's roster names [{A}, {B}], not among the organisations this participant "
        "knows (roster_members = 'known': its [peers]); members it does not know could be "
        "the coordinator's own, isolating it: refused."
    )
    assert isinstance(replies[1], msg.DeclarationReply)
    file = write_config(tmp_path, policy='[policy]\nroster_members = "known"\n')
    with pytest.raises(ValueError, match=r"needs the organisations .* \[peers\] table"):
        ParticipantConfig.from_file(file)


def test_a_declared_job_keeps_its_terms(tmp_path: Path, counting: Counting) -> None:
    write_rows(tmp_path, blobs())
    config = write_config(tmp_path)
    first = run(config, [declare(), declare(k_range=(2, 9))], counting).replies()
    assert isinstance(first[0], msg.DeclarationReply)
    assert "a job's terms cannot change" in refusal(first[1])
    saved = json.loads((tmp_path / "state" / "jobs" / "job-1.json").read_text())
    assert JobState.from_json(saved).terms == terms()  # kept across restarts
    # A state saved before the terms were kept loads, and its job must be declared again.
    saved = {k: v for k, v in saved.items() if k != "terms"} | {"version": 1}
    (tmp_path / "state" / "jobs" / "job-1.json").write_text(json.dumps(saved))
    sums = task(1, msg.StatisticTask.of("fcm_sums", CENTERS, m=2.0))
    again = run(config, [sums, declare(), sums], counting).replies()
    assert "holds no declared terms of job 'job-1'" in refusal(again[0])
    assert [r.kind for r in again[1:]] == ["declaration", "statistic"]


# -- the rules, task by task (a function of the task and the terms only) --------------------------
def _wire(shape: tuple[int, ...]) -> msg.WireArray:
    return msg.WireArray.of(np.zeros(shape))


def _encoding(spec: Any) -> list[msg.FieldEncoding]:
    """The honest coordinator's encoding for :data:`OWN` (its row and value bounds)."""
    return field_encodings(spec, n_features=2, n_parties=3, max_rows=64, value_bound=1.0)


#: A participant declaring 33 to 64 rows and values within [-1, 1], of 2 features.
OWN = OwnBounds.of(Declaration(64, 1.0, False, False, False), 2)
FCM = msg.StatisticTask.of("fcm_sums", _wire((2, 2)), m=2.0)
MASKED_FCM = msg.SecureInputTask(round=1, cohort=ROSTER, statistic=FCM, encoding=_encoding(FCM))
SETUP = msg.SecureSetupTask(roster=ROSTER, threshold=2, identities={})
#: A masked fed-distill job over :data:`ROSTER` and its soft-prediction task for ``group``.
DISTILL = {"algorithm": "fed-distill", "k_range": None, "standardise": False,
           "local_k_range": None, "protection": "masking",
           "distill": {"public": _wire((3, 2)).model_dump(), "n_classes": 2}}
FEDCREF = {"algorithm": "fedcref", "k_range": None, "standardise": False, "local_k_range": None,
           "protection": "masking"}


def _soft(*group: str) -> msg.DistillSoftTask:
    return msg.DistillSoftTask(public=_wire((3, 2)), n_classes=2, members=list(group))


@pytest.mark.parametrize(
    ("fields", "algorithm", "spec", "refused"),
    [
        ({"protection": "masking"}, "ffcm", MASKED_FCM, None),
        ({"protection": "masking"}, "ffcm", SETUP, None),
        ({"protection": "paillier"}, "ffcm", SETUP, "stage is not part of a job of protection"),
        ({"protection": "none"}, "ffcm", MASKED_FCM, "stage is not part of a job of protection"),
        ({"protection": "none"}, "ffcm", FCM, None),
        ({}, "fkm", FCM, "the job declared algorithm 'ffcm'"),
        ({}, "ffcm", msg.KfedCentersTask(k_local=2), "a 'ffcm' job sends no 'kfed_centers'"),
        ({"algorithm": "kfed"}, "kfed", msg.KfedCentersTask(k_local=9), "for K=9 is outside"),
        ({"algorithm": "kfed-dennis"}, "kfed-dennis", msg.KfedCentersTask(k_local=2),
         "a 'kfed-dennis' job sends no 'kfed_centers'"),
        ({"algorithm": "kfed"}, "kfed", msg.KfedDennisCentersTask(k_local=2),
         "a 'kfed' job sends no 'kfed_dennis_centers'"),
        ({"algorithm": "kfed-dennis"}, "kfed-dennis", msg.KfedDennisCentersTask(k_local=9),
         "for K=9 is outside"),
        ({"algorithm": "kfed-dennis"}, "kfed-dennis", msg.KfedDennisCentersTask(k_local=2),
         None),
        ({}, "ffcm", msg.StatisticTask.of("fcm_sums", _wire((4, 2)), m=2.0), "with 4 centers"),
        ({"standardise": False}, "ffcm",
         msg.ApplyStandardisationTask(mean=_wire((2,)), scale=_wire((2,))),
         "does not standardise"),
        ({"standardise": False}, "ffcm", msg.StatisticTask.of("moment_sums", _wire((1, 2))),
         None),  # the initial box
        ({}, "ffcm", msg.StatisticTask.of("moment_sums", _wire((1, 2))), None),
        (dict(FEDCREF), "fedcref", msg.StatisticTask.of("moment_sums", _wire((1, 2))),
         "sends no 'statistic' task"),
        (dict(FEDCREF), "fedcref",
         msg.FedCRefFedavgTask(n_params=1, members={p: [0] for p in ROSTER},
                               seeds={p: 0 for p in ROSTER}, epochs=1),
         "a bare 'fedcref_fedavg' sum"),
        (dict(FEDCREF), "fedcref",
         msg.FedCRefFedavgTask(n_params=1, members={ME: [0]}, seeds={ME: 0}, epochs=1),
         None),  # a group too small to mask travels in the clear, as the job's result says
        (dict(FEDCREF), "fedcref",
         msg.FedCRefFedavgTask(n_params=1, members={ME: [0], "invented": [0]},
                               seeds={ME: 0, "invented": 0}, epochs=1),
         "names a group outside the job's participants"),
        # A cheating coordinator asking one member's soft predictions in the clear must claim
        # a group of under 3 of the job's participants, in the task the participant logs.
        (dict(DISTILL), "fed-distill", _soft(*ROSTER), "a bare 'distill_soft' sum"),
        (dict(DISTILL), "fed-distill", _soft(ME, ROSTER[1]), None),
        (dict(DISTILL), "fed-distill", _soft(ME, "invented"),
         "names a group outside the job's participants"),
        (dict(DISTILL), "fed-distill",
         msg.DistillSoftTask(public=_wire((4, 2)), n_classes=2, members=[ME]),
         "public set, n_classes or classifier differs from the job's distill block"),
        (dict(DISTILL), "fed-distill", msg.DistillCountsTask(public=_wire((3, 2)), n_classes=3),
         "public set, n_classes or classifier differs"),
        (dict(DISTILL), "fed-distill", msg.DistillTrainTask(seed=1, n_classes=2, classifier="cnn"),
         "public set, n_classes or classifier differs"),
        (dict(DISTILL), "fed-distill", msg.DistillCountsTask(public=_wire((3, 2)), n_classes=2),
         None),
    ],
    ids=["masked-sum", "masking-setup", "paillier-no-masking", "none-no-stages", "none-bare",
         "other-algorithm", "other-kind", "k-outside", "dennis-not-kfed-kind",
         "kfed-not-dennis-kind", "dennis-k-outside", "dennis-k-inside", "centers-outside",
         "no-standardise",
         "moments-for-the-box", "moments-in-a-sweep-job", "moments-in-a-model-job",
         "fedavg-bare-group", "fedavg-small-group", "fedavg-invented-member",
         "soft-bare-group", "soft-small-group", "soft-invented-member", "soft-other-public",
         "counts-other-classes", "train-other-classifier", "counts-as-declared"],
)
def test_require_task(
    fields: dict[str, Any], algorithm: str, spec: Any, refused: str | None
) -> None:
    declared_terms = terms(fields.pop("algorithm", "ffcm"), **fields)
    if refused is None:
        require_task(declared_terms, algorithm, spec, OWN)
        return
    with pytest.raises(RefusedError, match=refused):
        require_task(declared_terms, algorithm, spec, OWN)


def test_sum_kinds_are_the_statistics_a_secure_sum_carries() -> None:
    assert {"statistic", "distill_soft", "fedcref_fedavg"} == SUM_KINDS


def test_policy_require_protection_names_the_protection_and_the_policy() -> None:
    Policy(protections=frozenset({"none"})).require_protection("none")
    with pytest.raises(RefusedError) as info:
        Policy().require_protection("none")
    assert str(info.value) == (
        "the job declares protection 'none', which this participant's policy does not accept "
        "(protections: masking, paillier): refused."
    )


# -- the job's named features against the participant's columns -----------------------------------
def test_feature_names_are_checked_against_the_configured_columns() -> None:
    named = terms("ffcm", feature_names=["sepal", "petal"])
    require_feature_names(named, 2, ("sepal", "petal"))
    require_feature_names(terms("ffcm"), 2, ("sepal", "petal"))  # no names: nothing to check
    texts = set()
    for own in (("sepal", "petal_width"), ("sepal_width", "petal"), ("petal", "sepal")):
        with pytest.raises(RefusedError) as refused:
            require_feature_names(named, 2, own)
        texts.add(str(refused.value))
    # One fixed text: it says that the names differ, never which position or column.
    assert texts == {
        "the job's feature_names are not this participant's [data] columns, in order: refused."
    }
    with pytest.raises(RefusedError, match=r"names 2 feature.*rows have 3 columns"):
        require_feature_names(named, 3, None)


def test_without_column_names_only_the_number_of_features_is_checked() -> None:
    named = terms("ffcm", feature_names=["sepal", "petal"])
    require_feature_names(named, 2, None)  # every numeric column of the file
    require_feature_names(named, 2, (0, 3))  # .npy indices name nothing
    with pytest.raises(RefusedError, match="names 2 feature"):
        require_feature_names(named, 1, (0,))

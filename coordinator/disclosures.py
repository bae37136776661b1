"""The coordinator's disclosure ledger: what it learned in a job, per participant and task kind.

Derived from the stored tasks and replies (no storage of its own): for every answered task,
the reply's fields (names and shapes, never values) and how they travelled
(``protocol.wire.messages.field_protection``); the notes say in plain language what the job's
algorithm and protection reveal.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Final

from fedclust.coordinator.db import JobRecord, TaskRecord
from fedclust.protocol.wire import messages as msg

__all__ = ["ALGORITHM_NOTES", "PROTECTED_NOTES", "ledger"]

#: What each algorithm's plaintext protocol shows the coordinator of one participant.
ALGORITHM_NOTES: Final[dict[str, str]] = {
    "ffcm": (
        "ffcm (exact federated FCM): each participant's local sums Σu^m and Σu^m·x per "
        "cluster reach the coordinator in the clear, every round."
    ),
    "fedfcm": (
        "fedfcm: local FCM centers stay with the participants, but each participant's own "
        "sums over them reach the coordinator in the clear, per k-means iteration: per global "
        "cluster Σ local centers, their number and a 0/1 indicator, the inertia, its J_m, and "
        "to split or swap clusters its scatter matrices and removal costs; a global cluster "
        "holding one local center of a participant reveals that center (S_k / W_k)."
    ),
    "fedfcm-avg": (
        "fedfcm-avg: each participant's local FCM centers are revealed to the coordinator in "
        "the clear, with their membership weights Σu (which sum to the participant's row count)."
    ),
    "fkm": (
        "fkm (federated k-means): local means and counts stay with the participants, but "
        "each participant's own sums over them reach the coordinator in the clear, per "
        "k-means iteration: per global cluster Σ count·mean, Σ count (the counts sum to its "
        "row count) and a 0/1 indicator, the inertia, and its scatter matrices and removal "
        "costs; a global cluster holding one local mean reveals that mean (S_k / W_k)."
    ),
    "kfed": "kfed: each participant's local k-means centers are revealed to the coordinator in "
    "the clear.",
    "fed-distill": (
        "fed-distill (clustered federated distillation): each participant's label-count "
        "vector on the public set is revealed to the coordinator in the clear (the grouping "
        "needs every one), and so are its softmax probabilities on the public set."
    ),
    "fedcref": (
        "fedcref (Federated Cluster-Wise Refinement): each participant's number of local "
        "clusters, one autoencoder per local cluster (shared with the coordinator and the "
        "other participants: the association needs them, as in the paper; a model trained "
        "on a cluster can reveal features of its rows), its association scores, its FedAvg "
        "contributions n·θ and n per group, and the agreement of its consecutive assignments "
        "reach the coordinator in the clear."
    ),
}

#: What each algorithm shows the coordinator when its sums are protected.
PROTECTED_NOTES: Final[dict[str, str]] = {
    "ffcm": (
        "ffcm (exact federated FCM), protected: the coordinator learns only ΣU_c and ΣWS_c "
        "over each round's participants, hence the global centers."
    ),
    "fedfcm": (
        "fedfcm, protected: local FCM centers stay with the participants; the coordinator "
        "learns per k-means iteration only the sums over all participants of the local "
        "centers nearest each global center, their number, the number of participants "
        "holding them, the inertia and the pooled J_m, and to split or swap clusters the "
        "summed scatter matrices and removal costs."
    ),
    "fkm": (
        "fkm (federated k-means), protected: local means and counts stay with the "
        "participants; the coordinator learns per k-means iteration only the sums over all "
        "participants of count·mean and count per global cluster, the number of "
        "participants holding them and the inertia, and to split or swap clusters the "
        "summed scatter matrices and removal costs."
    ),
    "fed-distill": (
        "fed-distill, protected: each participant's label-count vector on the public set is "
        "revealed to the coordinator in the clear (the grouping needs every one); its softmax "
        "probabilities on the public set are summed masked within each group of at least 3 "
        "members, so the coordinator learns only each such group's teacher. A group of 1 or "
        "2 members is asked in the clear (see the result's notes and unprotected_groups)."
    ),
    "fedcref": (
        "fedcref, protected: each participant's number of local clusters, its local "
        "autoencoders (shared by design: the association needs them; a model can reveal "
        "features of its cluster's rows), its association scores and its assignment "
        "agreement reach the coordinator in the clear; its FedAvg contributions n·θ and n are "
        "summed masked within each group of at least 3 participants, so the coordinator "
        "learns only each such group's average model. A group of 2 participants is asked in "
        "the clear (see the result's notes and unprotected_groups)."
    ),
}

_PROTECTED_SUMS_NOTE: Final = (
    "Every sum-type statistic (moment sums, FCM sums, FedFuzzDB and silhouette sums, center "
    "sums) reached the coordinator {how}: it decoded only their total over at least 3 "
    "participants, and never totals over two cohorts, in this job or with any other, from "
    "which a statistic of fewer than 3 participants follows (the coordinator, the "
    "participants and the counting service each refuse such a sum)."
)

_SUMS_NOTE: Final = (
    "Sums (moment sums, FCM sums, FedFuzzDB and silhouette sums, cluster counts) are "
    "unprotected: the coordinator sees each participant's own sums until secure aggregation "
    "is enabled. The FedFuzzDB membership sums of the validation round add up to the "
    "participant's row count, so N_l can be derived from them."
)
_KIND_NOTES: Final[dict[str, str]] = {
    "declaration": "Declared public bounds: each participant's row bucket row_bound (its "
    "row count lies in (row_bound/2, row_bound]) and value_bound (|x| <= value_bound for "
    "every raw value) reached the coordinator in the clear at the start of the job, with "
    "whether it enforces the exact-FCM size rule. A bound whose source is 'derived' was "
    "computed from the participant's data (it discloses the bucket of its row count or the "
    "power of two above its largest magnitude); a 'configured' one is its policy's. Every "
    "bound of the protected sums and every size check of the job rests on these alone.",
    "moment_sums": "Standardisation: each participant's Σ(x − shift) and Σ(x − shift)² per "
    "column reached the coordinator in the clear.",
    "report_count": "Row counts N_l went to the counting service only; the coordinator "
    "received just their total ΣN_l over the job's final cohort (after a dropout before "
    "anything was released, over those left), at most once.",
    "refusal": "Refusals carry the participant's stated reason as text.",
    "secure_unmask": "Unmasking: each surviving participant sent its Shamir shares of its "
    "surviving neighbours' self-mask seeds of that sum and, for each dropped neighbour, the "
    "pair-mask key of that sum only (never both for one participant, never a long-term "
    "key); with them the coordinator removes exactly the masks left in the total.",
    "distill_counts": "Label counts: each participant's count vector of predicted labels "
    "on the public set reached the coordinator in the clear.",
    "distill_soft": "Soft predictions in the clear: a participant of a group too small to "
    "mask (or of a job without protection) sent its probabilities on the public set.",
    "fedcref_models": "Models: each participant's autoencoders, one per local cluster, "
    "reached the coordinator in the clear and were forwarded to the other participants for "
    "the association (eq. 2).",
    "fedcref_fedavg": "FedAvg contributions in the clear: a participant of a group too small "
    "to mask (or of a job without protection) sent n·θ and n for its clusters in the group.",
    "key_advert": "Key adverts: the job's public keys and a random nonce (the masking "
    "graph's seed is the hash of all nonces), signed with the participant's identity key.",
    "secure_graph": "Graph check: each participant sent the digest of the masking graph it "
    "derived from the signed adverts.",
}


def _fields(reply_json: str) -> list[tuple[str, tuple[int, ...] | None]]:
    doc = json.loads(reply_json)
    return [(name, shape) for name, shape in msg.wire_fields(doc) if name != "kind"]


def _support_notes(job: JobRecord) -> list[str]:
    """Per K of a finished job: how many participants stand behind each released center."""
    if job.result is None:
        return []
    notes = []
    minimum = job.spec.min_center_contributors
    for entry in job.result.sweep:
        if entry.center_contributors is None:
            continue
        counts = ", ".join(str(n) for n in entry.center_contributors)
        single = sum(
            1 for n, c in zip(entry.center_contributors, entry.centers, strict=True)
            if n == 1 and c is not None
        )
        withheld = sum(1 for c in entry.centers if c is None)
        text = f"K={entry.k}: participants behind each center: {counts}."
        if single:
            text += (
                f" {single} released center(s) rest on one participant's local centers and "
                "reveal them to whoever reads the result."
            )
        if withheld:
            text += f" {withheld} center(s) withheld (min_center_contributors={minimum})."
        notes.append(text)
    return notes


def _cohort_notes(tasks: Sequence[TaskRecord]) -> list[str]:
    """The cohorts the job's protected sums were asked over: per masked or Paillier round,
    those that sent their input (a total decodes over them at most)."""
    rounds: dict[tuple[str, int, int], set[str]] = {}
    for task in tasks:
        if task.kind not in ("secure_input", "paillier_input") or task.reply_json is None:
            continue
        if task.timed_out is not None or json.loads(task.reply_json).get("kind") == "refusal":
            continue
        spec = json.loads(task.spec_json)
        key = (task.kind, int(spec.get("setup", 0)), int(spec["round"]))
        rounds.setdefault(key, set()).add(task.participant)
    sums = Counter(frozenset(cohort) for cohort in rounds.values())
    return [
        f"{n} protected sum(s) over the cohort {', '.join(sorted(cohort))}."
        for cohort, n in sorted(sums.items(), key=lambda item: sorted(item[0]))
    ]


def ledger(job: JobRecord, tasks: Sequence[TaskRecord]) -> msg.DisclosureLedger:
    """The disclosure ledger of ``job`` from its stored ``tasks`` (answered ones count; a
    task that timed out disclosed nothing)."""
    groups: dict[tuple[str, str, str], list[TaskRecord]] = {}
    kinds_seen: set[str] = set()
    for task in tasks:
        if task.reply_json is None or task.timed_out is not None:
            continue
        reply_kind = json.loads(task.reply_json).get("kind", "?")
        groups.setdefault((task.participant, task.kind, str(reply_kind)), []).append(task)
        kinds_seen.update((task.kind, str(reply_kind)))
    order = {name: i for i, name in enumerate(job.spec.participants)}
    disclosures = []
    for (participant, task_kind, reply_kind), records in sorted(
        groups.items(), key=lambda item: (order.get(item[0][0], len(order)), item[0])
    ):
        shapes: dict[str, set[tuple[int, ...]] | None] = {}
        for record in records:
            assert record.reply_json is not None
            for name, shape in _fields(record.reply_json):
                if shape is None:
                    shapes.setdefault(name, None)
                else:
                    seen = shapes.get(name)
                    if seen is None:
                        seen = shapes[name] = set()
                    seen.add(shape)
        disclosures.append(
            msg.Disclosure(
                participant=participant, task_kind=task_kind, reply_kind=reply_kind,
                fields=[
                    msg.DisclosedField(
                        name=name, shapes=None if seen is None else sorted(seen),
                        protection=msg.field_protection(name, reply_kind),
                    )
                    for name, seen in sorted(shapes.items())
                ],
                messages=len(records),
            )
        )
    protection = job.spec.protection
    if protection == "none":
        notes = [ALGORITHM_NOTES[job.spec.algorithm], _SUMS_NOTE]
    else:
        how = "masked (pairwise masking)" if protection == "masking" else "Paillier-encrypted"
        notes = [PROTECTED_NOTES[job.spec.algorithm], _PROTECTED_SUMS_NOTE.format(how=how)]
    notes += [note for kind, note in _KIND_NOTES.items() if kind in kinds_seen]
    notes += _cohort_notes(tasks)
    notes += _support_notes(job)
    return msg.DisclosureLedger(
        job_id=job.id, algorithm=job.spec.algorithm, state=job.state,
        disclosures=disclosures, notes=notes,
    )

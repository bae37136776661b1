"""The coordinator's disclosure ledger: what it learned in a job, per participant and task kind.

Derived from the stored tasks and replies (no storage of its own): for every answered task,
the reply's fields (names and shapes, never values) and how they travelled
(``protocol.wire.messages.field_protection``); the notes say in plain language what the job's
algorithm and protection reveal, and what the job itself sent out (its feature names).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Final

from fedclust.coordinator.db import JobRecord, TaskRecord
from fedclust.protocol import algorithms
from fedclust.protocol.wire import messages as msg

__all__ = ["ledger"]

_PROTECTED_SUMS_NOTE: Final = (
    "Every sum-type statistic (moment sums, FCM sums, FedFuzzDB and silhouette sums, center "
    "sums) reached the coordinator {how}: it decoded only their total over at least 3 "
    "participants, and never totals over two cohorts, in this job or with any other, from "
    "which a statistic of fewer than 3 participants follows (the coordinator, the "
    "participants and the counting service each refuse such a sum)."
)

#: Feature names a ledger note lists before it counts the rest.
_NAMES_SHOWN: Final = 20

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


def _computed(task: TaskRecord) -> str:
    """What a task computed: its kind, or for a ``statistic`` task the statistic it names
    (each statistic its own disclosure)."""
    if task.kind != "statistic":
        return task.kind
    return str(json.loads(task.spec_json)["name"])


def _feature_names_note(spec: msg.JobCreate) -> list[str]:
    """The job's declared feature names, which went out to every participant with its terms
    (declared metadata, not data; no participant sends names back)."""
    names = spec.feature_names
    if names is None:
        return []
    shown = ", ".join(names[:_NAMES_SHOWN])
    more = f" and {len(names) - _NAMES_SHOWN} more" if len(names) > _NAMES_SHOWN else ""
    return [
        f"Feature names: the job declared its {len(names)} features as {shown}{more}; they "
        "went to every participant with the job's terms, and each checked them at the "
        "declaration: against its configured columns, or only their number where it "
        "configures no column names. A refusal reveals only that they differ, never where; "
        "no participant sends names back."
    ]


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
        kind = _computed(task)
        groups.setdefault((task.participant, kind, str(reply_kind)), []).append(task)
        kinds_seen.update((kind, str(reply_kind)))
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
    algorithm = algorithms.get(job.spec.algorithm)
    if protection == "none" or algorithm.protected_notes is None:
        notes = [algorithm.plain_notes, _SUMS_NOTE]
    else:
        how = "masked (pairwise masking)" if protection == "masking" else "Paillier-encrypted"
        notes = [algorithm.protected_notes, _PROTECTED_SUMS_NOTE.format(how=how)]
    notes += [note for kind, note in _KIND_NOTES.items() if kind in kinds_seen]
    notes += _feature_names_note(job.spec)
    notes += _cohort_notes(tasks)
    notes += _support_notes(job)
    return msg.DisclosureLedger(
        job_id=job.id, algorithm=job.spec.algorithm, state=job.state,
        disclosures=disclosures, notes=notes,
    )

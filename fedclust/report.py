"""Human-readable rendering of a result document (simulate, demo, job result)."""

from __future__ import annotations

from pydantic import TypeAdapter

from fedclust.exports import feature_names
from fedclust.protocol.wire.messages import JobPublic, ResultDocument

_JOB_LIST = TypeAdapter(list[JobPublic])


def format_result(doc: ResultDocument, *, title: str) -> str:
    """A table of the sweep (the selected K starred), the choice of K and its centers; for
    the model-based algorithms, the groups found."""
    if doc.groups is not None:
        return _format_groups(doc, title=title)
    has_ari = any(e.ari is not None for e in doc.sweep)
    lines = [
        f"{title}: {doc.algorithm} on {doc.dataset or 'the federation'} "
        f"({doc.participants} participants, seed {doc.seed})",
        "",
        "    K   FedFuzzDB   silhouette" + ("      ARI" if has_ari else "") + "   rounds  stop",
    ]
    for e in doc.sweep:
        mark = "*" if e.k == doc.k_selected else " "
        ari = f"  {e.ari:7.3f}" if e.ari is not None else ""
        lines.append(
            f"  {mark}{e.k:>2}   {e.fed_fuzzy_db:9.4f}   {e.simplified_silhouette:10.4f}"
            f"{ari}   {e.rounds:>6}  {e.stop_reason}"
        )
    lines.append("")
    elbow = f"; elbow K = {doc.k_elbow}" if doc.k_elbow is not None else ""
    lines.append(f"selected K = {doc.k_selected} (minimum FedFuzzDB){elbow}")
    if doc.local_k is not None and doc.k_range_rule_of_thumb is not None:
        lo, hi = doc.k_range_rule_of_thumb
        lines.append(
            "local-only K per participant: " + ", ".join(str(k) for k in doc.local_k)
            + f" (rule-of-thumb range {lo}..{hi})"
        )
    selected = next(e for e in doc.sweep if e.k == doc.k_selected)
    lines.append(f"centers at K = {doc.k_selected}:")
    names = feature_names(doc)
    lines.append("  center  " + "  ".join(f"{_cell(n):>10}" for n in names))
    for j, row in enumerate(selected.centers):
        if row is None:
            lines.append(f"  {j:>6}  withheld (see notes)")
        else:
            lines.append(f"  {j:>6}  " + "  ".join(f"{v:10.4f}" for v in row))
    lines.extend(f"note: {note}" for note in doc.notes)
    return "\n".join(lines)


def _cell(name: str) -> str:
    """A column header cut to the 10 characters of a center cell."""
    return name if len(name) <= 10 else name[:9] + "~"


def _format_groups(doc: ResultDocument, *, title: str) -> str:
    groups = doc.groups or []
    small = {tuple(g) for g in doc.unprotected_groups or []}
    lines = [
        f"{title}: {doc.algorithm} ({doc.participants} participants, seed {doc.seed}, "
        f"protection {doc.protection})",
        "",
        f"{len(groups)} group(s):",
    ]
    unmasked = " (in the clear)" if doc.protection == "none" else " (too small to mask)"
    for i, members in enumerate(groups):
        mark = unmasked if tuple(members) in small else ""
        lines.append(f"  group {i}: {', '.join(members)}{mark}")
    if doc.isolated_clusters is not None:
        lines.append(
            f"{len(doc.isolated_clusters)} isolated cluster(s): "
            + (", ".join(doc.isolated_clusters) or "none")
        )
    for it in doc.iterations or []:
        lines.append(
            f"  iteration {it.iteration}: {it.groups} group(s), {it.isolated_clusters} "
            f"isolated, {len(it.frozen)} participant(s) frozen"
        )
    if doc.stop_reason is not None:
        lines.append(f"stopped: {doc.stop_reason}")
    lines.extend(f"note: {note}" for note in doc.notes)
    return "\n".join(lines)


def format_job_list(jobs: list[JobPublic], *, as_json: bool) -> str:
    """The analyst's jobs, one line each (id, algorithm, state, created, progress), or the
    list as JSON."""
    if as_json:
        return _JOB_LIST.dump_json(jobs, indent=2).decode()
    if not jobs:
        return "no jobs"
    lines = [f"{'id':<36}  {'algorithm':<12}  {'state':<10}  {'created':<20}  progress"]
    for job in jobs:
        created = job.created_at.strftime("%Y-%m-%d %H:%M:%S")
        lines.append(
            f"{job.id:<36}  {job.spec.algorithm:<12}  {job.state:<10}  {created:<20}  "
            f"{_progress(job)}"
        )
    return "\n".join(lines)


def _progress(job: JobPublic) -> str:
    p = job.progress
    if p is None:
        return "-"
    parts = [p.stage]
    if p.k is not None:
        parts.append(f"K={p.k}")
    if p.round is not None:
        parts.append(f"round {p.round}")
    return " ".join(parts)

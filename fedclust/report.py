"""Human-readable rendering of a result document (simulate, demo, job result)."""

from __future__ import annotations

from pydantic import TypeAdapter

from fedclust.exports import feature_names
from fedclust.protocol.wire.messages import JobPublic, ResultDocument
from fedclust.tables import render_table

_JOB_LIST = TypeAdapter(list[JobPublic])


def format_result(doc: ResultDocument, *, title: str) -> str:
    """A table of the sweep (the selected K starred), the choice of K and its centers; for
    the model-based algorithms, the groups found."""
    if doc.groups is not None:
        return _format_groups(doc, title=title)
    has_ari = any(e.ari is not None for e in doc.sweep)
    has_weighted = any(e.client_weighted_ari is not None for e in doc.sweep)
    headers = [
        "", "K", "FedFuzzDB", "silhouette", *(["ARI"] if has_ari else []),
        *(["client ARI"] if has_weighted else []), "rounds", "stop",
    ]
    sweep = [
        [
            "*" if e.k == doc.k_selected else "", str(e.k), f"{e.fed_fuzzy_db:.4f}",
            f"{e.simplified_silhouette:.4f}",
            *([_score(e.ari)] if has_ari else []),
            *([_score(e.client_weighted_ari)] if has_weighted else []),
            str(e.rounds), e.stop_reason,
        ]
        for e in doc.sweep
    ]
    lines = [
        f"{title}: {doc.algorithm} on {doc.dataset or 'the federation'} "
        f"({doc.participants} participants, seed {doc.seed})",
        "",
        render_table(headers, sweep, numeric=range(1, len(headers) - 1), indent=2),
        "",
    ]
    elbow = f"; elbow K = {doc.k_elbow}" if doc.k_elbow is not None else ""
    lines.append(f"selected K = {doc.k_selected} (minimum FedFuzzDB){elbow}")
    if has_weighted:
        lines.append("client ARI: each participant's ARI weighted by its rows (Garst & "
                     "Reinders 2023); ARI: over the pooled rows")
    if doc.local_k is not None and doc.k_range_rule_of_thumb is not None:
        lo, hi = doc.k_range_rule_of_thumb
        lines.append(
            "local-only K per participant: " + ", ".join(str(k) for k in doc.local_k)
            + f" (rule-of-thumb range {lo}..{hi})"
        )
    selected = next(e for e in doc.sweep if e.k == doc.k_selected)
    lines.append(f"centers at K = {doc.k_selected}:")
    names = feature_names(doc)
    centers = [
        [str(j), "withheld (see notes)", *[""] * (len(names) - 1)] if row is None
        else [str(j), *(f"{v:.4f}" for v in row)]
        for j, row in enumerate(selected.centers)
    ]
    headers = ["center", *(_cell(n) for n in names)]
    lines.append(render_table(headers, centers, numeric=range(len(headers)), indent=2))
    lines.extend(f"note: {note}" for note in doc.notes)
    return "\n".join(lines)


def _score(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def _cell(name: str) -> str:
    """A column header cut to 10 characters (a center cell's width, ``-1234.5678``)."""
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
    """The analyst's jobs, a table with one row each (id, algorithm, state, created,
    progress), or the list as JSON."""
    if as_json:
        return _JOB_LIST.dump_json(jobs, indent=2).decode()
    if not jobs:
        return "no jobs"
    rows = [
        [job.id, job.spec.algorithm, job.state, job.created_at.strftime("%Y-%m-%d %H:%M:%S"),
         _progress(job)]
        for job in jobs
    ]
    return render_table(["id", "algorithm", "state", "created", "progress"], rows)


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

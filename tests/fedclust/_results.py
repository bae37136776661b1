"""A small hand-made result document for the export, plot and CLI tests."""

from __future__ import annotations

from fedclust.protocol.wire.messages import ResultDocument, SweepEntryDocument


def sample_document(*, names: list[str] | None = None, width: int = 2) -> ResultDocument:
    """A sweep over K = 2..4, K = 3 selected, elbow at 2; K = 3 has one withheld center."""
    def entry(k: int, db: float, sil: float) -> SweepEntryDocument:
        centers: list[list[float] | None] = [
            [float(10 * j + i) for i in range(width)] for j in range(k)
        ]
        if k == 3:
            centers[1] = None
        return SweepEntryDocument(
            k=k, fed_fuzzy_db=db, centers=centers, rounds=5 + k, stop_reason="converged",
            simplified_silhouette=sil,
        )

    return ResultDocument(
        algorithm="ffcm", dataset="toy", participants=3, seed=1, standardised=False,
        k_selected=3, k_elbow=2,
        sweep=[entry(2, 0.9, 0.5), entry(3, 0.4, 0.7), entry(4, 0.6, 0.6)],
        feature_names=names,
    )

"""Analyst route: the registered algorithms, so a client (the dashboard's job form) offers
exactly what a job may name, read from the registry (``protocol.algorithms``)."""

from __future__ import annotations

from fastapi import APIRouter

from fedclust.coordinator.api.deps import Analyst, error_responses
from fedclust.protocol import algorithms
from fedclust.protocol.wire.messages import AlgorithmPublic

__all__ = ["router"]

router = APIRouter(tags=["jobs"])


@router.get(
    "/algorithms",
    response_model=list[AlgorithmPublic],
    operation_id="list_algorithms",
    summary="List the algorithms a job may name",
    responses=error_responses(401, 403),
)
def list_algorithms(analyst: Analyst) -> list[AlgorithmPublic]:
    """Every registered algorithm in registration order: its name, title, family and what
    its protocol allows (protection 'none' only; min_center_contributors)."""
    return [
        AlgorithmPublic(
            name=spec.name, title=spec.title, family=spec.family,
            plain_only=spec.plain_only, counts_contributors=spec.counts_contributors,
        )
        for spec in map(algorithms.get, algorithms.names())
    ]

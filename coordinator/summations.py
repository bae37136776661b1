"""The summation of a job's protection, one place for the service and the simulator.

``none``: no summation (:func:`coordinator.job.run_job` adds in the clear,
:class:`coordinator.secure_sum.PlainSummation`); ``masking``: pairwise masking over the
participants' Ed25519 identity keys (:class:`coordinator.secure_sum.MaskedSummation`);
``paillier``: ciphertexts added here and decrypted by the key holder
(:class:`coordinator.paillier_sum.PaillierSummation`). The service takes the keys its agents
enrolled with and the counting service as key holder; the simulator generates both in process.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from fedclust.coordinator.paillier_sum import JobKeyHolder, PaillierSummation
from fedclust.coordinator.secure_sum import JobSummation, MaskedSummation
from fedclust.protocol.wire.messages import JobCreate

__all__ = ["job_summation"]


def job_summation(
    spec: JobCreate,
    job_id: str,
    *,
    identity_keys: Callable[[], Mapping[str, bytes]],
    key_holder: Callable[[], JobKeyHolder],
    concurrent: bool = True,
) -> JobSummation | None:
    """The summation of ``spec.protection`` for job ``job_id`` (None for "none").

    ``identity_keys`` (each participant's Ed25519 public key) is asked only under masking,
    ``key_holder`` only under Paillier; ``concurrent`` as in
    :class:`coordinator.secure_sum.CohortSums`. Bounds are set later by ``run_job`` from the
    participants' declarations.
    """
    if spec.protection == "none":
        return None
    if spec.protection == "paillier":
        return PaillierSummation(job_id, key_holder(), concurrent=concurrent)
    return MaskedSummation(
        job_id, identity_keys(), concurrent=concurrent, graph=spec.masking_graph
    )

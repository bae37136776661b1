"""What a masked service job's ledger must say about the secure-sum inputs."""

from __future__ import annotations


def assert_only_masked_inputs(protection: dict[tuple[str, str], set[str]]) -> None:
    """A ``secure_input`` reply carries its vectors masked, its seed shares sealed to one
    neighbour each, and in the clear only their routing (sender, recipient) and the seed's
    commitment."""
    inputs = {k: v for k, v in protection.items() if k[0] == "secure_input"}
    vectors = {k: v for k, v in inputs.items() if k[1].startswith("vectors.")}
    assert vectors and all(v == {"masked"} for v in vectors.values())
    for (_, name), how in inputs.items():
        if name.startswith("vectors."):
            continue
        assert name.split("[")[0] in ("shares", "seed_commitment"), name
        assert how == ({"sealed"} if name.endswith(".ciphertext") else {"plain"}), name

"""Paillier throughput: packed fixed-point slots (crypto.paillier) vs one value per ciphertext.

Both sides use the same 2048-bit phe key (gmpy2 backend) in the same run:

- ``packed``:    :func:`crypto.paillier.encrypt_vector` (offset-binary slots of one fixed
                 precision, ``floor(2047 / slot_bits) - 1`` values per plaintext) and
                 :func:`crypto.paillier.decrypt_sum` of an aggregate of ``--parties``
                 contributions; ``add`` is the homomorphic sum of those contributions.
- ``per-value``: phe's standard ``public_key.encrypt(float)`` (one ciphertext per value, a
                 per-value floating exponent), ``private_key.decrypt`` and ``+`` of
                 EncryptedNumbers.

Throughput is values per second, best of ``--repeats``; ratios are packed / per-value (the aim
of issue 4 is >= 10x). Wire size is ciphertext bytes per value (phe's exponent not counted).

Usage: python benchmarks/bench_paillier.py [--values 2000] [--baseline-values 100]
       [--parties 3] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from fedclust.crypto.paillier import (
    Packing,
    PaillierKeyPair,
    SlotSpec,
    add,
    decrypt_sum,
    encrypt_vector,
)

# A representative sum-type statistic: |v| <= 2^20 at 24 fractional bits, up to 100 parties.
SPEC = SlotSpec("local_sums", scale_bits=24, bound=float(2**20), max_parties=100)


def best_of(repeats: int, fn: Callable[[], object]) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--values", type=int, default=2000, help="values per packed vector")
    parser.add_argument("--baseline-values", type=int, default=100,
                        help="values encrypted one per ciphertext")
    parser.add_argument("--parties", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    keys = PaillierKeyPair.generate(bits=2048)
    pk, sk = keys.public_key, keys.private_key
    packing = Packing.for_key(SPEC, pk)
    rng = np.random.default_rng(0)
    bound = SPEC.bound
    xs = [rng.uniform(-bound, bound, args.values) for _ in range(args.parties)]
    base = rng.uniform(-bound, bound, args.baseline_values).tolist()
    print(f"2048-bit key; spec: f={SPEC.scale_bits}, bound=2^20, max_parties="
          f"{SPEC.max_parties} -> slot {SPEC.slot_bits} bits ({SPEC.headroom_bits} headroom), "
          f"{packing.slots_per_plaintext} values per plaintext (+1 counter slot)")

    # Packed.
    t_enc = best_of(args.repeats, lambda: encrypt_vector(pk, xs[0], SPEC))
    contributions = [encrypt_vector(pk, x, SPEC) for x in xs]
    t_add = best_of(args.repeats, lambda: add(contributions))
    total = add(contributions)
    t_dec = best_of(args.repeats, lambda: decrypt_sum(sk, total, n_parties=args.parties))
    err = np.abs(decrypt_sum(sk, total, n_parties=args.parties) - np.sum(xs, axis=0)).max()
    assert err <= SPEC.error_bound(args.parties) + args.parties * bound * 2.0**-51
    packed_wire = len(total.ciphertexts) * (2048 * 2 // 8) / args.values

    # One value per ciphertext (phe's standard float encoding).
    b_enc = best_of(args.repeats, lambda: [pk.encrypt(v) for v in base])
    encs = [[pk.encrypt(v) for v in base] for _ in range(args.parties)]

    def add_per_value() -> object:
        out = encs[0]
        for other in encs[1:]:
            out = [a + b for a, b in zip(out, other, strict=True)]
        return out

    b_add = best_of(args.repeats, add_per_value)
    summed = add_per_value()
    assert isinstance(summed, list)
    b_dec = best_of(args.repeats, lambda: [sk.decrypt(e) for e in summed])

    n, m = args.values, args.baseline_values
    rows = [
        ("encrypt", n / t_enc, m / b_enc),
        (f"add ({args.parties} parties)", n / t_add, m / b_add),
        ("decrypt", n / t_dec, m / b_dec),
    ]
    print(f"{'values/s':<20}{'packed':>12}{'per-value':>12}{'ratio':>9}")
    for name, packed, single in rows:
        print(f"{name:<20}{packed:>12,.0f}{single:>12,.0f}{packed / single:>8.1f}x")
    print(f"{'wire bytes/value':<20}{packed_wire:>12.1f}{2048 * 2 / 8:>12.1f}"
          f"{(2048 * 2 / 8) / packed_wire:>8.1f}x smaller")
    print(f"packed decoding error {err:.2e} (bound {SPEC.error_bound(args.parties):.2e})")


if __name__ == "__main__":
    main()

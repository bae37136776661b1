"""Cryptography of fedclust: the recipes other packages use; primitives stay private.

- :mod:`crypto.tokens`: bearer credentials (random tokens, stored SHA-256 digests,
  constant-time identification).
- :mod:`crypto.fixedpoint`: fixed-point encoding of statistics into Z_2^64 with declared
  bounds and loud overflow errors.
- :mod:`crypto.shamir`: Shamir secret sharing over GF(2^31 − 1), vectorised with numpy.
- :mod:`crypto.graph`: the SecAgg+ masking graph (Bell et al. 2020) and its parameters.
- :mod:`crypto.masking`: a job's secure sums by pairwise masking on that graph (Bonawitz et
  al. 2017) with signed job keys, sealed seed shares and dropout recovery by round keys
  (primitives in ``crypto._prg``).
- :mod:`crypto.paillier`: Paillier with fixed precision and packed slots.
"""

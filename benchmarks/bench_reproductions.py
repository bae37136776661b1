"""The README's reproduction rows, measured under protection "none" and the default "masking".

Each row runs the federated algorithm on the paper's setup through the simulator, once in the
clear and once masked, and prints the paper's figure beside both (the tests check the same
claims with stated tolerances; this prints the figures over more seeds):

- motivational example (Stallmann & Wilbik 2022, Table 1): FedFCM sweep K = 2..8, the K
  chosen and FedFuzzDB at K = 5, over ``--seeds`` data seeds;
- federated averaging vs k-means averaging (Table 2): largest matched center error at K = 5;
- Garst & Reinders' grid (β ∈ {0.1, 1, 10}, 5 clients, K = 16): ARI (pooled, and per client
  weighted by its size as the paper reports) of federated k-means, central k-means
  (scikit-learn, 10 restarts) and k-FED, ours ("kfed") and as Dennis et al. write it
  ("kfed-dennis"; plaintext only, by design);
- xclara (Corcuera Bárcena et al., Table 1): ARI of exact federated FCM at K = 3;
- G2 (Table 3): K chosen by the FedFCM sweep, σ ∈ {10, 20, 30}, D ∈ {2, 16, 64}, 5 and 10
  participants, standardised (masking needs at least 3 participants).

Usage: python benchmarks/bench_reproductions.py [--seeds 10] [--rows motivational,...]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score

from fedclust.data.federations import Federation, build_federation
from fedclust.data.splits import split_uniform
from fedclust.data.synthetic import MOTIVATIONAL_CENTERS
from fedclust.protocol.maths import metrics
from fedclust.protocol.maths._fuzzy import nearest
from fedclust.protocol.wire.messages import ProtectionScheme
from fedclust.simulate import simulate

MODES: tuple[ProtectionScheme, ...] = ("none", "masking")


def _span(values: list[float]) -> str:
    return f"{min(values):.3f}–{max(values):.3f}"


def motivational(seeds: int) -> None:
    print("motivational example, FedFCM sweep K = 2..8 (paper: K = 5, FedFuzzDB 0.43)")
    for mode in MODES:
        chosen, at5 = [], []
        for seed in range(seeds):
            fed = build_federation(dataset="motivational", seed=seed)
            report = simulate(fed, algorithm="fedfcm", ks=range(2, 9), seed=seed,
                              protection=mode)
            chosen.append(report.sweep.k_selected)
            at5.append(report.sweep.entry(5).fed_fuzzy_db)
        hits = sum(k == 5 for k in chosen)
        print(f"  {mode:8s} K = 5 in {hits}/{seeds} seeds; FedFuzzDB at K = 5: {_span(at5)}")


def _matched_error(found: np.ndarray, truth: np.ndarray) -> float:
    d = np.linalg.norm(found[:, None, :] - truth[None, :, :], axis=2)
    rows, cols = linear_sum_assignment(d)
    return float(d[rows, cols].max())


def averaging(seeds: int) -> None:
    print("k-means averaging vs federated averaging, K = 5 (paper: federated averaging worse)")
    average = [
        _matched_error(
            simulate(build_federation(dataset="motivational", seed=s), algorithm="fedfcm-avg",
                     ks=[5], seed=s, protection="none").sweep.entries[0].result.centers,
            MOTIVATIONAL_CENTERS,
        )
        for s in range(seeds)
    ]
    for mode in MODES:
        kmeans = [
            _matched_error(
                simulate(build_federation(dataset="motivational", seed=s), algorithm="fedfcm",
                         ks=[5], seed=s, protection=mode).sweep.entries[0].result.centers,
                MOTIVATIONAL_CENTERS,
            )
            for s in range(seeds)
        ]
        worse = sum(a > k for a, k in zip(average, kmeans, strict=True))
        print(f"  {mode:8s} k-means averaging error {_span(kmeans)}; federated averaging "
              f"(none only) {_span(average)}; worse in {worse}/{seeds}")


def _ari(fed: Federation, centers: np.ndarray) -> float:
    assert fed.labels is not None
    truth = np.concatenate(fed.labels)
    pred = np.concatenate([nearest(X, centers) for X in fed.parts])
    return float(adjusted_rand_score(truth, pred))


def _client_ari(fed: Federation, centers: np.ndarray) -> float:
    """The client-weighted ARI Garst & Reinders report (``metrics.client_weighted_ari``)."""
    assert fed.labels is not None
    return metrics.client_weighted_ari(fed.labels, [nearest(X, centers) for X in fed.parts])


def garst(seeds: int) -> None:
    print("Garst grid, K = 16, 5 clients (paper: federated ≈ central > k-FED; ARI ~0.95); "
          "pooled ARI / client-weighted ARI")
    for beta in (0.1, 1.0, 10.0):
        central: list[tuple[float, float]] = []
        kfed: dict[str, list[tuple[float, float]]] = {"kfed": [], "kfed-dennis": []}
        fed_ari: dict[str, list[tuple[float, float]]] = {mode: [] for mode in MODES}
        for seed in range(seeds):
            fed = build_federation(dataset="garst-grid", beta=beta, seed=seed)
            pooled = np.vstack(fed.parts)
            km = KMeans(16, n_init=10, random_state=seed).fit(pooled)
            central.append((_ari(fed, km.cluster_centers_), _client_ari(fed, km.cluster_centers_)))
            for variant, aris in kfed.items():
                one_shot = simulate(fed, algorithm=variant, ks=[16], seed=seed, protection="none")
                found = one_shot.sweep.entries[0].result.centers
                aris.append((_ari(fed, found), _client_ari(fed, found)))
            for mode in MODES:
                report = simulate(fed, algorithm="fkm", ks=[16], seed=seed, protection=mode)
                assert report.ari is not None and report.client_weighted_ari is not None
                fed_ari[mode].append((report.ari[0], report.client_weighted_ari[0]))

        def both(values: list[tuple[float, float]]) -> str:
            pooled_mean, client_mean = np.mean(values, axis=0)
            return f"{pooled_mean:.3f}/{client_mean:.3f}"

        print(f"  β = {beta:<4}  fkm none {both(fed_ari['none'])}, masking "
              f"{both(fed_ari['masking'])}; central {both(central)}; k-FED "
              f"{both(kfed['kfed'])}, as Dennis et al. write it {both(kfed['kfed-dennis'])} "
              f"(means over {seeds} seeds)")


def xclara(seeds: int) -> None:
    print("xclara, exact federated FCM, K = 3, 5 participants (paper: ARI 0.993)")
    for mode in MODES:
        aris = []
        for seed in range(seeds):
            fed = build_federation(dataset="xclara", participants=5, seed=seed)
            report = simulate(fed, algorithm="ffcm", ks=[3], seed=seed, standardise=True,
                              protection=mode)
            assert report.ari is not None
            aris.append(report.ari[0])
        print(f"  {mode:8s} ARI {_span(aris)}")


def g2(seeds: int) -> None:
    print("G2, FedFCM sweep K = 2..6, standardised (paper, Table 3: K = 2 found)")
    from fedclust.data.loaders import builtin

    for mode in MODES:
        cells = hits = 0
        for dim in (2, 16, 64):
            for sigma in (10, 20, 30):
                loaded = builtin(f"g2-{dim}-{sigma}")
                for participants in (5, 10):
                    for seed in range(min(seeds, 2)):
                        fed = Federation.from_pairs(
                            "g2", split_uniform(loaded.X, loaded.y, participants, seed=seed)
                        )
                        report = simulate(fed, algorithm="fedfcm", ks=range(2, 7), seed=seed,
                                          standardise=True, protection=mode)
                        cells += 1
                        hits += report.sweep.k_selected == 2
        print(f"  {mode:8s} K = 2 in {hits}/{cells} runs")


ROWS: dict[str, Callable[[int], None]] = {
    "motivational": motivational, "averaging": averaging, "garst": garst, "xclara": xclara,
    "g2": g2,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--rows", default=",".join(ROWS), help="comma-separated row names")
    args = parser.parse_args()
    for name in args.rows.split(","):
        start = time.perf_counter()
        ROWS[name](args.seeds)
        print(f"  ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()

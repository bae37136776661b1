"""fedclust: federated cluster analysis without pooling data (CLI, simulator, datasets).

The scikit-learn style estimators (:mod:`fedclust.estimators`) are importable from here; they
are loaded on first use, so ``import fedclust`` stays light.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FedFCM", "FederatedFuzzyCMeans", "FederatedKMeans", "KFed", "sweep"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from fedclust import estimators

        return getattr(estimators, name)
    raise AttributeError(f"module 'fedclust' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])

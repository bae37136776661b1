"""Where a participant's models train: the ``device`` setting of the model-based algorithms.

A setting is ``"auto"`` (the first CUDA GPU when ``torch.cuda.is_available()``, else the
CPU), ``"cpu"``, ``"cuda"`` or ``"cuda:N"``. It is the participant's own choice (the agent's
``[model] device``, the simulator's ``--device``), never a job term: results on the CPU are the
same bit for bit whatever the setting names, and on a GPU equal within float tolerance.
:func:`check_device` validates the spelling without importing torch (config files);
:func:`resolve_device` turns a setting into a ``torch.device`` and fails clearly when a GPU is
asked for and torch sees none. :func:`threads_per_participant` is the CPU thread count that
keeps participants training concurrently in one process from oversubscribing the cores.
"""

from __future__ import annotations

import logging
import os
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["DEVICE_CHOICES", "check_device", "resolve_device", "threads_per_participant"]

#: The spellings a device setting takes (N a GPU index).
DEVICE_CHOICES = "auto, cpu, cuda or cuda:N"
_SETTING = re.compile(r"^(auto|cpu|cuda(:\d{1,3})?)$")
log = logging.getLogger(__name__)


def check_device(setting: object, *, where: str = "device") -> str:
    """The setting, checked for spelling (``auto``, ``cpu``, ``cuda``, ``cuda:N``); ValueError
    naming ``where`` otherwise."""
    if not isinstance(setting, str) or not _SETTING.match(setting):
        raise ValueError(f"{where} must be {DEVICE_CHOICES}; got {setting!r}.")
    return setting


def resolve_device(setting: str, *, where: str = "device") -> torch.device:
    """The torch device of a setting: ``auto`` is ``cuda`` when torch sees a GPU, else
    ``cpu``; ``cuda[:N]`` without that GPU is a ValueError naming ``where``."""
    import torch

    check_device(setting, where=where)
    if setting == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        log.info("%s = 'auto': training on %s", where, device)
        return device
    device = torch.device(setting)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"{where} = {setting!r} asks for a CUDA GPU, but torch sees none "
                "(torch.cuda.is_available() is False: no GPU, no driver, or a CPU-only torch "
                "build); use 'auto' or 'cpu'."
            )
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise ValueError(
                f"{where} = {setting!r}: torch sees {count} GPU(s), numbered 0..{count - 1}."
            )
    return device


def threads_per_participant(concurrent: int, *, cores: int | None = None) -> int:
    """CPU threads for each of ``concurrent`` participants training at once in one process:
    ``max(1, cores // concurrent)`` (cores: ``os.cpu_count()``)."""
    available = cores if cores is not None else (os.cpu_count() or 1)
    return max(1, available // max(1, concurrent))

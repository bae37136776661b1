"""Errors shared by participants and the coordinator."""

from __future__ import annotations


class RefusedError(Exception):
    """A participant refuses a request: its local policy or a paper's privacy rule forbids it.

    The message states the rule and the numbers it compared, never data values; the
    coordinator shows it to the analyst as the reason a round could not proceed.
    """


class ProtocolError(Exception):
    """A contribution or combination step is inconsistent (wrong shapes, non-finite values)."""


class UnavailableError(Exception):
    """A participant did not answer in time (it dropped out of the round)."""

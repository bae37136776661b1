"""The protocol: its pure maths (:mod:`.maths`) and its wire format (:mod:`.wire`).

``maths`` holds numpy functions with no I/O, one module per paper, split into what a
participant computes from its own rows (``participant_*``) and what the coordinator combines
(``combine_*``); ``wire`` holds the pydantic models of every REST message, built on ``maths``
and never the other way round.
"""

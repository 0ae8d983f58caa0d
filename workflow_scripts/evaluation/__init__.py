"""Evaluation: zero-shot scoring of one run per language (``evaluate``), the official
metrics (``metrics``, ``ranking``), sentence retrieval and bitext mining (``retrieval``) on
exact nearest-neighbour search (``neighbours``)."""

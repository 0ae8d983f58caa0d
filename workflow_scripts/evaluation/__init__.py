"""Evaluation: zero-shot scoring of one run per language (``evaluate``) and the metric file
that records it (``metric_file``, the rule's CLI), the official metrics (``metrics``,
``ranking``), sentence retrieval and bitext mining (``retrieval``) on exact nearest-neighbour
search (``neighbours``)."""

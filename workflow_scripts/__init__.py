"""xstilts: English intermediate-task training for zero-shot cross-lingual transfer.

The modules hold all logic; each step has a thin CLI (``python -m workflow_scripts.<module>``)
that the Snakemake rules call. This file stays import-free so the Snakefile can import
``workflow_scripts.codehash`` without loading torch.
"""

"""xstilts: English intermediate-task training for zero-shot cross-lingual transfer.

The modules hold all logic, grouped by stage: ``data``, ``translation``, ``models``,
``training``, ``evaluation``, ``reporting``, and ``workflow`` (what the Snakefile imports to
check the config and build the DAG), with ``multimodal`` for the image tasks and ``common``
for small shared helpers. Each step has a thin CLI (``python -m workflow_scripts.<stage>.<module>``)
that the Snakemake rules call. The package files stay import-free so that the Snakefile can
import ``workflow_scripts.workflow`` without loading torch.
"""

"""The workflow: what the Snakefile imports at parse time, standard library only. The config
check and file layout (``grid_checks``, ``grid``, ``grid_settings``), its axes (``transfer``,
``backbone_grid``, ``arm_recipes``, ``sweep``, ``prompted``, ``retention``) and how jobs find
their GPUs (``gpu_binding``, ``gpu_sharing``). Resource plans are in ``planning/``, the
operator's tools in ``operations/``."""

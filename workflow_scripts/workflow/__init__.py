"""The workflow: what the Snakefile imports at parse time, standard library only. The config
check and file layout (``grid``), its axes (``transfer``, ``backbone_grid``, ``benchmark``),
resource plans (``memory_model``, ``memory_plan``, ``memory_table``, ``cost``), Slurm job control (``slurm``), job logs that keep
the previous attempts' (``logs``), and the code hashes that rerun exactly the rules whose
modules changed (``codehash``)."""

"""Resource planning, read at parse time and by the planning commands: the memory a backbone's
phases need (``memory_model``, ``memory_plan``, ``memory_table``), the work and GPU-hours of
every job (``job_work``, ``job_cost``, ``job_estimates``, ``cost``), the disk a grid fills
(``disk``) and what Slurm is asked for (``slurm``). Standard library at parse time, as
``workflow/``."""

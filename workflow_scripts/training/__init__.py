"""Training: the engine both phases share (``train``), where it runs (``runtime``: one
process, or torchrun ranks with FSDP2 through ``distributed``), resumable checkpoints
(``checkpoints``) and loading a backbone already sharded (``sharded_loading``)."""

"""Models: backbone families (``backbones``), the encoder with its task heads (``heads``),
training methods (full, LoRA, QLoRA: ``adapters``), the dual encoder of the ranking targets
(``dual_encoder``), and the step that provides model directories (``prepare``: Hub snapshots,
or the demo's own small models from ``demo_models``)."""

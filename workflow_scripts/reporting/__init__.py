"""Reporting: the paper's tables (``tables``, ``latex``), figures (``plots``), paired
significance (``significance``), the image-vs-text comparison (``modality``), the
comparison across backbones (``compare_backbones``) and leaderboard submissions
(``predictions``)."""

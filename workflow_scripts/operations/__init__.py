"""The operator's tools around a run: the progress view (``status``), the per-rule logs that
keep the previous attempts' (``logs``), the Hub's answers explained (``hub_answers``) and the
summary printed when a run ends (``summary``)."""

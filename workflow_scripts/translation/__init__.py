"""Translation of intermediate-task data: the translation step with answer-span re-alignment
and its quality scores (``translate``), and the MarianMT / CTranslate2 engines
(``translators``)."""

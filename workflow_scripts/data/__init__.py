"""Data: the task catalogue (``tasks``), the loaders that turn every source into canonical
rows (``loaders``), the prepare step writing one Parquet table per task and split
(``prepare``), and the encoding of rows into model inputs and of outputs into predictions
(``features``)."""

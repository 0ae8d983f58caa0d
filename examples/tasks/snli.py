"""The converter of the ``snli`` task entry: stanfordnlp/snli rows -> canonical
classification rows (``text_a``, ``text_b``, ``label``). A converter receives the data source,
the split, the languages, the task's ``options`` and a report it fills with what it dropped."""

from workflow_scripts.data.loaders.registry import converter, label_index
from workflow_scripts.spec.tasks import get_task

HUB_SPLITS = {"train": "train", "dev": "validation"}


@converter("snli")
def snli_rows(source, split, languages, options, report):
    task = get_task("snli")
    dropped = 0
    for i, row in enumerate(source.rows("plain_text", HUB_SPLITS[split])):
        if row["label"] == -1:  # no annotator consensus: no gold label
            dropped += 1
            continue
        yield {
            "id": f"snli-{split}-{i}",
            "lang": "en",
            "text_a": row["premise"],
            "text_b": row["hypothesis"],
            "label": label_index(task, row["label"], f"snli {split} row {i}"),
        }
    report["dropped_without_consensus"] = dropped

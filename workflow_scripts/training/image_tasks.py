"""An image task's part of a training phase (phase_data.load_phase_data): its rows matched to their
images' features (rows whose image was dropped go here, counted), its answer vocabulary
(VQA), and its head, which carries the projector and the feature bank (multimodal/prefix.py), so the
visual branch ends with the phase's heads.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from workflow_scripts.common import LOG
from workflow_scripts.multimodal.bank import FeatureBank
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.data_map import TaskFiles
from workflow_scripts.spec.task_options import TaskOptions
from workflow_scripts.spec.tasks import VISUAL_ANSWER, Task


@dataclass
class ImageTask:
    task: Task  # with its answer vocabulary, for VQA
    train: Any  # the Arrow training rows with their ``image_index``
    bank: FeatureBank

    def attach(self, table, where: str):
        """Other rows of the task (its dev split) matched to the same bank."""
        return self.bank.attach(table, where)

    def head(self, encoder_config, dropout: float, init_std: float):
        from workflow_scripts.models.heads import visual_classifier
        from workflow_scripts.multimodal.prefix import VisualClassificationHead

        hidden = encoder_config.hidden_size
        classifier = visual_classifier(self.task.format, hidden, self.task.num_labels, dropout, init_std)
        return VisualClassificationHead(self.bank.tensor(), hidden, classifier, init_std, self.images_per_row)

    @property
    def images_per_row(self) -> int:
        return self.task.images_per_example  # the rows were checked against it

    def describe(self, images_dir: str, head) -> dict[str, Any]:
        """What the phase's log records of the visual branch."""
        return {
            "images": images_dir,
            "encoder": self.bank.report.get("encoder"),
            "kind": self.bank.report.get("kind"),
            "visual_tokens": head.visual_tokens * self.images_per_row,
            "projector_parameters": sum(p.numel() for p in head.projector.parameters()),
        }


def prepare_image_task(task: Task, train, files: TaskFiles, opts: TaskOptions) -> ImageTask:
    if files.images is None:
        raise InputError(f"task {task.name} reads images: its data map needs 'images' (the embed_images output)")
    bank = FeatureBank.load(files.images)
    train = bank.attach(train, f"{task.name} train")
    found = len(train.column("images")[0].as_py())
    if found != task.images_per_example:
        raise InputError(
            f"task {task.name}: its training rows have {found} images each, the task reads "
            f"{task.images_per_example} (check the data's 'images' column)"
        )
    if task.format == VISUAL_ANSWER:  # the answer vocabulary comes from the training split
        from workflow_scripts.data.vqa_answers import answer_vocabulary

        least = opts.min_answer_count  # declared by the format: every VQA task's settings hold it
        vocabulary = answer_vocabulary(train.column("answers").to_pylist(), least)
        if not vocabulary:
            raise InputError(
                f"task {task.name}: no answer given {least} times in its training split "
                f"(tasks.{task.name}.min_answer_count)"
            )
        task = dataclasses.replace(task, labels=vocabulary)
        LOG.info("%s: %d answers in the vocabulary", task.name, len(vocabulary))
    return ImageTask(task, train, bank)

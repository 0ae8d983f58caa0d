"""A metric file's ``backbone``: the config's provenance of the backbone completed from its
prepared directory (the commit a Hub revision resolved to; a demo model's weights digest),
with LoRA's target modules named even when the family's defaults apply."""

from __future__ import annotations

import shutil

import pytest
import yaml

from conftest import REPO
from workflow_scripts.evaluation.metric_file import SOURCE_RECORD, backbone_record, weights_sha256
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.model_settings import BackboneProvenance
from workflow_scripts.workflow import backbone_grid

pytestmark = pytest.mark.unit

SHA = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def hub_snapshot(tmp_path, demo_encoder_dir, monkeypatch):
    """The demo encoder as models/prepare.py fetches a Hub snapshot (the Hub replaced by a
    copy of the local files), source record included."""
    import huggingface_hub

    from workflow_scripts.models import prepare

    class Info:
        sha = SHA

    monkeypatch.setattr(huggingface_hub.HfApi, "repo_info", lambda self, repo_id, **kwargs: Info())
    monkeypatch.delenv("XSTILTS_HUB_LOCK", raising=False)
    monkeypatch.setattr(
        huggingface_hub,
        "snapshot_download",
        lambda repo_id, revision, local_dir, allow_patterns: shutil.copytree(
            demo_encoder_dir, local_dir, dirs_exist_ok=True
        ),
    )
    prepare.fetch_hub_model("FacebookAI/xlm-roberta-large", "main", tmp_path / "snapshot")
    return tmp_path / "snapshot"


def test_a_hub_backbone_records_the_commit_its_revision_resolved_to(hub_snapshot):
    provenance = BackboneProvenance(
        name="xlmr_large",
        family="encoder",
        source="hub",
        method="full",
        precision="bf16",
        hub_id="FacebookAI/xlm-roberta-large",
        revision="main",
    )
    assert (hub_snapshot / SOURCE_RECORD).is_file()  # the file prepare.py writes is the one read here
    assert backbone_record(provenance, hub_snapshot) == {**provenance.to_dict(), "resolved_revision": SHA}
    (hub_snapshot / SOURCE_RECORD).unlink()
    with pytest.raises(InputError, match=SOURCE_RECORD):
        backbone_record(provenance, hub_snapshot)


def test_a_lora_backbone_records_its_settings_and_the_modules_it_adapts(demo_encoder_dir):
    """The demo config's decoder trains with LoRA; on the demo encoder (an XLM-R) the family's
    default modules are BERT's attention projections."""
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    config["backbones"]["llama_tiny"]["family"] = "encoder"
    provenance = backbone_grid.provenance(config, "llama_tiny")
    assert provenance.to_dict() == {
        "name": "llama_tiny",
        "family": "encoder",
        "source": "demo",
        "method": "lora",
        "precision": "fp32",
        "lora": {"rank": 8, "alpha": 16, "dropout": 0.0},
    }
    record = backbone_record(provenance, demo_encoder_dir)
    assert record["lora"] == {
        "rank": 8,
        "alpha": 16,
        "dropout": 0.0,
        "target_modules": ["query", "key", "value", "attention.output.dense"],
    }
    assert record["built_locally"] and record["weights_sha256"] == weights_sha256(demo_encoder_dir)
    assert provenance.lora is not None
    configured = provenance.replace(lora=provenance.lora.replace(target_modules=("query", "intermediate.dense")))
    assert backbone_record(configured, demo_encoder_dir)["lora"]["target_modules"] == ["query", "intermediate.dense"]

"""Best weights on disk: the file format, in-place loading, and which files a resumed run keeps."""

from __future__ import annotations

import pytest
import torch

from workflow_scripts.spec.basics import InputError
from workflow_scripts.training.checkpoints import BestWeights, load_weights_into, save_weights

pytestmark = pytest.mark.unit


class Mixed(torch.nn.Module):
    """Parameters and buffers of several dtypes, one tensor shared under two names."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(5, 3)
        self.low = torch.nn.Parameter(torch.randn(4, 2).to(torch.bfloat16))
        self.register_buffer("ids", torch.arange(7).view(1, 7))
        self.register_buffer("flag", torch.tensor(True))
        self.tied = self.linear  # the same weight under a second name, like a tied LM head


def test_weights_round_trip_in_place_and_in_safetensors_layout(tmp_path):
    from safetensors.torch import load_file

    torch.manual_seed(0)
    source, target = Mixed(), Mixed()
    with torch.no_grad():
        for p in target.parameters():
            p.zero_()
    target.ids.zero_()
    storage_before = {n: t.data_ptr() for n, t in target.state_dict().items()}
    save_weights(source.state_dict(), tmp_path / "w.safetensors")
    load_weights_into(target, tmp_path / "w.safetensors")
    for name, tensor in source.state_dict().items():
        assert torch.equal(target.state_dict()[name], tensor), name
        assert target.state_dict()[name].data_ptr() == storage_before[name], f"{name} was replaced, not filled"
    # the safetensors library reads the file: it is the standard format, not a private one
    by_library = load_file(tmp_path / "w.safetensors")
    assert set(by_library) == set(source.state_dict())
    assert all(torch.equal(by_library[n], t) for n, t in source.state_dict().items())


def test_weights_of_another_model_are_refused(tmp_path):
    save_weights(torch.nn.Linear(5, 3).state_dict(), tmp_path / "w.safetensors")
    with pytest.raises(
        InputError, match=r"w.safetensors: weight is F32 \[3, 5\], the model's is torch.float32 \[4, 5\]"
    ):
        load_weights_into(torch.nn.Linear(5, 4), tmp_path / "w.safetensors")
    with pytest.raises(InputError, match=r"missing \['extra'\]"):
        model = torch.nn.Linear(5, 3)
        model.register_buffer("extra", torch.zeros(1))
        load_weights_into(model, tmp_path / "w.safetensors")


def test_truncated_weights_are_refused(tmp_path):
    path = tmp_path / "w.safetensors"
    save_weights(torch.nn.Linear(50, 30).state_dict(), path)
    path.write_bytes(path.read_bytes()[:-40])
    with pytest.raises(InputError, match="truncated at tensor bias"):
        load_weights_into(torch.nn.Linear(50, 30), path)


def test_best_weights_keep_what_the_newest_checkpoint_names(tmp_path):
    model = torch.nn.Linear(3, 2)
    best = BestWeights(tmp_path / "best")
    steps = lambda: sorted(int(p.stem.split("-")[1]) for p in (tmp_path / "best").glob("step-*.safetensors"))
    best.save(model, 10)
    best.checkpointed(10)
    best.save(model, 20)
    best.save(model, 30)
    assert steps() == [10, 30], "a new best replaces the previous one, never the checkpoint's"
    best.checkpointed(30)
    assert steps() == [30]
    best.save(model, 40)  # then the run is killed before its next checkpoint ...
    resumed = BestWeights(tmp_path / "best")
    resumed.checkpointed(30)  # ... and resumes from the checkpoint that names step 30
    assert steps() == [30]
    saved = model.weight.detach().clone()
    with torch.no_grad():
        model.weight.add_(1.0)
    resumed.restore(model, 30)
    assert torch.equal(model.weight, saved)

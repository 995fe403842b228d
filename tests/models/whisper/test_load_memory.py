"""Loading a CTranslate2 checkpoint holds it and the model at once only tensor by tensor: the
parts are mapped, each tensor's pages are handed back once copied into the model, and the model
keeps no view of the file."""

from __future__ import annotations

import pytest
import torch

import oasr
from oasr.models.formats.ctranslate2 import CT2Model, _address, read_ct2_model
from oasr.models.whisper import convert
from tests.models.whisper import _reference as ref


@pytest.fixture(scope="module")
def split_dir(tmp_path_factory, ct2_dir):
    """The tiny CTranslate2 model in two parts (a tensor straddles the cut: a copy, not a view)."""
    out = tmp_path_factory.mktemp("split")
    ref.split_file(ct2_dir / "model.bin", [out / "model.bin.part1", out / "model.bin.part2"])
    for name in ("config.json", "tokenizer.json"):
        (out / name).write_bytes((ct2_dir / name).read_bytes())
    return out


def _ranges(model: CT2Model) -> list[tuple[int, int]]:
    return [(_address(m), _address(m) + len(m)) for m in model.maps]


def _inside(t: torch.Tensor, ranges: list[tuple[int, int]]) -> bool:
    lo = t.data_ptr()
    return any(a <= lo < b for a, b in ranges)


def test_every_checkpoint_tensor_is_handed_back_and_none_kept(monkeypatch, split_dir):
    read: list[CT2Model] = []
    released: set[int] = set()
    original_release = CT2Model.release

    def reading(parts):
        read.append(read_ct2_model(parts))
        return read[-1]

    def release(self, tensor):
        released.add(tensor.data_ptr())
        original_release(self, tensor)

    monkeypatch.setattr(convert, "read_ct2_model", reading)
    monkeypatch.setattr(CT2Model, "release", release)
    loaded = oasr.load_pretrained(split_dir)
    (ct2,) = read
    ranges = _ranges(ct2)
    mapped = [t for t in ct2.variables.values() if t.dim() > 0 and _inside(t, ranges)]
    assert mapped, "the variables are views of the maps"
    assert len(ct2.maps) == 2
    # Every mapped weight went back (the fused q/k/v ones through their chunks).
    handed_back = [t for t in mapped if any(t.data_ptr() <= p < t.data_ptr() + t.nbytes for p in released)]
    assert len(handed_back) == len(mapped)
    kept = [n for n, t in [*loaded.model.named_parameters(), *loaded.model.named_buffers()] if _inside(t, ranges)]
    assert not kept, f"model tensors that are views of the checkpoint file: {kept}"


def test_released_pages_read_back_the_same(split_dir):
    ct2 = read_ct2_model(sorted(split_dir.glob("model.bin.part*")))
    name = max(ct2.variables, key=lambda n: ct2.variables[n].nbytes)
    tensor = ct2.variables[name]
    before = tensor.clone()
    ct2.release(tensor)
    assert torch.equal(tensor, before)

"""Registry, entry-point plugins, load accounting and config coercion."""

from __future__ import annotations

import textwrap
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from oasr.layers import Linear
from oasr.models import registry
from oasr.models.base import (
    BaseAsrModel,
    BaseEncoder,
    DecodeType,
    LoadError,
    LoadReport,
)
from oasr.models.configs import ModelConfig, coerce_config
from oasr.models.registry import CheckpointBundle, account_load, build_model_from_checkpoint, list_models

# ---------------------------------------------------------------------------
# A toy architecture (CTC-shaped) used to exercise the registry end to end.


@dataclass
class ToyConfig(ModelConfig):
    dim: int = 4
    vocab: int = 3


class ToyEncoder(BaseEncoder):
    def __init__(self, cfg: ToyConfig) -> None:
        super().__init__()
        self.proj = Linear(cfg.dim, cfg.dim)

    @property
    def subsampling_rate(self) -> int:
        return 1

    @property
    def output_size(self) -> int:
        return self.proj.out_features

    def forward(self, x, lens):
        return self.proj(x), lens


class ToyModel(BaseAsrModel):
    architecture = "toy"
    capabilities = frozenset({DecodeType.CTC})
    default_decode_type = DecodeType.CTC
    blank_id = 0

    def __init__(self, cfg: ToyConfig) -> None:
        super().__init__(cfg)
        self.encoder = ToyEncoder(cfg)
        self.head = Linear(cfg.dim, cfg.vocab)

    def forward_offline(self, x, lens):
        h, lens = self.encoder(x, lens)
        return self.head(h).log_softmax(-1), lens


class ToyConverter:
    architecture = "toy"
    auto_detect = True
    expected_unused_prefixes = ("trainer.",)
    capability_drop_hints = {"aux_head.": "the auxiliary head (rescoring) is unavailable"}

    def can_load(self, path: Path) -> bool:
        return (path / "toy.pt").is_file()

    def load(self, path: Path) -> CheckpointBundle:
        blob = torch.load(path / "toy.pt", weights_only=True)
        return CheckpointBundle("toy", ToyConfig(**blob["config"]), blob["state"], source=str(path), format="toy")


@pytest.fixture
def toy_registered():
    registry.register_model("toy", ToyModel, ToyConverter, overwrite=True)
    yield
    registry._REGISTRY.entries.pop("toy", None)


def _save_toy(path: Path, state: dict[str, torch.Tensor]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    torch.save({"config": {"dim": 4, "vocab": 3}, "state": state}, path / "toy.pt")
    return path


def _toy_state() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return {k: v.clone() for k, v in ToyModel(ToyConfig()).state_dict().items()}


def test_builtins_are_listed():
    assert "whisper" in list_models()


def test_build_from_checkpoint_is_strict_and_accounts(toy_registered, tmp_path):
    state = _toy_state()
    extra = dict(state, **{"trainer.step": torch.zeros(1), "aux_head.weight": torch.zeros(2, 2)})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model, bundle, report = build_model_from_checkpoint(_save_toy(tmp_path / "ok", extra))
    messages = [str(w.message) for w in caught]
    # declared-unused: silent; capability hint: a named warning; nothing missing.
    assert any("auxiliary head" in m for m in messages)
    assert not any("trainer." in m for m in messages)
    assert report.missing == frozenset() and report.mapped == frozenset(state)
    assert {"trainer.step", "aux_head.weight"} <= report.dropped
    assert torch.equal(model.head.weight, state["head.weight"])
    assert bundle.architecture == "toy" and not model.training


def test_missing_tensor_is_a_load_error_carrying_fired_hints(toy_registered, tmp_path):
    state = _toy_state()
    del state["head.bias"]
    state["aux_head.weight"] = torch.zeros(2, 2)
    with pytest.raises(LoadError, match=r"head\.bias.*drop hints that fired: the auxiliary head"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            build_model_from_checkpoint(_save_toy(tmp_path / "missing", state))


def test_wrong_shape_is_a_load_error(toy_registered, tmp_path):
    state = _toy_state()
    state["head.weight"] = torch.zeros(5, 4)
    with pytest.raises(LoadError, match=r"head\.weight: checkpoint \(5, 4\) vs model \(3, 4\)"):
        build_model_from_checkpoint(_save_toy(tmp_path / "shape", state))


def test_unexplained_extra_tensor_warns_by_name(toy_registered, tmp_path):
    state = dict(_toy_state(), surprise=torch.zeros(1))
    with pytest.warns(UserWarning, match="surprise"):
        build_model_from_checkpoint(_save_toy(tmp_path / "extra", state))


def test_dtype_cast_happens_on_the_host(toy_registered, tmp_path):
    model, _, _ = build_model_from_checkpoint(_save_toy(tmp_path / "bf16", _toy_state()), dtype=torch.bfloat16)
    assert model.head.weight.dtype == torch.bfloat16 and model.head.weight.device.type == "cpu"
    assert model.compute_dtype == torch.bfloat16


def test_unknown_directory_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no registered architecture recognises"):
        build_model_from_checkpoint(tmp_path)


def test_duplicate_registration_is_refused(toy_registered):
    with pytest.raises(ValueError, match="already registered"):
        registry.register_model("toy", ToyModel)


def test_account_load_without_declarations():
    report = LoadReport.build(["a", "b"], mapped=["a"], unexpected=["zzz"])
    assert report.dropped == {"zzz"} and report.missing == {"b"}
    with pytest.raises(LoadError, match=r"missing from the checkpoint: \['b'\]"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            account_load(report, object(), "x")


# ---------------------------------------------------------------------------
# Out-of-tree plugins through the ``oasr.models`` entry-point group, discovered
# by importlib.metadata from real (installed-layout) distributions.


def _install_fake_distribution(root: Path) -> None:
    (root / "oasr_toy_plugin.py").write_text(
        textwrap.dedent(
            """
            from tests.models.test_registry import ToyConverter, ToyModel
            from oasr.models.registry import register_model

            def register():
                register_model("toy_plugin", ToyModel, ToyConverter)
            """
        )
    )
    (root / "oasr_broken_plugin.py").write_text("raise ImportError('this plugin needs a missing library')\n")
    for dist, ep in (
        ("oasr_toy_plugin", "toy = oasr_toy_plugin:register"),
        ("oasr_broken_plugin", "broken = oasr_broken_plugin:register"),
    ):
        info = root / f"{dist}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(f"[oasr.models]\n{ep}\n")


def test_entry_point_plugins(tmp_path, monkeypatch):
    _install_fake_distribution(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.warns(RuntimeWarning, match=r"skipping model plugin 'broken'.*missing library"):
            registry.reload_registry()
        names = list_models()
        assert "toy_plugin" in names and "whisper" in names
        assert names.index("whisper") < names.index("toy_plugin")
        assert registry.get_model_info("toy_plugin").origin == "plugin:oasr_toy_plugin"
    finally:
        monkeypatch.undo()
        registry.reload_registry()
    assert "toy_plugin" not in list_models()


# ---------------------------------------------------------------------------
# coerce_config


@dataclass
class Inner(ModelConfig):
    kernel: tuple[int, ...] = (3,)
    act: str = "relu"


@dataclass
class Outer(ModelConfig):
    name: str = "x"
    inner: Inner = field(default_factory=Inner)
    pairs: tuple[tuple[int, int], ...] = ()
    maybe: Inner | None = None
    rate: float = 1.0
    size: int = 1

    @classmethod
    def _from_dict_overrides(cls, data: dict) -> dict:
        # a flat "inner_act" key folds into the nested config
        if "inner_act" in data:
            data.setdefault("inner", {})["act"] = data.pop("inner_act")
        return data


def test_coerce_config_restores_types():
    cfg = coerce_config(
        Outer,
        {
            "inner": {"kernel": [5, 7]},
            "pairs": [[1, 2], [3, 4]],
            "maybe": {"act": "gelu"},
            "rate": 2,
            "size": 3.0,
            "inner_act": "silu",
        },
    )
    assert cfg.inner == Inner(kernel=(5, 7), act="silu")
    assert cfg.pairs == ((1, 2), (3, 4)) and isinstance(cfg.pairs[0], tuple)
    assert cfg.maybe == Inner(act="gelu") and cfg.rate == 2.0 and isinstance(cfg.rate, float)
    assert cfg.size == 3 and isinstance(cfg.size, int)
    assert Outer.from_dict(cfg.to_dict()) == cfg


def test_coerce_config_refuses_bad_input():
    with pytest.raises(ValueError, match=r"unknown config key\(s\) \['bogus'\]"):
        coerce_config(Outer, {"bogus": 1})
    with pytest.raises(TypeError, match=r"Outer\.size: expected int"):
        coerce_config(Outer, {"size": "three"})
    with pytest.raises(TypeError, match=r"Outer\.pairs\[0\]: expected 2 items"):
        coerce_config(Outer, {"pairs": [[1, 2, 3]]})
    assert coerce_config(Outer, {"bogus": 1}, strict=False) == Outer()

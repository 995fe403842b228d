"""Tiny NeMo-saved Sortformer checkpoints, built by NeMo's own ``SortformerEncLabelModel``: the
release configs (``sortformer_diarizer_hybrid_loss_4spk-v1.yaml`` offline,
``streaming_sortformer_diarizer_4spk-v2.yaml`` streaming: a FastConformer with ``dw_striding`` 8x
subsampling and ``rel_pos`` attention, a projection to the post-LN transformer encoder's width,
the sigmoid head for 4 speakers; the streaming one with its speaker cache and FIFO) shrunk to
two layers of width 32 / 16, random weights, written by ``model.save_to`` so that the archive is
laid out as NeMo lays it out.

Imported only by tests that skip where ``nemo`` is absent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from tests.models.parakeet.nemo_reference import encoder_config, preprocessor_config, randomize

FEATURES = 32
FC_D_MODEL = 32
TF_D_MODEL = 16
NUM_SPEAKERS = 4

# The streaming sizes (encoder frames of 80 ms): small enough that a few seconds of audio fill the
# FIFO, move frames into the speaker cache and compress it several times.
STREAMING = {
    "spkcache_len": 16,  # the least NeMo allows: (1 + spkcache_sil_frames_per_spk) * num_spks
    "fifo_len": 8,
    "chunk_len": 6,
    "spkcache_update_period": 7,
    "chunk_left_context": 1,
    "chunk_right_context": 2,
    "spkcache_sil_frames_per_spk": 3,
    "sil_threshold": 0.9,  # the releases' 0.2 with a tiny model's probabilities: frames do count as silence
}


def model_config(streaming: bool, normalize: str = "per_feature") -> dict[str, Any]:
    """The ``model`` section of a release-shaped Sortformer config, shrunk."""
    pre = preprocessor_config(FEATURES)
    pre["normalize"] = normalize
    del pre["pad_to"], pre["pad_value"]  # the Sortformer releases leave them at NeMo's defaults
    enc = encoder_config(FEATURES)
    enc.update(
        d_model=FC_D_MODEL,
        stochastic_depth_drop_prob=0.0,
        stochastic_depth_mode="linear",
        stochastic_depth_start_layer=1,
    )
    modules: dict[str, Any] = {
        "_target_": "nemo.collections.asr.modules.sortformer_modules.SortformerModules",
        "num_spks": NUM_SPEAKERS,
        "dropout_rate": 0.5,
        "fc_d_model": FC_D_MODEL,
        "tf_d_model": TF_D_MODEL,
        "scores_add_rnd": 0,
        "pred_score_threshold": 0.25,
        "max_index": 99999,
        "scores_boost_latest": 0.05,
        "sil_threshold": 0.2,  # the streaming archive's is STREAMING's
        "strong_boost_rate": 0.75,
        "weak_boost_rate": 1.5,
        "min_pos_scores_rate": 0.5,
        "causal_attn_rate": 0.5,
        "causal_attn_rc": 7,
    }
    if streaming:
        modules.update(STREAMING)
    cfg: dict[str, Any] = {
        "sample_rate": 16000,
        "pil_weight": 0.5,
        "ats_weight": 0.5,
        "max_num_of_spks": NUM_SPEAKERS,
        "model_defaults": {"fc_d_model": FC_D_MODEL, "tf_d_model": TF_D_MODEL},
        "preprocessor": pre,
        "sortformer_modules": modules,
        "encoder": enc,
        "transformer_encoder": {
            "_target_": "nemo.collections.asr.modules.transformer.transformer_encoders.TransformerEncoder",
            "num_layers": 2,
            "hidden_size": TF_D_MODEL,
            "inner_size": 32,
            "num_attention_heads": 2,
            "attn_score_dropout": 0.5,
            "attn_layer_dropout": 0.5,
            "ffn_dropout": 0.5,
            "hidden_act": "relu",
            "pre_ln": False,
            "pre_ln_final_layer_norm": True,
        },
        "loss": {"_target_": "nemo.collections.asr.losses.bce_loss.BCELoss", "weight": None, "reduction": "mean"},
    }
    if streaming:
        cfg["streaming_mode"] = True
    return cfg


# Each slot's logit over the calibration audio: its mean (slot 0 most active, slot 3 least) and spread.
SLOT_MEANS = (-0.5, -1.5, -2.5, -3.5)
SLOT_SPREAD = 3.0


def calibrate(model, audio: np.ndarray) -> None:
    """Scale and shift the speaker head's last layer so that, on ``audio``, each slot's logit has
    mean ``SLOT_MEANS[s]`` and spread ``SLOT_SPREAD``: a random network's slots otherwise sit at
    near-constant probabilities, where these give speech, overlap and silence, and each slot
    turns on and off."""
    head = model.sortformer_modules.single_hidden_to_spks
    seen = []
    hook = head.register_forward_hook(lambda m, args, out: seen.append(args[0].detach()))
    x = torch.from_numpy(audio)[None]
    with torch.no_grad():
        model(audio_signal=x, audio_signal_length=torch.tensor([x.shape[1]]))  # streaming: every step's frames
        hook.remove()
        logits = torch.cat([h[0] for h in seen]) @ head.weight.T  # (frames, S) without the bias
        scale = SLOT_SPREAD / logits.std(dim=0)
        head.weight.mul_(scale[:, None])
        head.bias.copy_(torch.tensor(SLOT_MEANS) - logits.mean(dim=0) * scale)


def build(directory: Path, streaming: bool, calibration: np.ndarray, seed: int = 0, normalize: str = "per_feature"):
    """Build a tiny random ``SortformerEncLabelModel`` (its head calibrated on ``calibration``, see
    ``calibrate``), save it to ``directory`` and return (path of the .nemo archive, the NeMo model
    in eval mode)."""
    from nemo.collections.asr.models import SortformerEncLabelModel
    from omegaconf import OmegaConf

    directory.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    model = SortformerEncLabelModel(cfg=OmegaConf.create(model_config(streaming, normalize)))
    with torch.no_grad():
        randomize(model, torch.Generator().manual_seed(seed))
    model.eval()
    calibrate(model, calibration)
    name = "streaming" if streaming else "offline"
    path = directory / f"sortformer_{name}_{normalize}.nemo"
    model.save_to(str(path))
    model.eval()
    return path, model

"""A tiny Canary-Qwen built by NeMo's own ``speechlm2`` ``SALM`` (``nemo-toolkit``), offline.

The release (``nvidia/canary-qwen-2.5b``) is SALM over ``Qwen/Qwen3-1.7B`` with LoRA (r 128, alpha 256
on ``q_proj`` / ``v_proj``), perception = canary-1b-flash's FastConformer encoder (128 mel bins, 8x
``dw_striding``) + a 2-layer ``ConformerEncoder`` modality adapter (``subsampling_factor: 1``, its
front end a linear layer) + a linear projection to the LLM width, prompt format ``qwen``, audio
locator tag ``<|audioplaceholder|>``. Here, shrunk:

* the LLM: a random transformers ``Qwen3ForCausalLM`` (width 32, 2 layers, GQA, tied embeddings as
  Qwen3-1.7B ties them) saved with ``save_pretrained`` beside a trained byte-level BPE tokenizer
  with Qwen's chat tokens; ``pretrained_llm`` points at that directory;
* the perception from the release-shaped config (``pretrained_weights: False``: SALM then builds
  it from ``perception`` alone and downloads no ASR checkpoint);
* LoRA as the release sets it but r 4 (alpha 2 r), its B made non-zero so the merge is exercised.

Saved by SALM's own ``save_pretrained`` (the Hugging Face hub mixin: ``config.json`` +
``model.safetensors``) with the tokenizer at the root and the LLM's config under
``llm_backbone/``, the self-contained layout NeMo's ``SALM.from_pretrained`` resolves locally
(``parts/hf_hub.py::_inject_local_artifact_paths``).

Imported only by tests that skip where ``nemo`` / ``peft`` are absent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from tests.models.parakeet.nemo_reference import _encoder, _preprocessor

AUDIO_TAG = "<|audioplaceholder|>"
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
PROMPT = f"Transcribe the following: {AUDIO_TAG}"  # the model card's prompt
SENTENCES = (
    "Transcribe the following: and so my fellow americans ask not what your country can do for you",
    "user\nassistant\nsystem\n",
    "mister john dashwood had then leisure to consider how much there might be in his power",
    "the quick brown fox jumps over the lazy dog. The child almost hurt the small dog.",
)
FEATURES = 128  # canary-1b-flash's mel bins
LLM_WIDTH = 32
TINY_LLM = dict(
    hidden_size=LLM_WIDTH,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    max_position_embeddings=2048,
    tie_word_embeddings=True,
    rope_theta=1000000.0,
)
LORA = dict(task_type="CAUSAL_LM", r=4, lora_alpha=8, lora_dropout=0.01, target_modules=["q_proj", "v_proj"])


def train_tokenizer(vocab_size: int = 300):
    """A byte-level BPE with Qwen's chat tokens, as a transformers fast tokenizer whose
    eos is ``<|im_end|>`` and pad ``<|endoftext|>`` (Qwen3's ``tokenizer_config.json``)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(SENTENCES, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")


def _adapter() -> dict[str, Any]:
    """The release's modality adapter: a 2-layer ConformerEncoder without subsampling."""
    enc = _encoder(LLM_WIDTH)
    enc.update(feat_in=32, d_model=32, subsampling_factor=1, n_layers=2)
    return enc


def salm_config(llm_dir: Path) -> dict[str, Any]:
    """The release's SALM config, shrunk (``pretrained_weights: False``: nothing downloaded)."""
    return {
        "pretrained_llm": str(llm_dir),
        "pretrained_asr": "nvidia/canary-1b-flash",
        "pretrained_weights": False,
        "freeze_params": ["^llm\\..+$", "^embed_tokens\\..+$"],
        "prevent_freeze_params": [],
        "prompt_format": "qwen",
        "audio_locator_tag": AUDIO_TAG,
        "lora": dict(LORA),
        "perception": {
            "target": "nemo.collections.speechlm2.modules.perception.AudioPerceptionModule",
            "output_dim": LLM_WIDTH,
            "preprocessor": _preprocessor(FEATURES),
            "encoder": _encoder(FEATURES),
            "modality_adapter": _adapter(),
            "spec_augment": {
                "_target_": "nemo.collections.asr.modules.SpectrogramAugmentation",
                "freq_masks": 2,
                "time_masks": 10,
                "freq_width": 27,
                "time_width": 0.05,
            },
        },
        "optimizer": {"_target_": "torch.optim.AdamW", "lr": 5e-4},
    }


def _randomize_(model: torch.nn.Module, seed: int) -> None:
    """Every weight non-trivial (LoRA's B starts at zero, norms at identity), activations O(1)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=p.dtype)
            if "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.1 * noise)
            elif "embed_tokens" in name:
                p.copy_(noise)
            elif p.dim() > 1:
                p.copy_(noise * p[0].numel() ** -0.5)
            else:
                p.copy_(0.1 * noise)
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm1d):
                module.running_mean.copy_(torch.randn(module.running_mean.shape, generator=g) * 0.1)
                module.running_var.copy_(torch.rand(module.running_var.shape, generator=g) + 0.5)


def build(directory: Path, seed: int = 0):
    """Build the tiny SALM and save it to ``directory / "canary_qwen"``.

    Returns:
        (the saved directory, the SALM model in eval mode, float32)
    """
    from nemo.collections.speechlm2.models import SALM
    from transformers import Qwen3Config, Qwen3ForCausalLM

    llm_dir = directory / "qwen3_tiny"
    tokenizer = train_tokenizer()
    tokenizer.save_pretrained(llm_dir)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    torch.manual_seed(seed)
    config = Qwen3Config(
        **TINY_LLM,
        vocab_size=len(tokenizer) + 1,  # room for the audio locator tag SALM adds
        bos_token_id=None,
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
    )
    Qwen3ForCausalLM(config).save_pretrained(llm_dir)

    model = SALM(salm_config(llm_dir))
    _randomize_(model, seed)
    out = directory / "canary_qwen"
    model.save_pretrained(out)
    model.tokenizer.tokenizer.save_pretrained(out)
    (out / "llm_backbone").mkdir()
    (out / "llm_backbone" / "config.json").write_text(json.dumps(config.to_dict(), indent=2))
    return out, model.eval()

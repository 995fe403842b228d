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

from tests.models.parakeet.conftest import randomize_
from tests.models.parakeet.nemo_reference import SPEC_AUGMENT, encoder_config, preprocessor_config

AUDIO_TAG = "<|audioplaceholder|>"
PROMPT = f"Transcribe the following: {AUDIO_TAG}"  # the model card's prompt
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


def train_tokenizer():
    """Qwen3-ASR's tiny byte-level BPE (Qwen's chat tokens among its special tokens) as a
    transformers fast tokenizer whose eos is ``<|im_end|>`` and pad ``<|endoftext|>``
    (Qwen3's ``tokenizer_config.json``)."""
    from transformers import PreTrainedTokenizerFast

    from tests.models.qwen3_asr.conftest import train_tokenizer as train_qwen_bpe

    return PreTrainedTokenizerFast(tokenizer_object=train_qwen_bpe(), eos_token="<|im_end|>", pad_token="<|endoftext|>")


def _adapter() -> dict[str, Any]:
    """The release's modality adapter: a 2-layer ConformerEncoder without subsampling."""
    enc = encoder_config(LLM_WIDTH)
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
            "preprocessor": preprocessor_config(FEATURES),
            "encoder": encoder_config(FEATURES),
            "modality_adapter": _adapter(),
            "spec_augment": dict(SPEC_AUGMENT),
        },
        "optimizer": {"_target_": "torch.optim.AdamW", "lr": 5e-4},
    }


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
    torch.manual_seed(seed)
    config = Qwen3Config(
        **TINY_LLM,
        vocab_size=len(tokenizer) + 1,  # room for the audio locator tag SALM adds
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    Qwen3ForCausalLM(config).save_pretrained(llm_dir)

    model = SALM(salm_config(llm_dir))
    randomize_(model, seed)  # LoRA's B too (PEFT starts it at zero): the merge is exercised
    out = directory / "canary_qwen"
    model.save_pretrained(out)
    model.tokenizer.tokenizer.save_pretrained(out)
    (out / "llm_backbone").mkdir()
    (out / "llm_backbone" / "config.json").write_text(json.dumps(config.to_dict(), indent=2))
    return out, model.eval()


def salm_greedy(model, wave, max_new_tokens: int) -> list[int]:
    """``SALM.generate``'s greedy tokens for one clip (float32 samples) with the model card's
    prompt, before the first eos."""
    audio = torch.from_numpy(wave)[None]
    with torch.no_grad():
        row = model.generate(
            prompts=[[{"role": "user", "content": PROMPT}]],
            audios=audio,
            audio_lens=torch.tensor([audio.shape[1]]),
            max_new_tokens=max_new_tokens,
        )[0].tolist()
    return row[: row.index(model.text_eos_id)] if model.text_eos_id in row else row

"""Builders shared by the Granite Speech parity tests.

The reference is a tiny random ``transformers.GraniteSpeechForConditionalGeneration`` with a
LoRA adapter on the LM's q / v projections (added through transformers' PEFT integration,
its B matrices redrawn so it changes the outputs), saved by ``save_pretrained`` as released:
``adapter_config.json`` + ``adapter_model.safetensors`` beside the base weights. The tokenizer
is a tiny byte-level BPE trained here with Granite's special tokens; the chat template is
Granite 3.3's shape (a default system turn naming today's date). The audio geometry is the
real one (80 mel bins stacked in pairs, 200-frame attention blocks, 15-frame windows of 3
queries); only the widths are tiny.
"""

from __future__ import annotations

from pathlib import Path

import torch

SPECIAL_TOKENS = ("<|end_of_text|>", "<|start_of_role|>", "<|end_of_role|>", "<|audio|>")
CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] %}"
    "{%- set loop_messages = messages[1:] %}{%- else %}"
    "{%- set system_message = \"Knowledge Cutoff Date: April 2024.\\nToday's Date: \" + strftime_now('%B %d, %Y') + "
    '".\\nYou are Granite, developed by IBM. You are a helpful AI assistant." %}'
    "{%- set loop_messages = messages %}{%- endif %}"
    "{{- '<|start_of_role|>system<|end_of_role|>' + system_message + '<|end_of_text|>\\n' }}"
    "{%- for message in loop_messages %}"
    "{{- '<|start_of_role|>' + message['role'] + '<|end_of_role|>' + message['content'] + '<|end_of_text|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_of_role|>assistant<|end_of_role|>' }}{%- endif %}"
)
ENCODER = {
    "input_dim": 160,
    "num_layers": 2,
    "hidden_dim": 16,
    "feedforward_mult": 2,
    "num_heads": 2,
    "output_dim": 6,
    "context_size": 200,
    "max_pos_emb": 512,
    "conv_kernel_size": 15,
    "conv_expansion_factor": 2,
}
PROJECTOR = {
    "model_type": "blip_2_qformer",
    "hidden_size": 16,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 32,
    "encoder_hidden_size": 16,
    "cross_attention_frequency": 1,
    "layer_norm_eps": 1e-12,
}
TEXT = {
    "model_type": "granite",
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": True,
    # Granite's four scalings, away from 1 so each is exercised.
    "embedding_multiplier": 2.0,
    "attention_multiplier": 0.3,
    "residual_multiplier": 0.5,
    "logits_scaling": 3.0,
}
LORA = {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]}
INIT_STD = 0.2
SEED = 1234

CORPUS = (
    "And so my fellow Americans, ask not what your country can do for you.",
    "The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background.",
    "can you transcribe the speech into a written format? translate the speech to French",
    "Knowledge Cutoff Date: April 2024. Today's Date: You are Granite, developed by IBM.",
    "system user assistant English German Spanish Portuguese",
    "Bonjour à tous, ceci est un essai de reconnaissance vocale.",
)


def build_tokenizer():
    """The tiny byte-level BPE with Granite's special tokens (the Qwen2-Audio tests' builder)."""
    from tests.models.speech_llm._reference import build_tokenizer as build

    return build(CORPUS, SPECIAL_TOKENS)


def processor(tok):
    """transformers' Granite Speech processor over the tiny tokenizer (left padding)."""
    from transformers import GraniteSpeechFeatureExtractor, GraniteSpeechProcessor, PreTrainedTokenizerFast

    ht = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|end_of_text|>", pad_token="<|end_of_text|>")
    ht.padding_side = "left"
    ht.chat_template = CHAT_TEMPLATE
    return GraniteSpeechProcessor(GraniteSpeechFeatureExtractor(), ht, chat_template=CHAT_TEMPLATE)


def tiny_hf_model(tok, shape: dict | None = None):
    """The tiny random transformers model (float32, eval), seeded (its LoRA not yet added).

    Args:
        shape: overrides of ``{"encoder": ..., "projector": ..., "text": ...}`` (a larger shape
            for benchmarks).
    """
    shape = shape or {}
    from transformers import GenerationConfig, GraniteSpeechConfig, GraniteSpeechForConditionalGeneration

    ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    config = GraniteSpeechConfig(
        encoder_config={**ENCODER, **shape.get("encoder", {})},
        projector_config={**PROJECTOR, **shape.get("projector", {})},
        text_config={**TEXT, "vocab_size": tok.get_vocab_size(), **shape.get("text", {})},
        audio_token_index=ids["<|audio|>"],
        window_size=15,
        downsample_rate=5,
        has_lora_adapter=False,  # the adapter is added by ``add_lora``
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        model = GraniteSpeechForConditionalGeneration(config).eval()
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "norm" in name.lower() and name.endswith("weight"):
                    p.copy_(1.0 + 0.1 * torch.randn_like(p))
                else:
                    p.normal_(0.0, INIT_STD)
            for name, b in model.named_buffers():
                if name.endswith("running_mean"):
                    b.normal_(0.0, 0.1)
                elif name.endswith("running_var"):
                    b.uniform_(0.5, 1.5)
    model.generation_config = GenerationConfig(eos_token_id=ids["<|end_of_text|>"], pad_token_id=ids["<|end_of_text|>"])
    return model


def add_lora(model, out_dir: Path | None = None):
    """Inject the LoRA into ``model`` with PEFT (as transformers' ``load_adapter`` does), its
    weights seeded; with ``out_dir``, save it there in PEFT's layout (``adapter_config.json`` +
    ``adapter_model.safetensors``, keys under ``base_model.model.``, as ``PeftModel`` writes)."""
    from peft import LoraConfig, get_peft_model_state_dict, inject_adapter_in_model
    from safetensors.torch import save_file

    config = LoraConfig(**LORA, base_model_name_or_path=str(out_dir) if out_dir else None)
    inject_adapter_in_model(config, model)
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(SEED + 1)
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.normal_(0.0, INIT_STD)
    if out_dir is not None:
        state = get_peft_model_state_dict(model)
        save_file(
            {f"base_model.model.{k}": v.contiguous() for k, v in state.items()}, out_dir / "adapter_model.safetensors"
        )
        config.save_pretrained(out_dir)
    return model


def load_reference(out_dir: Path):
    """transformers' model of ``out_dir``: ``from_pretrained`` finds ``adapter_config.json``
    beside ``config.json``, loads the base, then the adapter through ``load_adapter`` (PEFT's
    ``inject_adapter_in_model`` + the adapter's weights); ``generate`` enables it for audio."""
    from transformers import GraniteSpeechForConditionalGeneration

    model = GraniteSpeechForConditionalGeneration.from_pretrained(out_dir).eval()
    if (out_dir / "adapter_config.json").is_file():
        assert model._hf_peft_config_loaded, "transformers did not load the LoRA adapter"
    return model


def build_tiny_granite_speech(out_dir: Path, *, lora: bool = True, shape: dict | None = None) -> Path:
    """Save the tiny reference (base, LoRA adapter, generation config) and its processor
    (``shape``: see ``tiny_hf_model``)."""
    tok = build_tokenizer()
    model = tiny_hf_model(tok, shape)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    if lora:
        add_lora(model, out_dir)
    processor(tok).save_pretrained(out_dir)
    return out_dir


def chat_prompt(proc, instruction: str = "can you transcribe the speech into a written format?", system=None) -> str:
    chat = ([{"role": "system", "content": system}] if system is not None else []) + [
        {"role": "user", "content": "<|audio|>" + instruction}
    ]
    return proc.tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)


def parity(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """(cosine similarity, max |a - b|) of the flattened tensors, in float64."""
    x, y = a.detach().reshape(-1).double(), b.detach().reshape(-1).double()
    if x.shape != y.shape:
        raise AssertionError(f"shape mismatch: {tuple(a.shape)} vs {tuple(b.shape)}")
    return float(torch.nn.functional.cosine_similarity(x, y, dim=0)), float((x - y).abs().max())


COS_MIN = 0.99999
MAX_ABS = 1e-6  # float64 on both sides


def assert_parity(a: torch.Tensor, b: torch.Tensor, what: str, max_abs: float = MAX_ABS) -> None:
    cos, mad = parity(a, b)
    assert cos >= COS_MIN and mad <= max_abs, f"{what}: cosine {cos:.8f} (>= {COS_MIN}), max-abs {mad:.3e}"


def generate_with_adapter(model, **inputs):
    """transformers' ``generate`` of an audio prompt: ``GraniteSpeechForConditionalGeneration.
    generate`` enables the adapter (``enable_adapters``, which insists on peft >= 0.22, newer than
    this environment can install) then runs ``GenerationMixin.generate``; the adapter is already
    enabled after loading (checked here), so the latter is called directly."""
    from peft.tuners.lora import LoraLayer
    from transformers import GenerationMixin

    layers = [m for m in model.modules() if isinstance(m, LoraLayer)]
    assert layers and not any(m.disable_adapters for m in layers), "the LoRA adapter is not active"
    return GenerationMixin.generate(model, **inputs)

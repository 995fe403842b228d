"""Random checkpoints of issue 32's generate-decoded families at benchmark shapes, saved by
transformers' own classes with the tests' tokenizers and in the release layouts, for
``oasr bench --peer transformers --random-weights`` (no model hub here; the speed of a greedy
decode depends on the shapes, not the weights).

* ``moonshine-streaming``: ``MoonshineStreamingConfig``'s defaults (transformers' docs name them
  moonshine_streaming-tiny's: 320 x 6 encoder and decoder, 32,768 pieces), about 34M parameters;
* ``voxtral``: a scaled-down Voxtral (Whisper-style tower 384 x 4, Llama LM 512 x 4 with 2 K/V
  heads, the release's 131,072-piece head), about 96M;
* ``voxtral-realtime``: a scaled-down Voxtral Realtime (causal tower 384 x 6 with a 750-frame
  window, LM 768 x 6), the tests' 340-piece ``tekken.json`` (mistral-common decodes no id past
  it, so the head stays that small), about 50M;
* ``granite-speech``: a scaled-down Granite Speech (conformer 256 x 4, Q-Former 256 x 2, Granite
  LM 1024 x 8 with 4 K/V heads and a LoRA on q / v), about 110M.

A random decoder rarely writes its end id, so each request runs to its budget on both sides:
Voxtral and Granite Speech declare ``max_new_tokens`` (``--max-new-tokens``, 64) in their
``generation_config.json``, which transformers' ``generate`` and oasr both read (with none,
transformers stops at 20 new tokens and oasr at 64 + 25 per second of audio); Moonshine
Streaming follows its card's 6.5 positions per second and Voxtral Realtime its audio's length,
on both sides. Moonshine itself: ``benchmarks/moonshine_checkpoint.py``.

    python benchmarks/speech_llm_checkpoints.py voxtral /tmp/bench32/voxtral
    oasr bench --model /tmp/bench32/voxtral --peer transformers --random-weights --workload corpus
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

GRANITE = {
    "encoder": {"num_layers": 4, "hidden_dim": 256, "num_heads": 4, "output_dim": 42, "feedforward_mult": 4},
    "projector": {"hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 1024, "encoder_hidden_size": 256},
    "text": {
        "hidden_size": 1024,
        "intermediate_size": 4096,
        "num_hidden_layers": 8,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
    },
}
VOXTRAL_AUDIO = {"hidden_size": 384, "num_hidden_layers": 4, "num_attention_heads": 6, "intermediate_size": 1536}
VOXTRAL_TEXT = {
    "vocab_size": 131072,
    "hidden_size": 512,
    "intermediate_size": 1536,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "max_position_embeddings": 32768,
}
REALTIME_AUDIO = {
    "hidden_size": 384,
    "intermediate_size": 1536,
    "num_hidden_layers": 6,
    "num_attention_heads": 6,
    "head_dim": 64,
    "sliding_window": 750,
}
REALTIME_TEXT = {
    "hidden_size": 768,
    "intermediate_size": 2048,
    "num_hidden_layers": 6,
    "num_attention_heads": 12,
    "num_key_value_heads": 4,
    "head_dim": 64,
}


def declare_budget(directory: Path, max_new_tokens: int) -> None:
    """Write ``max_new_tokens`` into the checkpoint's ``generation_config.json``."""
    path = directory / "generation_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps({**config, "max_new_tokens": max_new_tokens}, indent=2), encoding="utf-8")


def write_voxtral(out: Path) -> None:
    from transformers import GenerationConfig, VoxtralConfig, VoxtralForConditionalGeneration

    from tests.models.voxtral import _reference as ref

    tok = ref.build_tokenizer()
    config = VoxtralConfig(
        audio_config={**VOXTRAL_AUDIO, "num_mel_bins": 128, "max_source_positions": 1500},
        text_config={**ref.TEXT, **VOXTRAL_TEXT},
        audio_token_id=24,
    )
    torch.manual_seed(0)
    model = VoxtralForConditionalGeneration(config).eval()
    model.generation_config = GenerationConfig(bos_token_id=1, eos_token_id=2, pad_token_id=11)
    model.save_pretrained(out)
    tok.save(str(out / "tokenizer.json"))
    ref.feature_extractor().save_pretrained(out)


def write(family: str, out: Path, max_new_tokens: int) -> int:
    """Write ``family``'s benchmark checkpoint into ``out``; returns its parameter count."""
    out.mkdir(parents=True, exist_ok=True)
    if family == "moonshine-streaming":
        from tests.models.moonshine_streaming.conftest import save_checkpoint

        model = save_checkpoint(out, shape={"num_key_value_heads": 8}).model  # the defaults; a release carries it
    elif family == "voxtral-realtime":
        from tests.models.voxtral_realtime.conftest import TINY_AUDIO, TINY_TEXT, save_checkpoint

        model, _ = save_checkpoint(out, {**TINY_AUDIO, **REALTIME_AUDIO}, {**TINY_TEXT, **REALTIME_TEXT})
    elif family == "voxtral":
        write_voxtral(out)
        declare_budget(out, max_new_tokens)
        from transformers import VoxtralForConditionalGeneration as model_class

        model = model_class.from_pretrained(out)
    else:
        from tests.models.granite_speech import _reference as ref

        ref.build_tiny_granite_speech(out, shape=GRANITE)
        declare_budget(out, max_new_tokens)
        model = ref.load_reference(out)
    return sum(p.numel() for p in model.parameters())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("family", choices=("moonshine-streaming", "voxtral", "voxtral-realtime", "granite-speech"))
    p.add_argument("out", type=Path, help="directory to write (created)")
    p.add_argument("--max-new-tokens", type=int, default=64, help="Voxtral's and Granite Speech's declared budget")
    args = p.parse_args(argv)
    n = write(args.family, args.out, args.max_new_tokens)
    print(f"{args.out}: {n / 1e6:.1f}M parameters")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

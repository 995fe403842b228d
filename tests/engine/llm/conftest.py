"""A tiny in-test speech-LLM for the ``llm`` strategy tests.

The model is a ``CausalLm`` (tiny random Qwen3-style config) fed by a trivial audio
encoder (four log-mel frames stacked into one audio state by a linear layer), with a
Qwen3-ASR-style chat prompt, language table and output parsing. Its tokenizer is a
byte-level BPE trained here with Hugging Face ``tokenizers`` on a small corpus, with
the family's special tokens; with so few merges, multi-byte characters (``é``, CJK)
are split across tokens, which is what the UTF-8 streaming tests need.

``ScriptedLm`` runs the real LM (pool writes, select / merge) but forces its output to
a fixed token script, so a test knows exactly which text is generated.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oasr.layers import Linear
from oasr.models.base import BaseAsrModel, BaseEncoder, DecodeType, DecodingSpec, FeatureSpec, LoadReport
from oasr.models.decoders.causal_lm import CausalLm, CausalLmConfig
from oasr.models.loaders import LoadedModel
from oasr.tokenizers import Control, HFTokenizer

tokenizers = pytest.importorskip("tokenizers")

SPECIALS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|audio_start|>",
    "<|audio_end|>",
    "<|audio_pad|>",
    "<asr_text>",
)
LANGUAGES = {"en": "English", "zh": "Chinese", "fr": "French"}
N_MELS = 16
STACK = 4  # mel frames per audio state
SR = 16000


def train_tokenizer() -> HFTokenizer:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=340,
        special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = ["system user assistant language English<asr_text>hello world, this is a test of the tiny model."] * 20
    corpus += ["language French<asr_text>bonjour le monde", "language Chinese<asr_text>"] * 5
    tok.train_from_iterator(corpus, trainer)
    return HFTokenizer(tok)


class StackedFrames(BaseEncoder):
    """(B, T, n_mels) -> (B, T // 4, D): four frames per state through one linear layer."""

    def __init__(self, n_mels: int, d: int) -> None:
        super().__init__()
        self.proj = Linear(n_mels * STACK, d)

    @property
    def subsampling_rate(self) -> int:
        return STACK

    @property
    def output_size(self) -> int:
        return self.proj.out_features

    def forward(self, feats: torch.Tensor, feat_lens: torch.Tensor | None = None):
        b, t, f = feats.shape
        n = t // STACK
        x = self.proj(feats[:, : n * STACK].reshape(b, n, STACK * f))
        lens = torch.clamp(feat_lens // STACK, min=1) if feat_lens is not None else torch.full((b,), n)
        return x, lens


class TinySpeechLlm(BaseAsrModel):
    """A Qwen3-ASR-shaped speech-LLM small enough for unit tests."""

    architecture = "tiny_speech_llm"
    capabilities = frozenset({DecodeType.LLM})
    default_decode_type = DecodeType.LLM

    def __init__(self, tokenizer: HFTokenizer, decoder: CausalLm) -> None:
        super().__init__(decoder.cfg)
        self.tok = tokenizer
        self.decoder = decoder
        self.encoder = StackedFrames(N_MELS, decoder.cfg.hidden_size)
        self.audio_pad_id = tokenizer.token_to_id("<|audio_pad|>")

    def encode_offline(self, feats, feat_lens):
        states, n = self.encoder(feats, feat_lens)
        return states, n

    def prompt_ids(self, n_audio: int, *, language: str | None, context: str | None, task: str) -> list[int]:
        parts = [
            Control("<|im_start|>system\n"),
            context or "",
            Control(
                "<|im_end|>\n<|im_start|>user\n<|audio_start|>"
                + "<|audio_pad|>" * n_audio
                + "<|audio_end|><|im_end|>\n<|im_start|>assistant\n"
            ),
        ]
        if language:
            parts.append(Control(f"language {LANGUAGES[language]}<asr_text>"))
        return self.tok.encode_prompt(parts)

    def embed_prompt(self, ids, valid, audio_states, n_audio):
        x = self.decoder.embed(ids)
        slots = (ids == self.audio_pad_id) & valid  # (B, T), n_audio of them per row
        take = torch.arange(audio_states.shape[1], device=ids.device)[None, :] < n_audio[:, None]
        x[slots] = audio_states[take].to(x.dtype)
        return x

    @property
    def languages(self) -> tuple[str, ...]:
        return tuple(LANGUAGES)

    def parse_output(self, text: str) -> tuple[str | None, str]:
        if "<asr_text>" in text:
            pre, _, post = text.rpartition("<asr_text>")
            name = pre.removeprefix("language ").strip()
            return next((code for code, n in LANGUAGES.items() if n == name), None), post
        if text.startswith("language None"):
            return None, ""
        return None, text

    @property
    def stop_ids(self) -> tuple[int, ...]:
        return (self.tok.token_to_id("<|im_end|>"), self.tok.token_to_id("<|endoftext|>"))


class ScriptedLm(CausalLm):
    """The real LM whose logits are overridden to emit ``script`` (then the stop id)."""

    def __init__(self, cfg: CausalLmConfig, script: list[int]) -> None:
        super().__init__(cfg)
        self.script = list(script)

    def _force(self, logits: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        out = torch.full_like(logits, -30.0)
        targets = torch.tensor([self.script[min(int(p), len(self.script) - 1)] for p in pos], device=logits.device)
        out[torch.arange(out.shape[0]), targets] = 30.0
        return out

    def prefill(self, pool, inputs_embeds, valid, **kwargs):
        logits, state = super().prefill(pool, inputs_embeds, valid, **kwargs)
        state.extras["gen"] = torch.zeros(logits.shape[0], dtype=torch.long, device=logits.device)
        return self._force(logits, state.extras["gen"]), state

    def step(self, state, tokens):
        logits = super().step(state, tokens)
        state.extras["gen"] = state.extras["gen"] + 1
        return self._force(logits, state.extras["gen"])


def lm_config(vocab_size: int, context: int = 512) -> CausalLmConfig:
    return CausalLmConfig.from_hf(
        {
            "model_type": "qwen3",
            "vocab_size": vocab_size,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 8,
            "max_position_embeddings": context,
            "rope_theta": 10000.0,
            "tie_word_embeddings": True,
        }
    )


def make_loaded(
    tokenizer: HFTokenizer,
    *,
    script: list[int] | None = None,
    dtype: torch.dtype = torch.float64,
    decoding: dict | None = None,
    seed: int = 0,
    context: int = 512,
) -> LoadedModel:
    torch.manual_seed(seed)
    cfg = lm_config(tokenizer.vocab_size, context)
    decoder = ScriptedLm(cfg, script) if script is not None else CausalLm(cfg)
    with torch.no_grad():  # larger weights make the random LM's choices less flat
        for p in decoder.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.5)
    model = TinySpeechLlm(tokenizer, decoder).to(dtype).eval()
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        tokenizer_spec=None,
        feature_spec=FeatureSpec(kind="whisper_mel", sampling_rate=SR, params={"n_mels": N_MELS}),
        decoding_spec=DecodingSpec(DecodeType.LLM, params=dict(decoding or {})),
        report=LoadReport.build([], []),
        source="",
        format="test",
        name="tiny-llm",
    )


def clip(seconds: float, seed: int) -> np.ndarray:
    """Noise with a few tones, ``seconds`` long at 16 kHz."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * SR)) / SR
    tones = sum(np.sin(2 * np.pi * f * t) for f in rng.uniform(200, 3000, 3))
    return (0.1 * tones + 0.05 * rng.standard_normal(t.shape)).astype(np.float32)


@pytest.fixture(scope="session")
def tokenizer() -> HFTokenizer:
    return train_tokenizer()


@pytest.fixture(scope="session")
def loaded(tokenizer) -> LoadedModel:
    return make_loaded(tokenizer)


@pytest.fixture(scope="session")
def clips() -> list[np.ndarray]:
    return [clip(s, i) for i, s in enumerate((0.6, 1.3, 0.9, 2.0, 0.4))]

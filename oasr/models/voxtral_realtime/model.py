"""Voxtral Realtime (Mistral, ``VoxtralRealtimeForConditionalGeneration``): a causal
Whisper-style audio tower, a projector and a Mistral LM that writes one token per 80 ms of audio.

The life of a clip:

* the log-mel (128 bins, hop 160, a fixed clamp floor ``1.5 - 8`` instead of Whisper's
  per-clip maximum) of the audio padded as ``mistral_common`` pads a transcription request:
  ``n_left_pad`` audio tokens of silence before, and after it silence up to a whole token plus
  ``n_delay + 1 + 10`` tokens (so the model can finish its last word);
* the tower: two causal convolutions (k3 s1, k3 s2; left-padded, so a frame sees only the past),
  GELU, then pre-norm transformer layers with rotary positions and causal attention within a
  sliding window of ``sliding_window`` frames, and a final RMSNorm;
* the projector: every ``downsample_factor`` (4) tower frames, concatenated, through
  ``linear_1 -> GELU -> linear_2``: one LM-width vector per audio token (8 mel frames, 80 ms);
* the LM: at position ``p`` its input is the embedding of the token at ``p`` *plus* the audio
  vector ``p``. The prompt is ``<s>`` and ``n_left_pad + n_delay`` ``[STREAMING_PAD]``; each
  step feeds the token just chosen with the next audio vector, so generation runs in lockstep
  with the audio and ends with it (or at ``</s>``). The text is the ids without the special
  tokens (``[STREAMING_PAD]``, ``[STREAMING_WORD]``). Each LM layer scales its post-attention
  norm by ``1 + ada(t)``, ``t`` the sinusoidal embedding of the delay; the delay is fixed per
  checkpoint, so the scale is folded into the norm's weight once at load and the LM is the shared
  ``CausalLm`` (Mistral: no biases, tied embeddings).

Streaming (``open_live``) runs the same computation chunk by chunk, as transformers'
streaming ``generate`` does: the conv tails and the tower's windowed K/V are the encoder state,
the LM's K/V the decoder state, and a token is chosen whenever an audio vector is ready.

Module names follow the transformers layout under ``encoder.`` (its ``audio_tower``),
``multi_modal_projector.`` and ``decoder.`` (its ``language_model``); ``convert.py`` maps them.
Reads top to bottom: config, the tower, the LM, the model, its live session (the mel is ``frontend.py``'s).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from oasr.layers import Conv1d, Linear, NeoxRotaryEmbedding, RMSNorm, attention
from oasr.models.base import BaseAsrModel, BaseEncoder
from oasr.models.configs import ModelConfig
from oasr.models.decoders.causal_lm import CausalLm, CausalLmConfig, PromptTokenizerMixin
from oasr.models.decoders.kv_pool import DecoderState
from oasr.models.voxtral_realtime.frontend import VoxtralRealtimeMelFrontend, log_mel

OFFLINE_BUFFER_TOKENS = 10  # mistral_common's OFFLINE_STREAMING_BUFFER_TOKENS: room for a last long word


# ---------------------------------------------------------------------------
# Config


@dataclass
class AudioTowerConfig(ModelConfig):
    hidden_size: int = 1280
    intermediate_size: int = 5120
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    head_dim: int = 64
    num_mel_bins: int = 128
    rms_norm_eps: float = 1e-5
    rope_theta: float = 1000000.0
    sliding_window: int = 750


@dataclass
class StreamingAudioConfig(ModelConfig):
    """The tokenizer's audio section (``tekken.json``): how audio maps onto LM positions."""

    sampling_rate: int = 16000
    frame_rate: float = 12.5
    hop_length: int = 160
    window_size: int = 400
    transcription_delay_ms: float = 480.0
    n_left_pad_tokens: int = 32

    @property
    def samples_per_token(self) -> int:
        return int(self.sampling_rate // self.frame_rate)

    @property
    def mel_frames_per_token(self) -> int:
        return self.samples_per_token // self.hop_length

    def _tokens_of(self, n_samples: int) -> int:
        frames = (
            math.ceil(n_samples / self.hop_length - 1) if n_samples % self.hop_length else n_samples // self.hop_length
        )
        return math.ceil(frames / self.mel_frames_per_token)

    @property
    def n_delay_tokens(self) -> int:
        return self._tokens_of(int(self.transcription_delay_ms / 1000.0 * self.sampling_rate))

    def frontend_params(self, n_mels: int) -> dict[str, int]:
        """The ``voxtral_realtime_mel`` front end's parameters: mistral_common's offline padding
        (``n_left_pad`` tokens before; a whole token, then ``n_delay + 1 + 10`` tokens after)."""
        return {
            "n_mels": n_mels,
            "n_fft": self.window_size,
            "hop_length": self.hop_length,
            "token_samples": self.samples_per_token,
            "left_pad_tokens": self.n_left_pad_tokens,
            "right_pad_tokens": self.n_delay_tokens + 1 + OFFLINE_BUFFER_TOKENS,
        }


# transformers' VoxtralRealtimeEncoderConfig defaults and VoxtralRealtimeConfig's text sub-config
# defaults (the release's geometry), for fields a config.json omits.
_HF_AUDIO_DEFAULTS: dict[str, Any] = {
    "hidden_size": 1280,
    "intermediate_size": 5120,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "head_dim": 64,
    "num_mel_bins": 128,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "sliding_window": 750,
    "hidden_act": "silu",
}
_HF_TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 131072,
    "hidden_size": 3072,
    "intermediate_size": 9216,
    "num_hidden_layers": 26,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
    "rope_theta": 1000000.0,
    "sliding_window": 8192,
    "hidden_act": "silu",
}


@dataclass
class VoxtralRealtimeConfig(ModelConfig):
    """The tower, the LM, the audio geometry and the prompt's token ids."""

    audio: AudioTowerConfig = field(default_factory=AudioTowerConfig)
    text: CausalLmConfig = field(default_factory=CausalLmConfig)
    stream: StreamingAudioConfig = field(default_factory=StreamingAudioConfig)
    downsample_factor: int = 4
    bos_token_id: int = 1
    eos_token_id: int = 2
    streaming_pad_id: int = 32
    tokenizer_path: str = ""

    @classmethod
    def from_hf(cls, cfg: dict[str, Any], tekken: dict[str, Any], tokenizer_path: str = "") -> VoxtralRealtimeConfig:
        """Read ``config.json`` and ``tekken.json`` (its audio section and special tokens).

        Raises:
            ValueError: another model type, activation or RoPE, or a tokenizer without a
                streaming audio section.
        """
        path = tokenizer_path or "the checkpoint"
        if cfg.get("model_type") != "voxtral_realtime":
            raise ValueError(f"not a voxtral_realtime config: model_type={cfg.get('model_type')!r}")
        # An omitted field means transformers' default, as its config classes fill it.
        a = {**_HF_AUDIO_DEFAULTS, **{k: v for k, v in (cfg.get("audio_config") or {}).items() if v is not None}}
        t = {**_HF_TEXT_DEFAULTS, **{k: v for k, v in (cfg.get("text_config") or {}).items() if v is not None}}
        if cfg.get("projector_hidden_act", "gelu") != "gelu" or {a["hidden_act"], t["hidden_act"]} != {"silu"}:
            raise ValueError("only the released activations (gelu projector, silu MLPs) are implemented")

        def theta(sub: dict) -> float:
            rope = sub.get("rope_parameters") or {}
            if rope.get("rope_type", "default") != "default":
                raise ValueError(f"RoPE type {rope.get('rope_type')!r} is not supported")
            return float(rope.get("rope_theta", sub["rope_theta"]))

        audio = AudioTowerConfig(
            hidden_size=a["hidden_size"],
            intermediate_size=a["intermediate_size"],
            num_hidden_layers=a["num_hidden_layers"],
            num_attention_heads=a["num_attention_heads"],
            head_dim=a.get("head_dim") or a["hidden_size"] // a["num_attention_heads"],
            num_mel_bins=a["num_mel_bins"],
            rms_norm_eps=a["rms_norm_eps"],
            rope_theta=theta(a),
            sliding_window=a["sliding_window"],
        )
        # The LM attends within a sliding window: positions past it would need the window's
        # mask, so the context stops there (8192 tokens = 11 minutes of audio in the release).
        context = min(int(t["max_position_embeddings"]), int(t.get("sliding_window") or 1 << 62))
        text = CausalLmConfig(
            vocab_size=t["vocab_size"],
            hidden_size=t["hidden_size"],
            intermediate_size=t["intermediate_size"],
            num_hidden_layers=t["num_hidden_layers"],
            num_attention_heads=t["num_attention_heads"],
            num_key_value_heads=t["num_key_value_heads"] or t["num_attention_heads"],
            head_dim=t.get("head_dim"),
            rms_norm_eps=t["rms_norm_eps"],
            rope_theta=theta(t),
            max_position_embeddings=context,
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", True)),
            attention_bias=False,
            o_proj_bias=False,
            qk_norm=False,
        )
        au = tekken.get("audio")
        if not au or au.get("transcription_format") != "streaming":
            raise ValueError(f"{path}: tekken.json has no streaming audio section")
        enc = au["audio_encoding_config"]
        stream = StreamingAudioConfig(
            sampling_rate=au["sampling_rate"],
            frame_rate=au["frame_rate"],
            hop_length=enc["hop_length"],
            window_size=enc["window_size"],
            transcription_delay_ms=au["transcription_delay_ms"],
            n_left_pad_tokens=au["streaming_n_left_pad_tokens"],
        )
        if stream.mel_frames_per_token != cfg.get("audio_length_per_tok", 8):
            raise ValueError("tekken.json's frame rate disagrees with config.json's audio_length_per_tok")
        special = {s["token_str"]: s["rank"] for s in tekken["special_tokens"]}
        return cls(
            audio=audio,
            text=text,
            stream=stream,
            downsample_factor=cfg.get("downsample_factor", 4),
            bos_token_id=special["<s>"],
            eos_token_id=special["</s>"],
            streaming_pad_id=special["[STREAMING_PAD]"],
            tokenizer_path=tokenizer_path,
        )


# ---------------------------------------------------------------------------
# The audio tower


class CausalConv(nn.Module):
    """A convolution left-padded by ``kernel - stride`` frames, so output ``i`` sees inputs up to
    ``stride * i + stride - 1`` only (the parameters are ``conv.*``'s ``nn.Conv1d`` names)."""

    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int = 1) -> None:
        super().__init__()
        self.conv = Conv1d(c_in, c_out, kernel, stride=stride)
        self.left_pad = kernel - stride

    def forward(self, x: torch.Tensor, tail: torch.Tensor | None = None) -> torch.Tensor:
        """(B, C, T) -> (B, C', T'); ``tail``: the previous chunk's last ``left_pad`` inputs (zeros at the start)."""
        x = torch.cat([tail, x], -1) if tail is not None else nn.functional.pad(x, (self.left_pad, 0))
        return self.conv(x)


class TowerAttention(nn.Module):
    """Rotary self-attention; q / v / o biased, k not (Whisper's convention)."""

    def __init__(self, cfg: AudioTowerConfig) -> None:
        super().__init__()
        d, h, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim
        self.n_head, self.head_dim = h, hd
        self.q_proj = Linear(d, h * hd)
        self.k_proj = Linear(d, h * hd, bias=False)
        self.v_proj = Linear(d, h * hd)
        self.o_proj = Linear(h * hd, d)

    def project(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, ...]:
        b, t, _ = x.shape
        q, k, v = (
            p(x).view(b, t, self.n_head, self.head_dim).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj)
        )
        return NeoxRotaryEmbedding.apply_rotary(q, cos, sin), NeoxRotaryEmbedding.apply_rotary(k, cos, sin), v


class TowerMlp(nn.Module):
    def __init__(self, cfg: AudioTowerConfig) -> None:
        super().__init__()
        self.gate_proj = Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = Linear(cfg.intermediate_size, cfg.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class TowerLayer(nn.Module):
    def __init__(self, cfg: AudioTowerConfig) -> None:
        super().__init__()
        self.self_attn = TowerAttention(cfg)
        self.self_attn_layer_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.final_layer_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = TowerMlp(cfg)


class Embedder(nn.Module):
    def __init__(self, cfg: AudioTowerConfig) -> None:
        super().__init__()
        self.conv1 = CausalConv(cfg.num_mel_bins, cfg.hidden_size, 3)
        self.conv2 = CausalConv(cfg.hidden_size, cfg.hidden_size, 3, stride=2)


@dataclass
class TowerState:
    """A stream's tower state: the convolutions' input tails and each layer's last keys / values."""

    tail1: torch.Tensor  # (B, n_mels, 2) mel frames before the next chunk
    tail2: torch.Tensor  # (B, D, 1) conv1 outputs before the next chunk
    keys: list[torch.Tensor]  # per layer (B, H, <= window - 1, Dh), rotated
    values: list[torch.Tensor]
    position: int = 0  # tower frames seen


class AudioTower(BaseEncoder):
    """Causal convolutions and sliding-window transformer layers.

    Shapes:
        forward: mel (B, n_mels, T) -> (B, T // 2, D)
    """

    subsampling_rate = 8  # mel frames per LM vector (after the projector)

    def __init__(self, cfg: AudioTowerConfig, output_size: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.output_size = output_size
        self.embedder = Embedder(cfg)
        self.layers = nn.ModuleList(TowerLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.rotary = NeoxRotaryEmbedding(cfg.head_dim, cfg.rope_theta)

    def new_state(self, batch: int, device: torch.device, dtype: torch.dtype) -> TowerState:
        c = self.cfg
        return TowerState(
            torch.zeros(batch, c.num_mel_bins, self.embedder.conv1.left_pad, device=device, dtype=dtype),
            torch.zeros(batch, c.hidden_size, self.embedder.conv2.left_pad, device=device, dtype=dtype),
            [],
            [],
        )

    def forward(self, mel: torch.Tensor, state: TowerState | None = None) -> torch.Tensor:
        """The tower over a whole clip (``state`` None) or the next chunk of a stream (``state``
        updated in place; a chunk has an even number of mel frames).

        A clip longer than a few windows runs as a stream of ``2 * sliding_window``-frame chunks
        (the same values: every frame sees the same past), so its attention never builds a
        (T, T) mask."""
        chunk = 2 * self.cfg.sliding_window
        if state is None and mel.shape[-1] > 2 * chunk and mel.shape[-1] % 2 == 0:
            state = self.new_state(mel.shape[0], mel.device, mel.dtype)
            return torch.cat([self(mel[..., i : i + chunk], state) for i in range(0, mel.shape[-1], chunk)], 1)
        e = self.embedder
        if state is None:
            x = nn.functional.gelu(e.conv1(mel))
            x = nn.functional.gelu(e.conv2(x))
        else:
            x = nn.functional.gelu(e.conv1(mel, state.tail1))
            state.tail1 = torch.cat([state.tail1, mel], -1)[..., -e.conv1.left_pad :]
            tail2 = state.tail2
            state.tail2 = torch.cat([tail2, x], -1)[..., -e.conv2.left_pad :]
            x = nn.functional.gelu(e.conv2(x, tail2))
        x = x.transpose(1, 2)  # (B, T', D)
        t = x.shape[1]
        start = 0 if state is None else state.position
        positions = torch.arange(start, start + t, device=x.device)
        cos, sin = self.rotary.cos_sin(positions, x.dtype)
        w = self.cfg.sliding_window
        # Query i (absolute start + i) may see key j (absolute) when i - w < j <= i.
        n_past = 0 if state is None or not state.keys else state.keys[0].shape[2]
        q_pos = positions[:, None]
        k_pos = torch.arange(start - n_past, start + t, device=x.device)[None, :]
        mask = (k_pos <= q_pos) & (k_pos > q_pos - w)
        for li, layer in enumerate(self.layers):
            h = layer.self_attn_layer_norm(x)
            q, k, v = layer.self_attn.project(h, cos, sin)
            if state is not None:
                if state.keys and len(state.keys) > li:
                    k = torch.cat([state.keys[li], k], 2)
                    v = torch.cat([state.values[li], v], 2)
                keep = min(w - 1, k.shape[2])
                if len(state.keys) > li:
                    state.keys[li], state.values[li] = k[:, :, -keep:], v[:, :, -keep:]
                else:
                    state.keys.append(k[:, :, -keep:])
                    state.values.append(v[:, :, -keep:])
            a = attention(q, k, v, mask=mask)
            b_, h_, tq, dh = a.shape
            x = x + layer.self_attn.o_proj(a.transpose(1, 2).reshape(b_, tq, h_ * dh))
            x = x + layer.mlp(layer.final_layer_norm(x))
        if state is not None:
            state.position += t
        return self.norm(x)


class Projector(nn.Module):
    def __init__(self, audio_dim: int, factor: int, lm_dim: int) -> None:
        super().__init__()
        self.linear_1 = Linear(audio_dim * factor, lm_dim, bias=False)
        self.linear_2 = Linear(lm_dim, lm_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(nn.functional.gelu(self.linear_1(x)))


def time_embedding(value: float, dim: int, dtype: torch.dtype = torch.float64, theta: float = 10000.0) -> torch.Tensor:
    """The sinusoidal embedding of a scalar: (dim,) = cos | sin of ``value * theta^(-i / (dim / 2))``."""
    half = dim // 2
    inv_freq = torch.exp(-math.log(theta) * torch.arange(half).float() / half).to(dtype)
    emb = torch.tensor(float(value), dtype=dtype) * inv_freq
    return torch.cat([emb.cos(), emb.sin()])


# ---------------------------------------------------------------------------
# The LM in lockstep with the audio


class RealtimeLm(CausalLm):
    """The Mistral LM whose every step adds the row's next audio vector to the token's embedding.

    A row's audio vectors ride in its decoder state (``extras["audio"]`` (n, N, D),
    ``extras["n_audio"]`` (n,)), so they follow the row through ``select`` and ``merge`` as its
    K/V does. Feeding position ``p`` adds vector ``p``; at the row's last vector the logits say
    ``</s>`` only: transformers stops there (its ``max_length`` is the clip's vector count).
    """

    supports_step_graphs = False

    def __init__(self, cfg: CausalLmConfig, eos_token_id: int) -> None:
        super().__init__(cfg)
        self.eos_token_id = eos_token_id

    def step(self, state: DecoderState, tokens: torch.Tensor) -> torch.Tensor:
        audio, n_audio = state.extras["audio"], state.extras["n_audio"]
        pos = state.lengths_t.to(tokens.device)  # (n,) the position each row feeds
        rows = torch.arange(tokens.shape[0], device=tokens.device)
        vec = audio[rows, pos.clamp(max=audio.shape[1] - 1)]  # (n, D)
        ended = pos >= n_audio - 1
        logits = self.step_embeds(state, self.embed(tokens) + vec * (~ended)[:, None].to(vec.dtype))
        if bool(ended.any()):
            logits[ended] = float("-inf")
            logits[ended, self.eos_token_id] = 0.0
        return logits

    def merge(self, a: DecoderState, b: DecoderState) -> DecoderState:
        """``CausalLm.merge``, the rows' audio vectors padded to a common length first."""
        if "audio" in a.extras and "audio" in b.extras:
            n = max(a.extras["audio"].shape[1], b.extras["audio"].shape[1])
            for st in (a, b):
                x = st.extras["audio"]
                st.extras["audio"] = nn.functional.pad(x, (0, 0, 0, n - x.shape[1]))
        return super().merge(a, b)


# ---------------------------------------------------------------------------
# The model


class VoxtralRealtimeModel(PromptTokenizerMixin, BaseAsrModel):
    """Voxtral Realtime, decoded by the ``llm`` strategy (whole clips) or a ``RealtimeStream``.

    Args:
        config: the tower, the LM (its post-attention norms already scaled by the delay
            conditioning: ``convert.py`` folds it), the audio geometry and the prompt ids.
    """

    family = "Voxtral Realtime"
    architecture = "voxtral_realtime"
    # The release is bfloat16; its activations have not been checked against float16's range.
    safe_dtypes = (torch.bfloat16, torch.float32)
    unsafe_dtype_reason = "its checkpoint is bfloat16 and its activations are not known to fit float16's range"
    config_class = VoxtralRealtimeConfig
    writes_language = False  # the text streams from the first token: no language preamble to wait for

    def __init__(self, config: VoxtralRealtimeConfig | dict[str, Any]) -> None:
        super().__init__(config)
        config = self.config
        self.encoder = AudioTower(config.audio, config.text.hidden_size)
        self.multi_modal_projector = Projector(
            config.audio.hidden_size, config.downsample_factor, config.text.hidden_size
        )
        self.decoder = RealtimeLm(config.text, config.eos_token_id)

    # -- audio -------------------------------------------------------------------------

    def features(self, wave: np.ndarray | torch.Tensor) -> torch.Tensor:
        """The padded clip's log-mel (n_mels, frames) in float32 (as the reference extractor)."""
        s = self.config.stream
        frontend = VoxtralRealtimeMelFrontend(
            sampling_rate=s.sampling_rate, **s.frontend_params(self.config.audio.num_mel_bins)
        )
        return frontend(wave).T

    def encode(self, mel: torch.Tensor, state: TowerState | None = None) -> torch.Tensor:
        """Audio vectors at the LM width. mel (B, n_mels, T) -> (B, T // 8, D_lm)."""
        x = self.encoder(mel.to(device=self.decoder.embed_tokens.weight.device, dtype=self.compute_dtype), state)
        b, t, d = x.shape
        f = self.config.downsample_factor
        return self.multi_modal_projector(x.reshape(b, t // f, d * f))  # (B, N, f * D) -> (B, N, D_lm)

    def encode_offline(self, feats: torch.Tensor, feat_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Audio vectors of a zero-padded batch (the tower is causal: padding after a row's
        end does not reach its vectors).

        Shapes:
            feats: (B, T, n_mels), feat_lens: (B,) -> vectors (B, T // 8, D_lm), n_audio (B,)
        """
        per = self.config.stream.mel_frames_per_token
        t = feats.shape[1] - feats.shape[1] % per
        audio = self.encode(feats[:, :t].transpose(1, 2))
        return audio, feat_lens.to(device=audio.device, dtype=torch.long) // per

    # -- prompt ------------------------------------------------------------------------------

    @property
    def languages(self) -> tuple[str, ...]:
        """None can be forced: the model transcribes what it hears (its prompt has no language)."""
        return ()

    @property
    def tokenizer(self):
        """The checkpoint's ``tekken.json`` tokenizer."""
        if self._tokenizer is None:
            from oasr.models.base import TokenizerSpec
            from oasr.tokenizers import load_tokenizer

            if not self.config.tokenizer_path:
                raise RuntimeError(f"{self.family} needs its tekken.json: load the model from its directory")
            self._tokenizer = load_tokenizer(TokenizerSpec(kind="tekken", path=self.config.tokenizer_path))
        return self._tokenizer

    def _prompt(self) -> list[int]:
        s = self.config.stream
        return [self.config.bos_token_id] + [self.config.streaming_pad_id] * (s.n_left_pad_tokens + s.n_delay_tokens)

    def prompt_ids(
        self, n_audio: int, *, language: str | None = None, context: str | None = None, task: str = "transcribe"
    ) -> list[int]:
        """``<s>`` and one ``[STREAMING_PAD]`` per left-pad and delay token (the prompt holds no
        text, so no user text can reach it).

        Raises:
            ValueError: a language (none can be forced), a context or another task.
        """
        self.check_prompt_request(n_audio, task)
        self.resolve_language(language)
        if context:
            raise ValueError(f"context is not available: {self.family}'s prompt has no text turn")
        return self._prompt()

    def embed_prompt(
        self, ids: torch.Tensor, valid: torch.Tensor, audio_states: torch.Tensor, n_audio: torch.Tensor
    ) -> torch.Tensor:
        """Each position's token embedding plus its audio vector. (B, T), (B, T), (B, N, D), (B,) -> (B, T, D)"""
        if not bool(valid.all()):
            raise ValueError("the prompts of one prefill have one length (no padding)")
        if bool((n_audio < ids.shape[1]).any()):  # the front end's padding makes this impossible
            raise ValueError(f"audio vectors {n_audio.tolist()} cannot fill the {ids.shape[1]}-position prompt")
        return self.decoder.embed(ids) + audio_states[:, : ids.shape[1]].to(self.compute_dtype)

    def decoder_extras(self, audio_states: torch.Tensor, n_audio: torch.Tensor) -> dict[str, torch.Tensor]:
        """What each row's decode steps read (``RealtimeLm.step``): its audio vectors."""
        return {"audio": audio_states.to(self.compute_dtype), "n_audio": n_audio.to(audio_states.device, torch.long)}

    # -- output ------------------------------------------------------------------------------

    @property
    def stop_ids(self) -> tuple[int, ...]:
        return (self.config.eos_token_id,)

    def parse_output(self, text: str) -> tuple[str | None, str]:
        """(no language, the transcript without its edge spaces)."""
        return None, text.strip()

    # -- decoding without the engine ----------------------------------------------------------

    @torch.no_grad()
    def generate(self, wave: np.ndarray | torch.Tensor, max_new_tokens: int | None = None) -> tuple[list[int], str]:
        """Greedy ids (the prompt excluded, ``</s>`` excluded) of one clip and the finish reason:
        "stop" at ``</s>`` or at the audio's end, "length" when ``max_new_tokens`` cut it."""
        audio = self.encode(self.features(wave)[None])[0]  # (N, D_lm)
        lm = _LockstepDecoder(self, max_new_tokens)
        # The last vector is never fed: transformers' max_length is the clip's vector count.
        lm.feed(audio, audio.shape[0] - 1)
        return list(lm.tokens), lm.reason

    def open_live(self, max_new_tokens: int | None = None) -> RealtimeStream:
        """A live transcription session (``RealtimeStream``)."""
        return RealtimeStream(self, max_new_tokens)

    def text(self, ids: list[int]) -> str:
        """The text of generated ids (special tokens dropped), as transformers' ``batch_decode``."""
        return self.tokenizer.decode(ids)


POOL_STEP = 256  # LM positions a stream's K/V pool grows by


class _LockstepDecoder:
    """One clip's LM: the prompt prefilled with the first audio vectors, then a token per vector.

    Greedy, as transformers' default generation config; the K/V pool grows as the stream does,
    up to the LM's context (``max_position_embeddings``, capped by its sliding window)."""

    def __init__(self, model: VoxtralRealtimeModel, max_new: int | None = None) -> None:
        self.model = model
        self.prompt = model._prompt()
        self.max_new = max_new
        self.context = model.decoder.cfg.max_position_embeddings
        self.pool = model.decoder.new_pool(
            1, max_len=min(self.context, len(self.prompt) + POOL_STEP), dtype=model.compute_dtype
        )
        self.state: DecoderState | None = None
        self.tokens: list[int] = []
        self.position = 0  # the next LM position to feed
        self.done = False
        self.reason = "stop"

    def _grow(self) -> None:
        lm = self.model.decoder
        pool = lm.new_pool(1, max_len=min(self.context, self.pool.max_len + POOL_STEP), dtype=self.model.compute_dtype)
        pool.copy_from(self.pool, 1, 0, self.position)
        self.pool = self.state.pool = pool

    def feed(self, audio: torch.Tensor, end: int) -> None:
        """Feed the audio vectors ``audio[self.position:end]`` (``audio``: (N, D_lm), all vectors so
        far), choosing a token after each; the prompt waits for its ``len(prompt)`` vectors."""
        lm = self.model.decoder
        p = len(self.prompt)
        while not self.done:
            if self.state is None:
                if end < p:
                    return
                ids = torch.tensor([self.prompt], device=audio.device)
                embeds = lm.embed(ids) + audio[None, :p]
                logits, self.state = lm.prefill(self.pool, embeds, torch.ones_like(ids, dtype=torch.bool))
                self.position = p
            else:
                if self.position >= end:
                    return
                if self.position >= self.context:
                    self.done, self.reason = True, "length"
                    return
                if self.position >= self.pool.max_len:
                    self._grow()
                emb = lm.embed(torch.tensor([self.tokens[-1]], device=audio.device)) + audio[self.position][None]
                logits = lm.step_embeds(self.state, emb)
                self.position += 1
            tok = int(logits[0].argmax())
            if tok == self.model.config.eos_token_id:
                self.done = True
                return
            self.tokens.append(tok)
            if self.max_new is not None and len(self.tokens) >= self.max_new:
                self.done, self.reason = True, "length"


class RealtimeStream:
    """A live transcription: ``feed`` 16-kHz samples as they arrive, ``finish`` at the end.

    The audio is cut as transformers' streaming example cuts it: a first chunk of
    ``n_left_pad`` tokens of silence and ``(n_delay + 1) * 8 - 1`` mel frames of audio (the
    prompt's vectors, a centred STFT), then one audio token (8 mel frames, an uncentred STFT
    over ``8 * hop + window`` samples) at a time; ``finish`` appends
    ``n_delay + 1 + 10`` tokens of silence and decodes what they complete. The tower and the LM
    keep their state between chunks (``TowerState``, the LM's K/V), so the ids equal a
    ``generate`` fed the same chunks.
    """

    def __init__(self, model: VoxtralRealtimeModel, max_new_tokens: int | None = None) -> None:
        self.model = model
        s = model.config.stream
        self.s = s
        self.samples = np.zeros(0, dtype=np.float32)
        self.offset = 0  # samples dropped from the front of ``self.samples``
        self.tower: TowerState | None = None
        self.vectors: list[torch.Tensor] = []
        self.n_vectors = 0
        self.lm = _LockstepDecoder(model, max_new_tokens)
        per_tok = s.mel_frames_per_token
        self.first_samples = (
            (model.config.stream.n_delay_tokens + 1) * per_tok - 1
        ) * s.hop_length + s.window_size // 2
        self.chunk_samples = per_tok * s.hop_length + s.window_size
        self.mel_index = -1  # the next mel frame to compute (audio coordinates); -1 before the first chunk
        self.finished = False

    @property
    def tokens(self) -> list[int]:
        return list(self.lm.tokens)

    @property
    def done(self) -> bool:
        return self.lm.done

    @property
    def finish_reason(self) -> str:
        return self.lm.reason

    def text(self) -> str:
        return self.model.text(self.lm.tokens)

    def _chunk(self, mel: torch.Tensor) -> None:
        if self.tower is None:
            self.tower = self.model.encoder.new_state(
                1, self.model.decoder.embed_tokens.weight.device, self.model.compute_dtype
            )
        vecs = self.model.encode(mel[None], self.tower)[0]
        self.vectors.append(vecs)
        self.n_vectors += vecs.shape[0]

    @torch.no_grad()
    def _run(self, strict: bool) -> None:
        s = self.s
        n_mels = self.model.config.audio.num_mel_bins
        have = self.offset + self.samples.shape[0]
        if self.mel_index < 0:
            if have < self.first_samples:
                return
            left = np.zeros(s.samples_per_token * s.n_left_pad_tokens, dtype=np.float32)
            x = torch.from_numpy(np.concatenate([left, self.samples[: self.first_samples]]))
            self._chunk(log_mel(x, n_mels, center=True, hop=s.hop_length, n_fft=s.window_size))
            self.mel_index = (s.n_delay_tokens + 1) * s.mel_frames_per_token
        while True:
            start = self.mel_index * s.hop_length - s.window_size // 2
            end = start + self.chunk_samples
            if end > have or (strict and end == have):
                break
            x = torch.from_numpy(self.samples[start - self.offset : end - self.offset].copy())
            self._chunk(log_mel(x, n_mels, center=False, hop=s.hop_length, n_fft=s.window_size))
            self.mel_index += s.mel_frames_per_token
        # Samples before the next chunk's start are not needed again.
        drop = self.mel_index * s.hop_length - s.window_size // 2 - self.offset
        if drop > 0:
            self.samples = self.samples[drop:]
            self.offset += drop
        if len(self.vectors) > 1:
            self.vectors = [torch.cat(self.vectors)]
        if self.vectors:
            self.lm.feed(self.vectors[0], self.n_vectors)

    def feed(self, samples: np.ndarray) -> None:
        """Append 16-kHz mono samples and decode every audio token they complete."""
        if self.finished:
            raise ValueError("the stream is finished")
        x = np.asarray(samples, dtype=np.float32).reshape(-1)
        self.samples = np.concatenate([self.samples, x])
        if not self.done:
            self._run(strict=False)

    def finish(self) -> None:
        """The audio ended: decode through the right padding (transformers' example pads
        ``n_right_pad_tokens`` tokens of silence and stops before a chunk that would end exactly
        at the padded audio's end)."""
        if self.finished:
            return
        s = self.s
        pad = s.samples_per_token * (s.n_delay_tokens + 1 + OFFLINE_BUFFER_TOKENS)
        self.samples = np.concatenate([self.samples, np.zeros(pad, dtype=np.float32)])
        if not self.done:
            self._run(strict=True)
        self.finished = True
        self.lm.done = True

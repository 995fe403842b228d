"""Voxtral configuration: the Whisper-style audio tower, the projector, the Mistral
(Llama) causal LM, and the special ids the transcription and chat prompts need.

``VoxtralConfig.from_hf`` reads a transformers ``voxtral`` ``config.json``. Omitted
``text_config`` fields take transformers' ``VoxtralConfig`` sub-config defaults (the
Voxtral-Mini-3B LM), as transformers fills them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from oasr.models.base import LoadError
from oasr.models.configs import ModelConfig
from oasr.models.decoders.causal_lm import CausalLmConfig
from oasr.models.speech_llm.config import Qwen2AudioEncoderConfig

# The tekken special tokens the prompts use, by the names mistral-common gives them.
BOS_TOKEN = "<s>"
EOS_TOKEN = "</s>"
INST_TOKEN = "[INST]"
END_INST_TOKEN = "[/INST]"
AUDIO_TOKEN = "[AUDIO]"
BEGIN_AUDIO_TOKEN = "[BEGIN_AUDIO]"
TRANSCRIBE_TOKEN = "[TRANSCRIBE]"

# Voxtral's tekken ids (mistral-common's special-token ranks), used when a tokenizer lacks them.
DEFAULT_IDS: dict[str, int] = {
    BOS_TOKEN: 1,
    EOS_TOKEN: 2,
    INST_TOKEN: 3,
    END_INST_TOKEN: 4,
    AUDIO_TOKEN: 24,
    BEGIN_AUDIO_TOKEN: 25,
    TRANSCRIBE_TOKEN: 34,
}

# transformers' VoxtralConfig text sub-config defaults (Voxtral-Mini-3B's Llama LM).
TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 131072,
    "hidden_size": 3072,
    "intermediate_size": 8192,
    "num_hidden_layers": 30,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
    "rope_theta": 100000000.0,
    "tie_word_embeddings": False,
    "hidden_act": "silu",
}


@dataclass
class VoxtralEncoderConfig(Qwen2AudioEncoderConfig):
    """The audio tower: Whisper's encoder (Qwen2-Audio's tower geometry, without its mask and
    pool; every 30-s window is whole). The projector reads ``encoder_ffn_dim`` features per
    audio token: four consecutive frames (transformers reshapes by ``intermediate_size``).
    """

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.encoder_ffn_dim % self.d_model or (self.max_source_positions * self.d_model) % self.encoder_ffn_dim:
            raise ValueError(
                f"the projector groups {self.encoder_ffn_dim} // {self.d_model} frames per audio token: "
                f"encoder_ffn_dim must be a multiple of d_model that divides a window's "
                f"{self.max_source_positions} frames"
            )

    @property
    def frames_per_token(self) -> int:
        """Tower frames merged into one audio token (4 on the release)."""
        return self.encoder_ffn_dim // self.d_model

    @property
    def tokens_per_window(self) -> int:
        """Audio tokens of one 30-s window (375 on the release)."""
        return self.max_source_positions // self.frames_per_token

    @classmethod
    def from_hf(cls, hf: Mapping[str, Any]) -> VoxtralEncoderConfig:
        """From a transformers ``VoxtralEncoderConfig`` dict (either attribute spelling;
        missing keys take its defaults).

        Raises:
            LoadError: an activation or embedding scale this tower does not implement.
        """
        act = hf.get("activation_function", "gelu")
        if act != "gelu":
            raise LoadError(f"audio_config.activation_function={act!r} is not supported (Voxtral uses 'gelu')")
        if hf.get("scale_embedding", False):
            raise LoadError("audio_config.scale_embedding=True is not supported (no Voxtral release uses it)")
        d = cls()

        def get(*keys: str, default: int) -> int:
            for key in keys:
                if hf.get(key) is not None:
                    return int(hf[key])
            return default

        return cls(
            num_mel_bins=get("num_mel_bins", default=d.num_mel_bins),
            d_model=get("hidden_size", "d_model", default=d.d_model),
            encoder_layers=get("num_hidden_layers", "encoder_layers", default=d.encoder_layers),
            encoder_attention_heads=get(
                "num_attention_heads", "encoder_attention_heads", default=d.encoder_attention_heads
            ),
            encoder_ffn_dim=get("intermediate_size", "encoder_ffn_dim", default=d.encoder_ffn_dim),
            max_source_positions=get("max_source_positions", default=d.max_source_positions),
        )


def llama_text_config(hf: Mapping[str, Any]) -> CausalLmConfig:
    """A Llama / Mistral ``text_config`` dict as the shared causal LM (no q/k/v bias, no QK
    norm, NEOX rotary positions, SwiGLU); omitted fields take ``TEXT_DEFAULTS``.

    Raises:
        LoadError: a feature the shared LM does not implement (scaled RoPE, biases, sliding
            windows, another activation).
    """
    d = {**TEXT_DEFAULTS, **{k: v for k, v in hf.items() if v is not None}}
    kind = str(d.get("model_type", "llama"))
    if kind not in ("llama", "mistral"):
        raise LoadError(f"text_config.model_type={kind!r} is not supported (Voxtral's LM is 'llama')")
    if d.get("attention_bias") or d.get("mlp_bias"):
        raise LoadError("text_config attention_bias / mlp_bias are not supported (Voxtral's LM has none)")
    if d.get("sliding_window"):
        raise LoadError("text_config.sliding_window is not supported (Voxtral's LM attends to its whole context)")
    if d.get("hidden_act") != "silu":
        raise LoadError(f"text_config.hidden_act={d.get('hidden_act')!r} is not supported (Voxtral's LM uses silu)")
    rope = d.get("rope_parameters") or d.get("rope_scaling") or {}
    rope_type = rope.get("rope_type", rope.get("type", "default")) if isinstance(rope, Mapping) else "default"
    if rope_type not in (None, "default"):
        raise LoadError(f"RoPE scaling {rope_type!r} is not supported (only the default rotary embedding)")
    theta = d.get("rope_theta")
    if isinstance(rope, Mapping) and rope.get("rope_theta") is not None:
        theta = rope["rope_theta"]
    heads = int(d["num_attention_heads"])
    kv = d.get("num_key_value_heads")
    return CausalLmConfig(
        vocab_size=int(d["vocab_size"]),
        hidden_size=int(d["hidden_size"]),
        intermediate_size=int(d["intermediate_size"]),
        num_hidden_layers=int(d["num_hidden_layers"]),
        num_attention_heads=heads,
        num_key_value_heads=heads if kv is None else int(kv),
        head_dim=None if d.get("head_dim") is None else int(d["head_dim"]),
        rms_norm_eps=float(d["rms_norm_eps"]),
        rope_theta=float(theta),
        max_position_embeddings=int(d["max_position_embeddings"]),
        tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
        attention_bias=False,
        o_proj_bias=False,
        qk_norm=False,
        hidden_act="silu",
    )


@dataclass
class VoxtralConfig(ModelConfig):
    """Voxtral: audio tower -> projector (linear, GELU, linear; no biases) -> Mistral LM.

    Attributes:
        audio: the audio tower.
        text: the causal LM.
        special_ids: the ids of the prompt's special tokens, by their text (``"[INST]"``, ...).
        stop_ids: generation stops at any of these (the generation config's eos ids, ``</s>``).
        tokenizer_path: the checkpoint's tokenizer.json; the prompt's text is tokenized with it.
    """

    audio: VoxtralEncoderConfig
    text: CausalLmConfig
    special_ids: dict[str, int] | None = None
    stop_ids: tuple[int, ...] = (DEFAULT_IDS[EOS_TOKEN],)
    tokenizer_path: str | None = None

    def __post_init__(self) -> None:
        self.special_ids = {**DEFAULT_IDS, **dict(self.special_ids or {})}
        if not self.stop_ids:
            raise ValueError("VoxtralConfig.stop_ids must name at least one stop token")

    @property
    def audio_token_id(self) -> int:
        """The ``[AUDIO]`` placeholder the projected audio states overwrite."""
        return int(self.special_ids[AUDIO_TOKEN])

    @classmethod
    def from_hf(
        cls,
        hf: Mapping[str, Any],
        *,
        special_ids: Mapping[str, int | None] | None = None,
        stop_ids: tuple[int, ...] | None = None,
        tokenizer_path: str | None = None,
    ) -> VoxtralConfig:
        """From a transformers ``voxtral`` config dict.

        Args:
            hf: the parsed ``config.json``.
            special_ids: ids of the special tokens by their text, as the checkpoint's
                tokenizer assigns them; missing ones keep Voxtral's tekken ids.
            stop_ids: the generation stop ids (default: ``</s>``).
            tokenizer_path: see the class attributes.

        Raises:
            LoadError: another model type, an unsupported projector activation, or an
                ``audio_token_id`` that differs from the tokenizer's ``[AUDIO]``.
        """
        if hf.get("model_type") not in (None, "voxtral"):
            raise LoadError(f"model_type={hf.get('model_type')!r} is not a Voxtral config")
        act = hf.get("projector_hidden_act", "gelu")
        if act != "gelu":
            raise LoadError(f"projector_hidden_act={act!r} is not supported (Voxtral uses 'gelu')")
        ids = {k: int(v) for k, v in (special_ids or {}).items() if v is not None}
        audio_id = hf.get("audio_token_id")
        if audio_id is not None:
            if AUDIO_TOKEN in ids and ids[AUDIO_TOKEN] != int(audio_id):
                raise LoadError(
                    f"config audio_token_id={audio_id} but the tokenizer gives {AUDIO_TOKEN} the id {ids[AUDIO_TOKEN]}"
                )
            ids[AUDIO_TOKEN] = int(audio_id)
        stops = tuple(stop_ids) if stop_ids else (ids.get(EOS_TOKEN, DEFAULT_IDS[EOS_TOKEN]),)
        return cls(
            audio=VoxtralEncoderConfig.from_hf(hf.get("audio_config") or {}),
            text=llama_text_config(hf.get("text_config") or {}),
            special_ids=ids,
            stop_ids=stops,
            tokenizer_path=tokenizer_path,
        )

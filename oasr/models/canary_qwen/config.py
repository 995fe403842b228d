"""Canary-Qwen configuration: NeMo speechlm2's ``SALM`` (``nvidia/canary-qwen-2.5b``).

SALM's perception is a FastConformer encoder (canary-1b-flash's), a modality adapter (a
``ConformerEncoder`` with ``subsampling_factor: 1``: its front end one linear layer from the encoder
width) and a linear projection to the LLM width; the LLM is a Qwen3 causal LM whose prompt holds
one audio locator tag, replaced by the perception's states. ``convert.py`` reads all of it from
the checkpoint's ``config.json`` (SALM's own config) and ``llm_backbone/config.json``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from oasr.models.configs import ModelConfig
from oasr.models.decoders.causal_lm import CausalLmConfig
from oasr.models.parakeet.config import ParakeetEncoderConfig

AUDIO_LOCATOR_TAG = "<|audioplaceholder|>"  # the release's ``audio_locator_tag``
# The release's prompt (its model card's): the user turn of NeMo's ``qwen`` prompt format.
DEFAULT_PROMPT = f"Transcribe the following: {AUDIO_LOCATOR_TAG}"


@dataclass
class ModalityAdapterConfig(ParakeetEncoderConfig):
    """The modality adapter: FastConformer blocks over the encoder's frames, without subsampling
    (``num_mel_bins`` is its input width, the encoder's ``hidden_size``)."""

    subsampling_factor: int = 1

    def __post_init__(self) -> None:
        if self.subsampling_factor != 1:
            raise ValueError(
                f"the modality adapter's subsampling_factor={self.subsampling_factor} is not implemented (1 only)"
            )
        # The blocks' checks are the encoder's (the front end, one linear layer, has none).
        ParakeetEncoderConfig(**{**asdict(self), "subsampling_factor": self.subsampling_conv_stride})
        if self.hidden_act == "swish":
            self.hidden_act = "silu"


@dataclass
class CanaryQwenConfig(ModelConfig):
    """Canary-Qwen: perception (encoder, adapter, projection) + a Qwen3 LM + the prompt.

    Attributes:
        encoder: the FastConformer encoder.
        adapter: the modality adapter.
        text: the Qwen3 causal LM (LoRA merged into its weights at load).
        audio_locator_tag: the prompt's audio placeholder (SALM's ``audio_locator_tag``).
        audio_token_id: its id (the token SALM adds to the LLM's tokenizer).
        prompt: the user turn's text, holding ``audio_locator_tag`` once.
        eos_token_ids: generation stops at these (SALM's ``tokenizer.eos_id``).
        languages: ISO codes of what the model transcribes (the release: English).
        tokenizer_path: where the checkpoint's tokenizer is.
    """

    encoder: ParakeetEncoderConfig = field(default_factory=lambda: ParakeetEncoderConfig(num_mel_bins=128))
    adapter: ModalityAdapterConfig = field(default_factory=lambda: ModalityAdapterConfig(num_hidden_layers=2))
    text: CausalLmConfig = field(
        default_factory=lambda: CausalLmConfig.from_hf(
            {"hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 28, "num_attention_heads": 16},
            model_type="qwen3",
            defaults={"num_key_value_heads": 8, "tie_word_embeddings": True, "rope_theta": 1e6, "vocab_size": 151936},
        )
    )
    audio_locator_tag: str = AUDIO_LOCATOR_TAG
    audio_token_id: int = 151669
    prompt: str = DEFAULT_PROMPT
    eos_token_ids: tuple[int, ...] = (151645,)
    languages: tuple[str, ...] = ("en",)
    tokenizer_path: str | None = None

    def __post_init__(self) -> None:
        if self.adapter.num_mel_bins != self.encoder.hidden_size:
            raise ValueError(
                f"the modality adapter reads {self.adapter.num_mel_bins} features but the encoder makes "
                f"{self.encoder.hidden_size}"
            )
        if self.prompt.count(self.audio_locator_tag) != 1:
            raise ValueError(f"prompt={self.prompt!r} must hold the audio locator tag {self.audio_locator_tag!r} once")
        if not self.text.qk_norm:
            raise ValueError("Canary-Qwen's LM is a Qwen3 model (qk_norm=True)")
        if not 0 <= self.audio_token_id < self.text.vocab_size:
            raise ValueError(f"audio_token_id={self.audio_token_id} is outside the LM's vocabulary")
        if not self.eos_token_ids:
            raise ValueError("eos_token_ids must name at least one stop token")

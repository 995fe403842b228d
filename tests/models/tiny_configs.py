"""A tiny config for every registered architecture, built on CPU in the contract tests.

A newly registered architecture without an entry here fails
``test_every_architecture_has_a_tiny_config`` instead of going untested.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _whisper() -> Any:
    from oasr.models.whisper import WhisperConfig

    return WhisperConfig(
        n_mels=80,
        n_audio_ctx=1500,
        n_audio_state=16,
        n_audio_head=2,
        n_audio_layer=2,
        n_vocab=51865,
        n_text_ctx=448,
        n_text_state=16,
        n_text_head=2,
        n_text_layer=2,
    )


def _lasr() -> Any:
    from oasr.models.lasr import LasrConfig

    # Even depthwise kernel, as MedASR's 32 (padded one frame more on the right).
    return LasrConfig(
        vocab_size=45,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        conv_kernel_size=8,
        subsampling_conv_channels=16,
    )


def _granite_speech5() -> Any:
    from oasr.models.granite_speech5 import GraniteSpeech5Config

    # Blocks of 4 frames, two subsampling blocks, self-conditioning after block 0.
    return GraniteSpeech5Config(
        vocab_size=45,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_mel_bins=8,
        max_position_embeddings=8,
        context_size=4,
        conv_kernel_size=3,
    )


def _parakeet() -> Any:
    from oasr.models.parakeet import ParakeetConfig, ParakeetEncoderConfig

    encoder = ParakeetEncoderConfig(
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        subsampling_conv_channels=8,
    )
    return ParakeetConfig(encoder=encoder, vocab_size=45)


def _parakeet_transducer() -> Any:
    from oasr.models.parakeet import ParakeetEncoderConfig, ParakeetTransducerConfig

    encoder = ParakeetEncoderConfig(
        hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32, subsampling_conv_channels=8
    )
    return ParakeetTransducerConfig(encoder=encoder, vocab_size=45, decoder_hidden_size=16, durations=(0, 1, 2))


def _parakeet_hybrid() -> Any:
    from oasr.models.parakeet import ParakeetEncoderConfig, ParakeetHybridConfig

    encoder = ParakeetEncoderConfig(
        hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32, subsampling_conv_channels=8
    )
    return ParakeetHybridConfig(encoder=encoder, vocab_size=45, decoder_hidden_size=16, durations=(0, 1, 2))


def _canary() -> Any:
    from oasr.models.canary import CanaryConfig, CanaryDecoderConfig
    from oasr.models.parakeet import ParakeetEncoderConfig

    encoder = ParakeetEncoderConfig(
        hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32, subsampling_conv_channels=8
    )
    decoder = CanaryDecoderConfig(
        vocab_size=48, hidden_size=24, inner_size=48, num_layers=2, num_attention_heads=2, encoder_hidden=16
    )
    return CanaryConfig(encoder=encoder, decoder=decoder)


def _cache_aware_encoder() -> Any:
    from oasr.models.parakeet.cache_aware import CacheAwareEncoderConfig

    return CacheAwareEncoderConfig(
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        subsampling_conv_channels=8,
        att_context_size=(6, 1),
        att_context_sizes=((6, 1), (6, 0)),
        conv_context_size=(8, 0),
    )


def _parakeet_cache_aware() -> Any:
    from oasr.models.parakeet.cache_aware import CacheAwareCtcConfig

    return CacheAwareCtcConfig(encoder=_cache_aware_encoder(), vocab_size=45)


def _parakeet_cache_aware_transducer() -> Any:
    from oasr.models.parakeet.cache_aware import CacheAwareTransducerConfig

    return CacheAwareTransducerConfig(encoder=_cache_aware_encoder(), vocab_size=45, decoder_hidden_size=16)


def _parakeet_cache_aware_hybrid() -> Any:
    from oasr.models.parakeet.cache_aware import CacheAwareHybridConfig

    return CacheAwareHybridConfig(encoder=_cache_aware_encoder(), vocab_size=45, decoder_hidden_size=16)


def _moonshine_streaming() -> Any:
    from oasr.models.moonshine_streaming import MoonshineStreamingConfig

    return MoonshineStreamingConfig(
        vocab_size=40,
        encoder_hidden_size=16,
        encoder_intermediate_size=32,
        encoder_layers=2,
        encoder_heads=2,
        encoder_kv_heads=1,
        encoder_head_dim=8,
        sliding_windows=((4, 2), (4, 0)),
        hidden_size=24,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        head_dim=12,
        max_position_embeddings=256,
    )


def _nemotron() -> Any:
    from oasr.models.nemotron import NemotronConfig, NemotronEncoderConfig

    encoder = NemotronEncoderConfig(
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        subsampling_conv_channels=8,
        sliding_window=9,
        default_num_lookahead_tokens=1,
    )
    return NemotronConfig(
        encoder=encoder,
        vocab_size=45,
        blank_id=44,
        decoder_hidden_size=16,
        num_prompts=4,
        prompt_intermediate_size=24,
        default_prompt_id=3,
        prompt_dictionary={"en": 0, "de": 1},
    )


def _conformer() -> Any:
    from oasr.models.conformer import ConformerEncoderConfig, ConformerModelConfig
    from oasr.models.decoders.transformer_decoder import TransformerDecoderConfig

    encoder = ConformerEncoderConfig(
        input_dim=80, output_size=16, attention_heads=2, linear_units=32, num_blocks=2, cnn_module_kernel=7
    )
    decoder = TransformerDecoderConfig(
        vocab_size=45, d_model=16, attention_heads=2, linear_units=32, num_blocks=1, bidirectional=True, r_num_blocks=1
    )
    return ConformerModelConfig(encoder=encoder, vocab_size=45, decoder=decoder)


def _speech_llm() -> Any:
    from oasr.models.decoders.causal_lm import CausalLmConfig
    from oasr.models.speech_llm import Qwen2AudioConfig, Qwen2AudioEncoderConfig

    audio = Qwen2AudioEncoderConfig(d_model=16, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=32)
    text = CausalLmConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
    )
    return Qwen2AudioConfig(
        audio=audio,
        text=text,
        audio_token_id=60,
        audio_bos_id=61,
        audio_eos_id=62,
        im_start_id=58,
        im_end_id=59,
        stop_ids=(57, 59),
    )


def _qwen3_text() -> Any:
    """The tiny Qwen3 LM of the speech LLMs built on one (64 ids, width 16, GQA, tied)."""
    from oasr.models.decoders.causal_lm import CausalLmConfig

    return CausalLmConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        tie_word_embeddings=True,
        attention_bias=False,
        qk_norm=True,
        max_position_embeddings=1024,
    )


def _moonshine() -> Any:
    from oasr.models.moonshine import MoonshineConfig

    return MoonshineConfig(
        vocab_size=64, hidden_size=48, intermediate_size=64, encoder_layers=2, decoder_layers=2, num_heads=4
    )


def _qwen3_asr() -> Any:
    from oasr.models.qwen3_asr import Qwen3AsrAudioConfig, Qwen3AsrConfig

    audio = Qwen3AsrAudioConfig(
        d_model=16,
        encoder_layers=2,
        encoder_attention_heads=2,
        encoder_ffn_dim=32,
        downsample_hidden_size=8,
        output_dim=16,
    )
    text = _qwen3_text()
    return Qwen3AsrConfig(
        audio=audio,
        text=text,
        audio_token_id=60,
        audio_start_token_id=61,
        audio_end_token_id=62,
        im_start_token_id=58,
        im_end_token_id=59,
        asr_text_token_id=63,
        eos_token_ids=(57, 59),
    )


def _voxtral_realtime() -> Any:
    from oasr.models.decoders.causal_lm import CausalLmConfig
    from oasr.models.voxtral_realtime.model import AudioTowerConfig, StreamingAudioConfig, VoxtralRealtimeConfig

    audio = AudioTowerConfig(
        hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2, head_dim=8, sliding_window=12
    )
    text = CausalLmConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        attention_bias=False,
    )
    return VoxtralRealtimeConfig(audio=audio, text=text, stream=StreamingAudioConfig(n_left_pad_tokens=2))


def _canary_qwen() -> Any:
    from oasr.models.canary_qwen import CanaryQwenConfig, ModalityAdapterConfig
    from oasr.models.parakeet.config import ParakeetEncoderConfig

    encoder = ParakeetEncoderConfig(
        hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32, subsampling_conv_channels=4
    )
    adapter = ModalityAdapterConfig(
        hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, num_mel_bins=16
    )
    text = _qwen3_text()
    return CanaryQwenConfig(encoder=encoder, adapter=adapter, text=text, audio_token_id=63, eos_token_ids=(62,))


def _voxtral() -> Any:
    from oasr.models.voxtral import VoxtralConfig, VoxtralEncoderConfig
    from oasr.models.voxtral.config import llama_text_config

    audio = VoxtralEncoderConfig(d_model=16, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=64)
    text = llama_text_config(
        {
            "vocab_size": 64,
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 4,
            "max_position_embeddings": 1024,
        }
    )
    return VoxtralConfig(audio=audio, text=text)


def _paraformer() -> Any:
    from oasr.models.paraformer import CifPredictorConfig, ParaformerConfig, SanmDecoderConfig, SanmEncoderConfig

    encoder = SanmEncoderConfig(input_size=560, output_size=16, attention_heads=2, linear_units=32, num_blocks=2)
    decoder = SanmDecoderConfig(attention_heads=2, linear_units=32, num_blocks=2, att_layer_num=1)
    return ParaformerConfig(encoder=encoder, decoder=decoder, predictor=CifPredictorConfig(), vocab_size=45)


def _sensevoice() -> Any:
    from oasr.models.sensevoice import SenseVoiceConfig, SenseVoiceEncoderConfig

    encoder = SenseVoiceEncoderConfig(
        input_size=560, output_size=16, attention_heads=2, linear_units=32, num_blocks=2, tp_blocks=1
    )
    return SenseVoiceConfig(encoder=encoder, vocab_size=60)


def _zipformer_encoder() -> Any:
    from oasr.models.zipformer import ZipformerEncoderConfig

    return ZipformerEncoderConfig(
        downsampling_factor=(1, 2),
        encoder_dim=(16, 24),
        num_encoder_layers=(1, 1),
        num_heads=(2, 2),
        query_head_dim=(8,),
        pos_head_dim=(4,),
        value_head_dim=(4,),
        feedforward_dim=(32, 48),
        cnn_module_kernel=(5, 3),
        pos_dim=16,
        embed_channels=(4, 8, 16),
    )


def _zipformer() -> Any:
    from oasr.models.zipformer import ZipformerConfig

    return ZipformerConfig(encoder=_zipformer_encoder(), vocab_size=20)


def _transducer() -> Any:
    from oasr.models.transducer import TransducerConfig

    return TransducerConfig(encoder=_zipformer_encoder(), vocab_size=20, decoder_dim=16, joiner_dim=16, use_ctc=True)


def _wav2vec2() -> Any:
    from oasr.models.wav2vec2 import Wav2Vec2Config

    # A 7-sample receptive field: rows of a few dozen samples still give unequal frame counts.
    return Wav2Vec2Config(
        vocab_size=28,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        conv_dim=(8, 8),
        conv_stride=(2, 2),
        conv_kernel=(3, 3),
        pos_conv_kernel=4,
        pos_conv_groups=2,
    )


def _mms() -> Any:
    from oasr.models.wav2vec2.mms import MmsConfig

    # wav2vec2's tiny encoder, pre-norm, with adapters; no adapter files: its own language only.
    return MmsConfig(**{**vars(_wav2vec2()), "do_stable_layer_norm": True}, adapter_attn_dim=4, target_lang="eng")


def _wavlm() -> Any:
    from oasr.models.wav2vec2.wavlm import WavLMConfig

    # wav2vec2's tiny shape; 16 buckets exact up to 4 frames, logarithmic up to 12 (rows of 30+ frames pass it).
    return WavLMConfig(**{**_wav2vec2().to_dict(), "model_type": "wavlm", "num_buckets": 16, "max_bucket_distance": 12})


def _granite_speech() -> Any:
    from oasr.models.decoders.causal_lm import CausalLmConfig
    from oasr.models.granite_speech import GraniteSpeechConfig, GraniteSpeechEncoderConfig, QFormerConfig

    encoder = GraniteSpeechEncoderConfig(
        num_layers=2, hidden_dim=16, feedforward_mult=2, num_heads=2, output_dim=6, context_size=20, max_pos_emb=32
    )
    projector = QFormerConfig(
        hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, encoder_hidden_size=16
    )
    text = CausalLmConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
        attention_bias=False,
        max_position_embeddings=1024,
        embedding_multiplier=2.0,
        residual_multiplier=0.5,
        attention_multiplier=0.3,
    )
    return GraniteSpeechConfig(encoder=encoder, projector=projector, text=text, audio_token_id=63, eos_token_ids=(62,))


TINY_CONFIGS: dict[str, Callable[[], Any]] = {
    "canary": _canary,
    "canary_qwen": _canary_qwen,
    "conformer": _conformer,
    "granite_speech": _granite_speech,
    "granite_speech5": _granite_speech5,
    "lasr": _lasr,
    "mms": _mms,
    "moonshine_streaming": _moonshine_streaming,
    "nemotron": _nemotron,
    "paraformer": _paraformer,
    "parakeet": _parakeet,
    "parakeet_transducer": _parakeet_transducer,
    "parakeet_hybrid": _parakeet_hybrid,
    "parakeet_cache_aware": _parakeet_cache_aware,
    "parakeet_cache_aware_transducer": _parakeet_cache_aware_transducer,
    "parakeet_cache_aware_hybrid": _parakeet_cache_aware_hybrid,
    "moonshine": _moonshine,
    "qwen3_asr": _qwen3_asr,
    "sensevoice": _sensevoice,
    "speech_llm": _speech_llm,
    "transducer": _transducer,
    "voxtral_realtime": _voxtral_realtime,
    "voxtral": _voxtral,
    "wav2vec2": _wav2vec2,
    "wavlm": _wavlm,
    "whisper": _whisper,
    "zipformer": _zipformer,
}

"""Tiny NeMo-saved Canary checkpoints (``EncDecMultiTaskModel``), built by NeMo's own classes
(``nemo-toolkit``): the release configs (``canary-1b`` with ``prompt_format: canary``, and
``canary-1b-flash`` / ``canary-180m-flash`` with ``prompt_format: canary2``: a FastConformer encoder
with ``dw_striding`` 8x subsampling and ``rel_pos`` attention, a projection when the encoder is narrower
than the decoder, NeMo's pre-LN transformer decoder with fixed sine positions, a tied
``TokenClassifier`` log-softmax head, the 16 kHz ``AudioToMelSpectrogramPreprocessor`` with 128 mel
bins, and the aggregate ``CanaryTokenizer``: a special-token SentencePiece ``spl_tokens`` built by
``CanaryTokenizer.build_special_tokenizer`` plus one SentencePiece BPE model per language) shrunk to
two encoder and two decoder layers of small width, random weights, written by ``model.save_to`` so
that the archive is laid out as NeMo lays it out.

Imported only by tests that skip where ``nemo`` is absent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from tests.models.parakeet.conftest import SENTENCES
from tests.models.parakeet.nemo_reference import (
    SPEC_AUGMENT,
    encoder_config,
    preprocessor_config,
    randomize,
    train_sentencepiece,
)

FORMATS = ("canary", "canary2")
LANGUAGES = ("en", "de")
GERMAN = (
    "und so meine lieben mitbuerger fragt nicht was euer land fuer euch tun kann",
    "der schnelle braune fuchs springt ueber den faulen hund",
    "sie verkauft muscheln am ufer des meeres",
    "herr john dashwood hatte dann musse zu bedenken wie viel in seiner macht stehen mochte",
)
N_TIMESTAMPS = 40  # canary2's frame tokens <|0|> ... (the releases carry hundreds)
ENC_WIDTH = 32  # the encoder is narrower than the decoder, as in canary-180m-flash (512 vs 1024)
DEC_WIDTH = 48
MAX_SEQUENCE_LENGTH = 64  # decoder positions (512 / 1024 in the releases)


def special_tokens(prompt_format: str) -> list[str]:
    """The prompt tokens of ``spl_tokens`` besides NeMo's ``DEFAULT_TOKENS``."""
    tokens = ["<|transcribe|>", "<|translate|>", *LANGUAGES]
    if prompt_format == "canary2":
        tokens += [
            "<|startofcontext|>",
            "<|emo:undefined|>",
            "<|emo:neutral|>",
            "<|emo:angry|>",
            "<|emo:happy|>",
            "<|emo:sad|>",
            "<|itn|>",
            "<|noitn|>",
            "<|timestamp|>",
            "<|notimestamp|>",
            "<|diarize|>",
            "<|nodiarize|>",
            "<|spkchange|>",
            *[f"<|{i}|>" for i in range(N_TIMESTAMPS)],
        ]
    return tokens


def build_tokenizers(directory: Path, prompt_format: str) -> dict[str, Path]:
    """``spl_tokens`` and one BPE model per language under ``directory``; lang -> its directory."""
    from nemo.collections.common.tokenizers.canary_tokenizer import CanaryTokenizer

    dirs = {"spl_tokens": directory / "spl_tokens"}
    CanaryTokenizer.build_special_tokenizer(special_tokens(prompt_format), dirs["spl_tokens"])
    dirs["en"] = train_sentencepiece(directory / "en", vocab_size=40, sentences=SENTENCES)
    dirs["de"] = train_sentencepiece(directory / "de", vocab_size=36, sentences=GERMAN)
    return dirs


def _encoder() -> dict[str, Any]:
    """Parakeet's release-shaped FastConformer section at Canary's tiny width."""
    return {
        **encoder_config(128),
        "d_model": ENC_WIDTH,
        "reduction": None,
        "reduction_position": None,
        "reduction_factor": 1,
    }


def model_config(prompt_format: str, tokenizer_dirs: dict[str, Path]) -> dict[str, Any]:
    """The ``model`` section of a release-shaped Canary config, shrunk."""
    langs = {lang: {"dir": str(d), "type": "bpe"} for lang, d in tokenizer_dirs.items()}
    cfg: dict[str, Any] = {
        "sample_rate": 16000,
        "prompt_format": prompt_format,
        "model_defaults": {"asr_enc_hidden": ENC_WIDTH, "lm_enc_hidden": DEC_WIDTH, "lm_dec_hidden": DEC_WIDTH},
        "tokenizer": {
            "dir": None,
            "type": "agg",
            "langs": langs,
            "custom_tokenizer": {"_target_": "nemo.collections.common.tokenizers.canary_tokenizer.CanaryTokenizer"},
        },
        "preprocessor": preprocessor_config(128),
        "spec_augment": dict(SPEC_AUGMENT),
        "encoder": _encoder(),
        "transf_encoder": {
            "_target_": "nemo.collections.asr.modules.transformer.transformer_encoders.TransformerEncoder",
            "num_layers": 0,
            "hidden_size": DEC_WIDTH,
            "inner_size": 4 * DEC_WIDTH,
            "num_attention_heads": 4,
            "ffn_dropout": 0.1,
            "attn_score_dropout": 0.1,
            "attn_layer_dropout": 0.1,
            "mask_future": False,
            "pre_ln": True,
            "pre_ln_final_layer_norm": True,
        },
        "transf_decoder": {
            "_target_": "nemo.collections.asr.modules.transformer.get_nemo_transformer",
            "model_name": None,
            "pretrained": False,
            "encoder": None,
            "pre_ln_final_layer_norm": True,
            "config_dict": {
                "max_sequence_length": MAX_SEQUENCE_LENGTH,
                "num_token_types": 0,
                "embedding_dropout": 0.1,
                "learn_positional_encodings": False,
                "hidden_size": DEC_WIDTH,
                "inner_size": 4 * DEC_WIDTH,
                "num_layers": 2,
                "num_attention_heads": 4,
                "ffn_dropout": 0.1,
                "attn_score_dropout": 0.1,
                "attn_layer_dropout": 0.1,
                "hidden_act": "relu",
                "pre_ln": True,
                "vocab_size": None,
            },
        },
        "head": {
            "_target_": "nemo.collections.asr.parts.submodules.token_classifier.TokenClassifier",
            "num_layers": 1,
            "activation": "relu",
            "log_softmax": True,
            "hidden_size": DEC_WIDTH,
            "num_classes": None,
            "dropout": 0.0,
            "use_transformer_init": True,
        },
        "decoding": {
            "strategy": "beam",
            "return_best_hypothesis": True,
            "beam": {"beam_size": 1, "len_pen": 0.0, "max_generation_delta": 50},
        },
        "loss": {
            "_target_": "nemo.collections.common.losses.smoothed_cross_entropy.SmoothedCrossEntropyLoss",
            "label_smoothing": 0.0,
            "pad_id": None,
        },
    }
    if prompt_format == "canary2":
        cfg["prompt_defaults"] = [
            {
                "role": "user",
                "slots": {
                    "decodercontext": "",
                    "source_lang": "<|en|>",
                    "target_lang": "<|en|>",
                    "emotion": "<|emo:undefined|>",
                    "pnc": "<|pnc|>",
                    "itn": "<|noitn|>",
                    "diarize": "<|nodiarize|>",
                    "timestamp": "<|notimestamp|>",
                },
            }
        ]
    else:
        cfg["prompt_defaults"] = [
            {
                "role": "user",
                "slots": {"source_lang": "en", "target_lang": "en", "task": "asr", "pnc": "yes"},
            }
        ]
    return cfg


EOS_BIAS = {"canary": 4.0, "canary2": 0.8}  # the head's end-of-text bias (see ``build``): found by trial
FINAL_NORM_SCALE = 3.0  # of the decoder's final LayerNorm weights: sharper random logits


def build(prompt_format: str, directory: Path, seed: int = 0):
    """Build a tiny random NeMo Canary model with ``prompt_format``; save it to
    ``directory / f"{prompt_format}.nemo"``.

    As in a trained release, the head never prefers a prompt-only special token or a padding
    id past the tokenizer's vocabulary (their output biases are low), and end-of-text gets a
    bias that ends most random transcripts within the decoder's positions; canary2's frame
    tokens keep biases near 0, so that a timestamps prompt gets words between them.

    Returns:
        (path of the .nemo archive, the NeMo model in eval mode)
    """
    from nemo.collections.asr.models import EncDecMultiTaskModel
    from omegaconf import OmegaConf

    tok_dirs = build_tokenizers(directory / f"{prompt_format}_tokenizers", prompt_format)
    torch.manual_seed(seed)
    model = EncDecMultiTaskModel(cfg=OmegaConf.create(model_config(prompt_format, tok_dirs)))
    with torch.no_grad():
        g = torch.Generator().manual_seed(seed)
        randomize(model, g)
        # Random-sign scales on the decoder's embedding and final norms: with NeMo's tied head, unit
        # scales make every random decoder repeat its input token for ever.
        decoder = model.transf_decoder
        width = decoder._embedding.layer_norm.weight.shape[0]
        decoder._embedding.layer_norm.weight.copy_(torch.randn(width, generator=g))
        decoder._decoder.final_layer_norm.weight.copy_(FINAL_NORM_SCALE * torch.randn(width, generator=g))
        tok = model.tokenizer
        bias = model.log_softmax.mlp.layer0.bias
        text_ids = [i for i in range(tok.vocab_size) if tok.langs_by_token_id[i] != "spl_tokens"]
        low = torch.full_like(bias, -20.0)
        low[text_ids] = bias[text_ids]
        low[tok.eos_id] = EOS_BIAS[prompt_format]
        for lang in LANGUAGES:  # <unk> of each language
            low[tok.token_id_offset[lang]] = -20.0
        if prompt_format == "canary2":  # canary2 writes frame tokens <|N|> around words when asked
            frames = [tok.special_tokens[f"<|{i}|>"] for i in range(N_TIMESTAMPS)]
            low[frames] = 0.5 * torch.randn(len(frames), generator=g, dtype=low.dtype)
        bias.copy_(low)
    path = directory / f"{prompt_format}.nemo"
    model.save_to(str(path))
    model.eval()
    return path, model

"""NeMo's own Parakeet checkpoints: a ``.nemo`` archive (``ModelPT.save_to``) or its unpacked
directory, of ``EncDecCTCModelBPE`` (CTC), ``EncDecRNNTBPEModel`` (RNN-T, or TDT when the config's
``decoding.model_type`` / ``loss.loss_name`` is ``tdt``) or ``EncDecHybridRNNTCTCBPEModel`` (a
transducer and an auxiliary CTC head on one encoder).

``model_config.yaml`` picks everything (``oasr.models.formats.nemo`` reads the archive and maps the
sections): the architecture (``parakeet`` / ``parakeet_transducer`` / ``parakeet_hybrid``), the
FastConformer encoder, the mel front end (``preprocessor``), the SentencePiece tokenizer
(``tokenizer.model_path``), the predictor and joint sizes and the greedy defaults of ``decoding``
(``greedy.max_symbols``, the TDT ``durations``). A key or value oasr does not implement is refused
naming both. Of ``decoding`` only what changes greedy tokens is read (``strategy``, ``model_type``,
``durations``, ``greedy.max_symbols``), and what shapes word and segment times
(``segment_seperators``, ``segment_gap_threshold``: ``DecodingSpec.params["timestamps"]`` per decode
type, read by ``engine/decode/nemo_times.py``; ``word_seperator`` must be a space); its alignment,
timestamp and confidence switches are not.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from oasr.models.base import DecodeType, DecodingSpec, LoadError
from oasr.models.formats.nemo import (
    ANY_VALUE,
    NEMO_COMPUTED_PREFIXES,
    NEMO_CONFIG,
    NEMO_CTC_RENAMES,
    NEMO_ENCODER_RENAMES,
    NEMO_TRANSDUCER_RENAMES,
    check_section,
    check_target,
    ctc_head_state,
    encoder_fields_from_nemo,
    is_nemo_checkpoint,
    mel_from_nemo,
    nemo_tokenizer_spec,
    read_nemo,
    rename,
    transducer_decoding,
)
from oasr.models.parakeet.config import (
    ParakeetConfig,
    ParakeetEncoderConfig,
    ParakeetHybridConfig,
    ParakeetTransducerConfig,
)
from oasr.models.registry import CheckpointBundle

CTC_ARCH = "parakeet"
TRANSDUCER_ARCH = "parakeet_transducer"
HYBRID_ARCH = "parakeet_hybrid"

# NeMo model classes (``target`` in model_config.yaml) -> the architecture that serves them.
_TARGETS = {
    "EncDecCTCModelBPE": CTC_ARCH,
    "EncDecRNNTBPEModel": TRANSDUCER_ARCH,
    "EncDecHybridRNNTCTCBPEModel": HYBRID_ARCH,
}

_CTC_DECODER_KEYS = {
    "_target_": ANY_VALUE,
    "feat_in": ANY_VALUE,
    "num_classes": ANY_VALUE,
    "vocabulary": ANY_VALUE,
    "init_mode": ANY_VALUE,
    "add_blank": (True,),
}
_PREDNET_KEYS = {
    "pred_hidden": ANY_VALUE,
    "pred_rnn_layers": ANY_VALUE,
    "t_max": ANY_VALUE,  # chrono initialisation
    "dropout": ANY_VALUE,
    "forget_gate_bias": ANY_VALUE,
    "weights_init_scale": ANY_VALUE,
    "hidden_hidden_bias_scale": ANY_VALUE,
    "rnn_hidden_size": (-1, None),
}
_DECODER_KEYS = {
    "_target_": ANY_VALUE,
    "prednet": ANY_VALUE,
    "vocab_size": ANY_VALUE,
    "normalization_mode": (None,),
    "random_state_sampling": (False,),
    "blank_as_pad": (True,),
}
_JOINTNET_KEYS = {
    "joint_hidden": ANY_VALUE,
    "activation": ("relu",),
    "dropout": ANY_VALUE,
    "encoder_hidden": ANY_VALUE,
    "pred_hidden": ANY_VALUE,
}
_JOINT_KEYS = {
    "_target_": ANY_VALUE,
    "jointnet": ANY_VALUE,
    "num_classes": ANY_VALUE,
    "num_extra_outputs": ANY_VALUE,
    "vocabulary": ANY_VALUE,
    "log_softmax": ANY_VALUE,  # greedy reads the argmax, the same with or without it
    "preserve_memory": ANY_VALUE,
    "fuse_loss_wer": ANY_VALUE,
    "fused_batch_size": ANY_VALUE,
    "experimental_fuse_loss_wer": ANY_VALUE,
    "masking_prob": ANY_VALUE,
}
_GREEDY_STRATEGIES = ("greedy", "greedy_batch")


def _section(cfg: Mapping[str, Any], key: str, where: Path) -> dict[str, Any]:
    value = cfg.get(key)
    if not isinstance(value, dict):
        raise LoadError(f"{where}: {NEMO_CONFIG} has no {key} section")
    return value


def _architecture(cfg: Mapping[str, Any], where: Path) -> str:
    """The architecture of a config: its ``target`` class, else its sections."""
    target = cfg.get("target")
    if target is not None:
        name = str(target).rsplit(".", 1)[-1]
        if name not in _TARGETS:
            raise LoadError(
                f"{where}: target={target!r} is not implemented by oasr (NeMo classes served: {sorted(_TARGETS)})"
            )
        return _TARGETS[name]
    if "joint" in cfg:
        return HYBRID_ARCH if "aux_ctc" in cfg else TRANSDUCER_ARCH
    return CTC_ARCH


def _greedy_strategy(decoding: Mapping[str, Any], where: str) -> None:
    strategy = decoding.get("strategy", "greedy_batch")
    if strategy not in _GREEDY_STRATEGIES:
        raise LoadError(f"{where}.strategy={strategy!r} is not implemented by oasr (supported: greedy, greedy_batch)")


def _timestamp_settings(decoding: Mapping[str, Any], where: str) -> dict[str, Any]:
    """What a ``decoding`` section sets for NeMo's word and segment times (unset: NeMo's defaults)."""
    separator = decoding.get("word_seperator", " ")
    if separator != " ":
        raise LoadError(f"{where}.word_seperator={separator!r} is not implemented by oasr (a space)")
    settings = {"segment_separators": decoding.get("segment_seperators")}
    settings["segment_gap_threshold"] = decoding.get("segment_gap_threshold")
    return {k: v for k, v in settings.items() if v is not None}


def _ctc_vocab(decoder: Mapping[str, Any], where: str) -> int:
    """CTC outputs of a ``ConvASRDecoder`` section: its classes and the blank after them."""
    check_target(decoder, "ConvASRDecoder", where)
    check_section(decoder, _CTC_DECODER_KEYS, where)
    return int(decoder["num_classes"]) + 1


class NemoParakeetConverter:
    """A ``.nemo`` archive or unpacked directory of a NeMo Parakeet (FastConformer) model: CTC ->
    ``parakeet``, RNN-T / TDT -> ``parakeet_transducer``, hybrid -> ``parakeet_hybrid``."""

    architecture = CTC_ARCH
    auto_detect = True
    expected_unused_prefixes: tuple[str, ...] = NEMO_COMPUTED_PREFIXES
    capability_drop_hints: Mapping[str, str] = {}

    def can_load(self, path: Path) -> bool:
        return is_nemo_checkpoint(Path(path))

    def load(self, path: Path) -> CheckpointBundle:
        ckpt = read_nemo(Path(path))
        cfg, where = ckpt.config, ckpt.source
        arch = _architecture(cfg, where)
        features = mel_from_nemo(_section(cfg, "preprocessor", where), "preprocessor")
        enc_fields = encoder_fields_from_nemo(
            _section(cfg, "encoder", where), int(features.params["feature_size"]), "encoder"
        )
        try:
            encoder = ParakeetEncoderConfig.from_dict(enc_fields)
        except (TypeError, ValueError) as e:
            raise LoadError(f"{where}: encoder: {e}") from e
        state = rename(ckpt.state_dict, NEMO_ENCODER_RENAMES)
        if arch == CTC_ARCH:
            vocab = _ctc_vocab(_section(cfg, "decoder", where), "decoder")
            _greedy_strategy(cfg.get("decoding") or {}, "decoding")
            config: Any = ParakeetConfig(encoder=encoder, vocab_size=vocab, blank_id=vocab - 1)
            timestamps = {"ctc": _timestamp_settings(cfg.get("decoding") or {}, "decoding")}
            decoding = DecodingSpec(DecodeType.CTC, params={"timestamps": timestamps})
        else:
            fields, durations = self._transducer(cfg, encoder, where)
            if arch == HYBRID_ARCH:
                aux = _section(cfg, "aux_ctc", where)
                ctc_vocab = _ctc_vocab(_section(aux, "decoder", where), "aux_ctc.decoder")
                _greedy_strategy(aux.get("decoding") or {}, "aux_ctc.decoding")
                if ctc_vocab != fields["vocab_size"]:
                    raise LoadError(
                        f"{where}: aux_ctc.decoder has {ctc_vocab} outputs, the transducer {fields['vocab_size']}"
                    )
                config = ParakeetHybridConfig(encoder=encoder, **fields, durations=durations)
            else:
                config = ParakeetTransducerConfig(encoder=encoder, **fields, durations=durations)
            timestamps = {"transducer": _timestamp_settings(cfg.get("decoding") or {}, "decoding")}
            if arch == HYBRID_ARCH:
                timestamps["ctc"] = _timestamp_settings(aux.get("decoding") or {}, "aux_ctc.decoding")
            spec = transducer_decoding(config, durations)
            decoding = DecodingSpec(spec.decode_type, params={**spec.params, "timestamps": timestamps})
        state = rename(state, (*NEMO_TRANSDUCER_RENAMES, *NEMO_CTC_RENAMES))
        if arch in (CTC_ARCH, HYBRID_ARCH):
            ctc_head_state(state, str(where))
        return CheckpointBundle(
            architecture=arch,
            config=config,
            state_dict=state,
            tokenizer=nemo_tokenizer_spec(ckpt, int(config.blank_id)),
            features=features,
            decoding=decoding,
            source=str(where),
            format="nemo",
        )

    def _transducer(
        self, cfg: Mapping[str, Any], encoder: ParakeetEncoderConfig, where: Path
    ) -> tuple[dict[str, Any], tuple[int, ...]]:
        """The predictor / joint fields and TDT durations of a transducer config."""
        decoder, joint = _section(cfg, "decoder", where), _section(cfg, "joint", where)
        check_target(decoder, "RNNTDecoder", "decoder")
        check_section(decoder, _DECODER_KEYS, "decoder")
        prednet = _section(decoder, "prednet", where)
        check_section(prednet, _PREDNET_KEYS, "decoder.prednet")
        check_target(joint, "RNNTJoint", "joint")
        check_section(joint, _JOINT_KEYS, "joint")
        jointnet = _section(joint, "jointnet", where)
        check_section(jointnet, _JOINTNET_KEYS, "joint.jointnet")
        pred_hidden, joint_hidden = int(prednet["pred_hidden"]), int(jointnet["joint_hidden"])
        if joint_hidden != pred_hidden:
            raise LoadError(
                f"{where}: joint.jointnet.joint_hidden={joint_hidden} != decoder.prednet.pred_hidden={pred_hidden} "
                "is not implemented by oasr"
            )
        if int(jointnet.get("encoder_hidden", encoder.hidden_size)) != encoder.hidden_size:
            raise LoadError(f"{where}: joint.jointnet.encoder_hidden={jointnet['encoder_hidden']} != d_model")
        decoding = cfg.get("decoding") or {}
        _greedy_strategy(decoding, "decoding")
        loss = cfg.get("loss") or {}
        tdt = decoding.get("model_type", "rnnt") == "tdt" or loss.get("loss_name") == "tdt"
        durations: tuple[int, ...] = ()
        if tdt:
            raw = decoding.get("durations") or (loss.get("tdt_kwargs") or {}).get("durations")
            if not raw:
                raise LoadError(f"{where}: a TDT config without decoding.durations")
            durations = tuple(int(d) for d in raw)
        extra = int(joint.get("num_extra_outputs", 0))
        if extra != len(durations):
            raise LoadError(
                f"{where}: joint.num_extra_outputs={extra} but the config names {len(durations)} TDT durations"
            )
        max_symbols = (decoding.get("greedy") or {}).get("max_symbols", 10)
        if not isinstance(max_symbols, int) or max_symbols < 1:
            raise LoadError(
                f"{where}: decoding.greedy.max_symbols={max_symbols!r} is not implemented by oasr (an integer >= 1)"
            )
        fields = {
            "vocab_size": int(joint["num_classes"]) + 1,
            "decoder_hidden_size": pred_hidden,
            "num_decoder_layers": int(prednet.get("pred_rnn_layers", 1)),
            "max_symbols_per_step": max_symbols,
        }
        return fields, durations


class NemoParakeetTransducerConverter(NemoParakeetConverter):
    """The same reader under ``parakeet_transducer`` for an explicit ``architecture=``."""

    architecture = TRANSDUCER_ARCH
    auto_detect = False


class NemoParakeetHybridConverter(NemoParakeetConverter):
    """The same reader under ``parakeet_hybrid`` for an explicit ``architecture=``."""

    architecture = HYBRID_ARCH
    auto_detect = False

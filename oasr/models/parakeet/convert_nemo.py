"""NeMo's own Parakeet checkpoints: a ``.nemo`` archive (``ModelPT.save_to``) or its unpacked
directory, of ``EncDecCTCModelBPE`` (CTC), ``EncDecRNNTBPEModel`` (RNN-T, or TDT when the config's
``decoding.model_type`` / ``loss.loss_name`` is ``tdt``) or ``EncDecHybridRNNTCTCBPEModel`` (a
transducer and an auxiliary CTC head on one encoder).

A CTC ``decoding`` (the CTC model's, the hybrid's ``aux_ctc.decoding``) is read whole by
``_ctc_decoding``: ``greedy`` / ``greedy_batch`` / ``beam_batch`` with its ``beam`` knobs and the
boosting trees' shapes become the CTC strategy's defaults (``DecodingSpec.params["ctc_decoding"]``);
NeMo's external decoders (``beam``, ``pyctcdecode``, ``flashlight``, ``wfst``) and n-gram LMs are
refused.

``model_config.yaml`` picks everything (``oasr.models.formats.nemo`` reads the archive and maps the
sections): the architecture (``parakeet`` / ``parakeet_transducer`` / ``parakeet_hybrid``), the
FastConformer encoder, the mel front end (``preprocessor``), the SentencePiece tokenizer
(``tokenizer.model_path``), the predictor and joint sizes and the greedy defaults of ``decoding``
(``greedy.max_symbols``, the TDT ``durations``). A key or value oasr does not implement is refused
naming both. Of ``decoding`` what changes tokens is read: ``model_type``, ``durations``,
``greedy.max_symbols``, and ``strategy`` with its ``beam`` section, which become the transducer's
default search (``transducer_search_defaults``: greedy / greedy_batch -> "greedy", malsd_batch ->
"malsd", maes -> "maes", beam -> "beam", with ``beam.beam_size``, ``score_norm``, ``max_symbols``
the ``maes_*`` settings and the boosting tree's shape; n-gram LM fusion and a phrase list of the
archive's own are refused); its alignment, timestamp and confidence switches are not, but what
shapes word and segment times is (``segment_seperators``, ``segment_gap_threshold``:
``DecodingSpec.params["timestamps"]`` per decode type, read by ``engine/decode/nemo_times.py``;
``word_seperator`` must be a space).
"""

from __future__ import annotations

import re
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
    cache_aware_fields_from_nemo,
    check_section,
    check_target,
    ctc_head_state,
    encoder_fields_from_nemo,
    is_nemo_checkpoint,
    mel_from_nemo,
    nemo_target,
    nemo_tokenizer_spec,
    read_nemo,
    rename,
    transducer_decoding,
)
from oasr.models.nemotron.search import NEMO_SEARCHES
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
# NeMo's transducer ``decoding.strategy`` -> the oasr search that equals it (``NEMO_SEARCHES``).
_TRANSDUCER_STRATEGIES = {
    "greedy": "greedy",
    "greedy_batch": "greedy",
    "malsd_batch": "malsd",
    "maes": "maes",
    "beam": "beam",
}
# ``decoding.beam``: what the searches read (the boosting tree's shape and weight: malsd boosts the
# request's hotwords with it), the switches without effect on the best hypothesis's tokens, and
# NeMo's n-gram LM fusion, accepted only switched off.
_BEAM_KEYS = {
    "beam_size": ANY_VALUE,  # checked below
    "score_norm": (True, False),
    "return_best_hypothesis": (True, False),  # oasr returns the best; NeMo's N-best list starts with it
    "max_symbols": ANY_VALUE,  # checked below
    "maes_num_steps": ANY_VALUE,  # read by maes, which checks them
    "maes_prefix_alpha": ANY_VALUE,
    "maes_expansion_gamma": ANY_VALUE,
    "maes_expansion_beta": ANY_VALUE,
    "softmax_temperature": (1.0,),
    "ngram_lm_model": (None,),
    "ngram_lm_alpha": ANY_VALUE,  # without a model: no effect
    "boosting_tree": ANY_VALUE,  # checked by _boosting: its shape, no phrases of its own
    "boosting_tree_alpha": ANY_VALUE,
    "language_model": (None,),
    "hat_subtract_ilm": (False,),
    "hat_ilm_weight": ANY_VALUE,
    "blank_lm_score_mode": ("lm_weighted_full", "no_score"),  # how malsd fuses the boosting tree
    "pruning_mode": ("late", "early"),
    "allow_cuda_graphs": ANY_VALUE,
    "preserve_alignments": ANY_VALUE,
    "compute_timestamps": ANY_VALUE,
    "preserve_frame_confidence": ANY_VALUE,
    "tsd_max_sym_exp": ANY_VALUE,  # the searches oasr does not run (tsd, alsd, nsc)
    "tsd_max_sym_exp_per_step": ANY_VALUE,
    "alsd_max_target_len": ANY_VALUE,
    "nsc_max_timesteps_expansion": ANY_VALUE,
    "nsc_prefix_alpha": ANY_VALUE,
}
_MAES_KEYS = ("maes_num_steps", "maes_prefix_alpha", "maes_expansion_gamma", "maes_expansion_beta")

# A cache-aware encoder's architecture, by the plain one of its heads.
CACHE_AWARE_ARCHS = {
    CTC_ARCH: "parakeet_cache_aware",
    TRANSDUCER_ARCH: "parakeet_cache_aware_transducer",
    HYBRID_ARCH: "parakeet_cache_aware_hybrid",
}


def _causal_stage(m: re.Match) -> str:
    """``pre_encode.conv.<i>`` of a causal dw_striding subsampling (NeMo's Sequential: conv, act,
    then [depthwise, pointwise, act] per stage) -> Nemotron's subsampling names."""
    i = int(m.group(1))
    if i == 0:
        return "encoder.subsampling.conv_in."
    stage, k = divmod(i - 2, 3)
    return f"encoder.subsampling.layers.{stage}.{('depthwise_conv', 'pointwise_conv')[k]}."


NEMO_CAUSAL_SUBSAMPLING_RENAMES = ((re.compile(r"^encoder\.pre_encode\.conv\.(\d+)\."), _causal_stage),)


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


def _timestamp_settings(decoding: Mapping[str, Any], where: str) -> dict[str, Any]:
    """What a ``decoding`` section sets for NeMo's word and segment times (unset: NeMo's defaults)."""
    separator = decoding.get("word_seperator", " ")
    if separator != " ":
        raise LoadError(f"{where}.word_seperator={separator!r} is not implemented by oasr (a space)")
    settings = {"segment_separators": decoding.get("segment_seperators")}
    settings["segment_gap_threshold"] = decoding.get("segment_gap_threshold")
    return {k: v for k, v in settings.items() if v is not None}


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise LoadError(f"{where}={value!r} is not implemented by oasr (an integer >= 1)")
    return value


def transducer_search_defaults(decoding: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The transducer search a NeMo ``decoding`` section makes the default: ``search`` (an oasr
    search name), ``beam_size`` and the ``beam`` settings the searches read (``score_norm``,
    ``max_symbols``, ``maes_*``, and for malsd's phrase boosting the boosting tree's shape,
    ``boosting_tree_alpha``, ``pruning_mode``, ``blank_lm_score_mode``).

    Raises:
        LoadError: a strategy or beam setting oasr does not implement, naming key and value.
    """
    strategy = decoding.get("strategy", "greedy_batch")
    search = _TRANSDUCER_STRATEGIES.get(strategy)
    if search is None or search not in NEMO_SEARCHES:
        served = [k for k, v in _TRANSDUCER_STRATEGIES.items() if v in NEMO_SEARCHES]
        raise LoadError(f"{where}.strategy={strategy!r} is not implemented by oasr (supported: {served})")
    beam = decoding.get("beam") or {}
    if not isinstance(beam, Mapping):
        raise LoadError(f"{where}.beam={beam!r} is not a section")
    check_section(beam, _BEAM_KEYS, f"{where}.beam")
    size = _count(beam.get("beam_size", 4), f"{where}.beam.beam_size")  # NeMo's BeamRNNTInferConfig default
    max_symbols = beam.get("max_symbols", 10)
    if max_symbols is not None:
        _count(max_symbols, f"{where}.beam.max_symbols")
    params = {
        "score_norm": bool(beam.get("score_norm", True)),
        "max_symbols": max_symbols,
        **_boosting(beam, f"{where}.beam"),
    }
    params["pruning_mode"] = str(beam.get("pruning_mode", "late"))
    params["blank_lm_score_mode"] = str(beam.get("blank_lm_score_mode", "lm_weighted_full"))
    params.update({key: beam[key] for key in _MAES_KEYS if key in beam})
    return {"search": search, "beam_size": size, "beam": params}


def _ctc_vocab(decoder: Mapping[str, Any], where: str) -> int:
    """CTC outputs of a ``ConvASRDecoder`` section: its classes and the blank after them."""
    check_target(decoder, "ConvASRDecoder", where)
    check_section(decoder, _CTC_DECODER_KEYS, where)
    return int(decoder["num_classes"]) + 1


_CTC_STRATEGIES = ("greedy", "greedy_batch", "beam_batch")
_CTC_REFUSED = {
    "beam": "NeMo's 'beam' runs the external DeepSpeech decoder over a KenLM model; 'beam_batch' is its own search",
    "pyctcdecode": "an external decoder (pyctcdecode)",
    "flashlight": "an external decoder (flashlight)",
    "wfst": "an external WFST decoder (Riva / k2)",
}
_BOOSTING_KEYS = {
    "model_path": (None,),
    "key_phrases_file": (None,),
    "key_phrases_list": (None, []),
    "key_phrase_items_list": (None, []),
    "context_score": ANY_VALUE,
    "depth_scaling": ANY_VALUE,
    "unk_score": ANY_VALUE,
    "final_eos_score": ANY_VALUE,
    "score_per_phrase": ANY_VALUE,
    "source_lang": ANY_VALUE,
    "use_triton": ANY_VALUE,
    "uniform_weights": (False, True),
    "use_bpe_dropout": (False,),
    "num_of_transcriptions": ANY_VALUE,
    "bpe_alpha": ANY_VALUE,
}
_FUSION_KEYS = {  # what greedy_batch and beam_batch share: n-gram LM (refused) and boosting
    "ngram_lm_model": (None,),
    "ngram_lm_alpha": ANY_VALUE,
    "boosting_tree": ANY_VALUE,  # checked by _BOOSTING_KEYS
    "boosting_tree_alpha": ANY_VALUE,
    "allow_cuda_graphs": ANY_VALUE,
    "preserve_alignments": ANY_VALUE,
    "compute_timestamps": ANY_VALUE,
}
_CTC_GREEDY_KEYS = {**_FUSION_KEYS, "preserve_frame_confidence": ANY_VALUE, "confidence_method_cfg": ANY_VALUE}
_CTC_BEAM_KEYS = {
    **_FUSION_KEYS,
    "beam_size": ANY_VALUE,
    "search_type": ANY_VALUE,  # picks the external decoder of 'beam', unused by 'beam_batch'
    "return_best_hypothesis": (True,),
    "beam_alpha": ANY_VALUE,  # deprecated name of ngram_lm_alpha
    "beam_beta": ANY_VALUE,
    "beam_threshold": ANY_VALUE,
    "kenlm_path": (None,),
    "flashlight_cfg": ANY_VALUE,
    "pyctcdecode_cfg": ANY_VALUE,
}
_CTC_DECODING_KEYS = {
    "strategy": ANY_VALUE,  # checked against _CTC_STRATEGIES
    "greedy": ANY_VALUE,
    "beam": ANY_VALUE,
    "wfst": ANY_VALUE,  # read by the 'wfst' strategy only
    "preserve_alignments": ANY_VALUE,
    "compute_timestamps": ANY_VALUE,
    "word_seperator": ANY_VALUE,
    "segment_seperators": ANY_VALUE,
    "segment_gap_threshold": ANY_VALUE,
    "ctc_timestamp_type": ANY_VALUE,
    "batch_dim_index": (0,),
    "confidence_cfg": ANY_VALUE,
    "temperature": (1.0, 1),
}


def _number(section: Mapping[str, Any], key: str, default: float, where: str, minimum: float | None = None) -> float:
    value = section.get(key, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not abs(value) < float("inf"):
        raise LoadError(f"{where}.{key}={value!r} is not implemented by oasr (a finite number)")
    if minimum is not None and value < minimum:
        raise LoadError(f"{where}.{key}={value!r} is not implemented by oasr (at least {minimum})")
    return float(value)


def _boosting(section: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The boosting-tree shape and weight of a ``greedy`` / ``beam`` section (its phrases come
    with each request's ``hotwords``; an archive's own phrase list or tree file is refused)."""
    tree = section.get("boosting_tree") or {}
    if not isinstance(tree, Mapping):
        raise LoadError(f"{where}.boosting_tree={tree!r} is not a section")
    check_section(tree, _BOOSTING_KEYS, f"{where}.boosting_tree")
    fields = {
        name: _number(tree, name, default, f"{where}.boosting_tree")
        for name, default in (
            ("context_score", 1.0),
            ("depth_scaling", 2.0),
            ("unk_score", 0.0),
            ("final_eos_score", 1.0),
            ("score_per_phrase", 0.0),
        )
    }
    fields["uniform_weights"] = bool(tree.get("uniform_weights", False))
    return {"boosting": fields, "boosting_alpha": _number(section, "boosting_tree_alpha", 0.0, where, minimum=0.0)}


def _ctc_decoding(decoding: Mapping[str, Any], where: str, merged: bool) -> dict[str, Any]:
    """The CTC decoding an archive's ``decoding`` section declares, as NeMo's ``CTCDecoding``
    reads it: a missing key takes the fallback NeMo's code gives it where the section is used as
    saved (``merged`` False: a CTC model as restored; ``beam_size`` 1, ``beam_beta`` 0), else the
    default of NeMo's ``CTCDecodingConfig`` it is merged with (``merged``: the hybrid's CTC head,
    which ``change_decoding_strategy(decoder_type="ctc")`` sets up; ``beam_size`` 4, ``beam_beta`` 1).
    Read:
    the strategy (``greedy`` / ``greedy_batch``: greedy, ``beam_batch``: oasr's NeMo-equal batched
    beam search), the beam's size, ``beam_beta`` and ``beam_threshold``, and for phrase boosting
    the boosting tree's shape and ``boosting_tree_alpha`` of each search.

    Raises:
        LoadError: a strategy that runs an external decoder or an n-gram LM, or another key or
            value oasr does not implement, named with its value.
    """
    check_section(decoding, _CTC_DECODING_KEYS, where)
    strategy = decoding.get("strategy", "greedy_batch")
    if strategy not in _CTC_STRATEGIES:
        why = _CTC_REFUSED.get(strategy, "not a NeMo CTC strategy")
        raise LoadError(
            f"{where}.strategy={strategy!r} is not implemented by oasr ({why}; supported: {list(_CTC_STRATEGIES)})"
        )
    greedy, beam = decoding.get("greedy") or {}, decoding.get("beam") or {}
    check_section(greedy, _CTC_GREEDY_KEYS, f"{where}.greedy")
    check_section(beam, _CTC_BEAM_KEYS, f"{where}.beam")
    size = beam.get("beam_size", 4 if merged else 1)
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise LoadError(f"{where}.beam.beam_size={size!r} is not implemented by oasr (an integer >= 1)")
    return {
        "strategy": strategy,
        "beam_size": size if strategy == "beam_batch" else 1,
        "greedy": _boosting(greedy, f"{where}.greedy"),
        "beam": {
            "beam_size": size,
            "beam_beta": _number(beam, "beam_beta", 1.0 if merged else 0.0, f"{where}.beam"),
            "beam_threshold": _number(beam, "beam_threshold", 20.0, f"{where}.beam", minimum=1e-6),
            **_boosting(beam, f"{where}.beam"),
        },
    }


def _with_ctc_decoding(spec: DecodingSpec, cfg: Mapping[str, Any]) -> DecodingSpec:
    """``spec`` with the CTC head's decoding (``params["ctc_decoding"]``, see ``_ctc_decoding``):
    a CTC model's ``decoding``, or a hybrid's ``aux_ctc.decoding`` (for ``decode_type="ctc"``)."""
    if spec.decode_type is DecodeType.CTC:
        ctc = _ctc_decoding(cfg.get("decoding") or {}, "decoding", merged=False)
    elif isinstance(cfg.get("aux_ctc"), Mapping):
        ctc = _ctc_decoding(cfg["aux_ctc"].get("decoding") or {}, "aux_ctc.decoding", merged=True)
    else:
        return spec
    return DecodingSpec(spec.decode_type, params={**spec.params, "ctc_decoding": ctc})


class NemoParakeetConverter:
    """A ``.nemo`` archive or unpacked directory of a NeMo Parakeet (FastConformer) model: CTC ->
    ``parakeet``, RNN-T / TDT -> ``parakeet_transducer``, hybrid -> ``parakeet_hybrid``."""

    architecture = CTC_ARCH
    auto_detect = True
    expected_unused_prefixes: tuple[str, ...] = NEMO_COMPUTED_PREFIXES
    capability_drop_hints: Mapping[str, str] = {}

    def can_load(self, path: Path) -> bool:
        # Canary's EncDecMultiTaskModel is the canary family's (oasr.models.canary.convert).
        return is_nemo_checkpoint(Path(path)) and nemo_target(Path(path)) != "EncDecMultiTaskModel"

    def load(self, path: Path) -> CheckpointBundle:
        ckpt = read_nemo(Path(path))
        cfg, where = ckpt.config, ckpt.source
        arch = _architecture(cfg, where)
        features = mel_from_nemo(_section(cfg, "preprocessor", where), "preprocessor")
        enc = _section(cfg, "encoder", where)
        enc_fields = encoder_fields_from_nemo(enc, int(features.params["feature_size"]), "encoder", cache_aware=True)
        cache_aware = cache_aware_fields_from_nemo(enc, "encoder")
        state = ckpt.state_dict
        try:
            if cache_aware is None:
                encoder: Any = ParakeetEncoderConfig.from_dict(enc_fields)
            else:
                encoder = self._cache_aware_encoder(enc, {**enc_fields, **cache_aware}, where)
                state = rename(state, NEMO_CAUSAL_SUBSAMPLING_RENAMES)
        except (TypeError, ValueError) as e:
            raise LoadError(f"{where}: encoder: {e}") from e
        state = rename(state, NEMO_ENCODER_RENAMES)
        if arch == CTC_ARCH:
            vocab = _ctc_vocab(_section(cfg, "decoder", where), "decoder")
            config: Any = ParakeetConfig(encoder=encoder, vocab_size=vocab, blank_id=vocab - 1)
            timestamps = {"ctc": _timestamp_settings(cfg.get("decoding") or {}, "decoding")}
            decoding = DecodingSpec(DecodeType.CTC, params={"timestamps": timestamps})
        else:
            fields, durations, search = self._transducer(cfg, encoder, where)
            if arch == HYBRID_ARCH:
                aux = _section(cfg, "aux_ctc", where)
                ctc_vocab = _ctc_vocab(_section(aux, "decoder", where), "aux_ctc.decoder")
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
            decoding = transducer_decoding(config, durations)
            params = {**decoding.params, **search, "timestamps": timestamps}
            decoding = DecodingSpec(decoding.decode_type, params=params)
        state = rename(state, (*NEMO_TRANSDUCER_RENAMES, *NEMO_CTC_RENAMES))
        if arch in (CTC_ARCH, HYBRID_ARCH):
            ctc_head_state(state, str(where))
        if cache_aware is not None:
            from oasr.models.parakeet.cache_aware import CACHE_AWARE_CONFIGS

            config = CACHE_AWARE_CONFIGS[type(config)](**vars(config))
            arch = CACHE_AWARE_ARCHS[arch]
        return CheckpointBundle(
            architecture=arch,
            config=config,
            state_dict=state,
            tokenizer=nemo_tokenizer_spec(ckpt, int(config.blank_id)),
            features=features,
            decoding=_with_ctc_decoding(decoding, cfg),
            source=str(where),
            format="nemo",
        )

    @staticmethod
    def _cache_aware_encoder(enc: Mapping[str, Any], fields: dict[str, Any], where: Path) -> Any:
        """The cache-aware encoder config of ``fields`` (a causal subsampling's).

        Raises:
            LoadError: a cache-aware encoder without ``causal_downsampling`` (not implemented).
        """
        from oasr.models.parakeet.cache_aware import CacheAwareEncoderConfig

        if not enc.get("causal_downsampling", False):
            raise LoadError(
                f"{where}: encoder.causal_downsampling=False with att_context_style="
                f"{fields['att_context_style']!r}, conv_context_size={list(fields['conv_context_size'])}, "
                f"conv_norm_type={fields['conv_norm']!r} is not implemented by oasr (a cache-aware encoder "
                "subsamples causally)"
            )
        return CacheAwareEncoderConfig.from_dict(fields)

    def _transducer(
        self, cfg: Mapping[str, Any], encoder: ParakeetEncoderConfig, where: Path
    ) -> tuple[dict[str, Any], tuple[int, ...], dict[str, Any]]:
        """The predictor / joint fields, TDT durations and default search of a transducer config."""
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
        search = transducer_search_defaults(decoding, "decoding")
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
        return fields, durations, search


class NemoParakeetTransducerConverter(NemoParakeetConverter):
    """The same reader under ``parakeet_transducer`` for an explicit ``architecture=``."""

    architecture = TRANSDUCER_ARCH
    auto_detect = False


class NemoParakeetHybridConverter(NemoParakeetConverter):
    """The same reader under ``parakeet_hybrid`` for an explicit ``architecture=``."""

    architecture = HYBRID_ARCH
    auto_detect = False


class NemoCacheAwareConverter(NemoParakeetConverter):
    """The same reader under the cache-aware architectures, for an explicit ``architecture=``."""

    auto_detect = False


class NemoCacheAwareCtcConverter(NemoCacheAwareConverter):
    architecture = CACHE_AWARE_ARCHS[CTC_ARCH]


class NemoCacheAwareTransducerConverter(NemoCacheAwareConverter):
    architecture = CACHE_AWARE_ARCHS[TRANSDUCER_ARCH]


class NemoCacheAwareHybridConverter(NemoCacheAwareConverter):
    architecture = CACHE_AWARE_ARCHS[HYBRID_ARCH]

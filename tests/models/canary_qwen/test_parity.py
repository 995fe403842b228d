"""Canary-Qwen against NeMo's ``SALM`` on the tiny checkpoint it saved: the prompt as SALM's
``qwen`` formatter encodes it, then stage by stage in float64 (NeMo's features, the perception's
states, the prompt's embeddings with the audio spliced in, the LLM's logits at the first
generated position, LoRA merged on oasr's side and applied by PEFT on NeMo's), and greedy
tokens through ``oasr.ASREngine`` (float32, both clips in one batch) equal to ``SALM.generate``
(float32, each clip alone)."""

from __future__ import annotations

import pytest
import torch

from oasr.models import load_pretrained
from oasr.models.parakeet.features import ParakeetFrontend
from tests.models.canary_qwen.reference import PROMPT, salm_greedy
from tests.models.parakeet.conftest import parity
from tests.models.parakeet.test_nemo_archive import _exact_filters

MAX_NEW = 12


def _close(ours: torch.Tensor, ref: torch.Tensor, what: str, max_abs: float = 1e-6) -> None:
    cos, err = parity(ours, ref)
    assert cos > 1 - 1e-12 and err < max_abs, f"{what}: cosine {cos:.14f}, max-abs {err:.3g}"


def _salm_prompt(ref) -> list[int]:
    from nemo.collections.common.prompts import PromptFormatter

    formatter = PromptFormatter.resolve(ref.cfg.prompt_format)(ref.tokenizer)
    return formatter.encode_dialog(turns=[{"role": "user", "content": PROMPT}])["input_ids"].tolist()


@pytest.fixture(scope="module")
def ref64(salm):
    from nemo.collections.speechlm2.models import SALM

    # Read back from the saved directory, as a user would (a deep copy of the built model would
    # keep method wrappers bound to the float32 original).
    ref = SALM.from_pretrained(str(salm.path)).double().eval()
    _exact_filters(ref.perception)  # NeMo's front end in float64 throughout
    return ref


@pytest.fixture(scope="module")
def ours64(salm):
    lm = load_pretrained(salm.path)
    lm.model.double()
    return lm


def test_prompt_ids_equal_salms_formatter(salm, ours64):
    want = _salm_prompt(salm.model)
    got = ours64.model.prompt_ids(1)
    assert got == want
    assert want.count(salm.model.audio_locator_tag_id) == 1
    assert ours64.model.config.audio_token_id == salm.model.audio_locator_tag_id
    assert ours64.model.stop_ids == (salm.model.text_eos_id,)


@torch.no_grad()
def test_every_stage_matches_salm_in_float64(ref64, ours64, waveforms):
    from nemo.collections.speechlm2.models.salm import replace_placeholders_and_build_targets
    from nemo.collections.speechlm2.parts.pretrained import move_embedding

    model = ours64.model
    frontend = ParakeetFrontend.from_spec(ours64.feature_spec, dtype=torch.float64)
    tag = ref64.audio_locator_tag_id
    for i, wave in enumerate(waveforms):
        x = torch.from_numpy(wave).double()[None]
        n_samples = torch.tensor([x.shape[1]])
        # The featurizer itself: the preprocessor's wrapper would cast to float32.
        want_feats, n = ref64.perception.preprocessor.featurizer(x, n_samples)  # (1, F, T)
        feats, lens = frontend.features(x, n_samples)
        assert int(lens[0]) == int(n[0])
        _close(feats, want_feats.transpose(1, 2)[:, : int(n[0])], f"clip {i}: features")

        want_audio, want_len = ref64.perception(processed_signal=want_feats, processed_signal_length=n)
        audio, n_audio = model.encode_offline(want_feats.transpose(1, 2), n)
        assert n_audio.tolist() == want_len.tolist()
        # Not 1e-13: NeMo computes its relative-position table in float32 (then cast).
        _close(audio, want_audio, f"clip {i}: perception (encoder, modality adapter, projection)")

        tokens = torch.tensor([_salm_prompt(ref64)])
        want_embeds, _, mask = replace_placeholders_and_build_targets(
            input_ids=tokens,
            embeds=ref64.embed_tokens(tokens.where(tokens != tag, 0)),
            padding_id=ref64.text_pad_id,
            placeholder_id=tag,
            replacements=[want_audio[0, : int(want_len[0])]],
        )
        with move_embedding(ref64):
            want_logits = ref64.llm(inputs_embeds=want_embeds, attention_mask=mask).logits[:, -1]
        ids = torch.tensor([model.prompt_ids(int(n_audio[0]))])
        valid = torch.ones_like(ids, dtype=torch.bool)
        embeds = model.embed_prompt(ids, valid, audio, n_audio)
        _close(embeds, want_embeds, f"clip {i}: prompt embeddings")
        logits = model.decoder(embeds, valid)[:, -1]
        _close(logits, want_logits, f"clip {i}: first-step logits", max_abs=1e-5)


def test_engine_greedy_tokens_equal_salm_generate(salm, waveforms):
    import oasr

    want = [salm_greedy(salm.model, wave, MAX_NEW) for wave in waveforms]
    engine = oasr.ASREngine(str(salm.path))
    outputs = engine.transcribe(list(waveforms), max_new_tokens=MAX_NEW)
    for out, tokens in zip(outputs, want):
        assert [t for s in out.segments for t in s.tokens] == tokens
        assert out.text == salm.model.tokenizer.ids_to_text(tokens).strip()
        assert out.finish_reason == ("length" if len(tokens) == MAX_NEW else "stop")

"""A Nemotron 3.5 release's tokenizer carries language tags (``<en-US>``) as special tokens, which
the model emits; the transcript never shows them (issue 26, item 5).

The tiny checkpoint of the parity tests gets ``<en-US>`` as a special added token and a joint bias
toward it, so that its greedy search emits the tag between its other labels. Against the model's
own greedy search (held to transformers' ``generate`` in ``test_parity.py``), decoded by
transformers' tokenizer with ``skip_special_tokens=True`` (as its processor does):

* ``ASREngine.transcribe`` gives that text, and its segments' tokens are the labels without the tag;
* ``ASREngine.open_stream`` fed the same audio in pieces gives the same tokens and text.
"""

from __future__ import annotations

import pytest
import torch

import oasr
from oasr.audio import load_audio
from tests.models.nemotron.conftest import save_nemotron_checkpoint

TAG = "<en-US>"
CLIPS = ("speechbrain_spk1_snt1.wav", "sense_and_sensibility_01_austen_64kb-0890.wav")


@pytest.fixture(scope="module")
def tagged(tmp_path_factory):
    # Seed and bias chosen so that the tag is a few of the labels, not none or all of them.
    return save_nemotron_checkpoint(tmp_path_factory.mktemp("nemotron_tagged"), seed=5, tags=(TAG,), tag_bias=12.0)


@pytest.fixture(scope="module")
def engine(tagged):
    return oasr.ASREngine(str(tagged.path))


def _labels(out) -> list[int]:
    return [t for seg in out.segments for t in seg.tokens]


@pytest.mark.parametrize("clip", CLIPS)
def test_offline_and_streamed_transcripts_drop_the_language_tag(engine, tagged, audio_dir, clip):
    audio = load_audio(str(audio_dir / clip))
    tag = tagged.tokenizer.convert_tokens_to_ids(TAG)
    assert tag in engine.strategy.skip_ids

    # The model's own labels over the engine's features, the tag among them.
    feats = engine.strategy.frontend(audio)
    with torch.no_grad():
        labels = engine.model.greedy_decode(feats[None], torch.tensor([feats.shape[0]])).tokens[0]
    assert 0 < labels.count(tag) < len(labels) // 10, "the fixture should emit the tag among other labels"
    expected = tagged.tokenizer.decode(labels, skip_special_tokens=True, group_tokens=False)

    offline = engine.transcribe(audio)
    assert TAG not in offline.text
    assert _labels(offline) == [t for t in labels if t != tag]
    assert offline.text == expected.strip()

    stream = engine.open_stream()
    for at in range(0, audio.size, 3200):
        stream.feed(audio[at : at + 3200])
    assert stream.finish()[-1].type == "done"
    assert _labels(stream.output) == _labels(offline)
    assert stream.output.text == offline.text

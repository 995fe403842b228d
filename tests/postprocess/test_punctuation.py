"""The CT-Transformer post-processor against funasr 1.4.16 on a tiny random model written by
funasr's own classes in the released layout: float64 logits equal to ``punc_forward``, a padded
batch equal to its rows alone, and the punctuated text and ``punc_array`` of
``AutoModel.generate`` exactly, for Chinese, English and mixed text, texts past ``split_size``
(the unfinished tail carried into the next mini-sentence) and past the 200-word tail limit."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from oasr.models.base import LoadError
from oasr.postprocess.punctuation import load_punctuator, split_words
from tests.postprocess._funasr_punc import CHARS, WORDS

funasr = pytest.importorskip(
    "funasr", reason="funasr is not installed (pip install torch==2.13.0 funasr==1.4.16): no reference"
)

ZH = "我们都是木头人不会讲话不会动"
EN = "hello world how are you today"
MIXED = "我们 hello world 今天天气很好 i am fine 你在做什么"
LONG_ZH = "今天天气很好你在做什么我们都是木头人不会讲话不会动他说的对" * 4  # 120 words: 6 rounds
LONG_EN = "hello world how are you today i am fine thank you the weather is nice " * 5
UNKNOWN = "Zebra 斑马 crossing 我们 x9 ok"  # words the table lacks: <unk>
TEXTS = [ZH, EN, MIXED, LONG_ZH, LONG_EN, UNKNOWN, "他", "hello"]


@pytest.fixture(scope="module")
def punc_dir(tmp_path_factory) -> Path:
    from tests.postprocess._funasr_punc import write_funasr_punc_dir

    return write_funasr_punc_dir(tmp_path_factory.mktemp("punc") / "ct-punc")


@pytest.fixture(scope="module")
def comma_dir(tmp_path_factory) -> Path:
    """A model that writes commas and never a period: a tail grows past 200 words and is cut."""
    from tests.postprocess._funasr_punc import write_funasr_punc_dir

    return write_funasr_punc_dir(tmp_path_factory.mktemp("punc") / "commas", bias=[-9.0, 1.0, 0.6, -9.0, -9.0, -9.0])


def _reference(directory: Path):
    from funasr import AutoModel

    # ncpu: funasr sets torch's thread count to it (default 4), which would outlive the fixture.
    return AutoModel(
        model=str(directory),
        disable_update=True,
        device="cpu",
        log_level="ERROR",
        disable_pbar=True,
        ncpu=torch.get_num_threads(),
    )


@pytest.fixture(scope="module")
def reference(punc_dir):
    return _reference(punc_dir)


def _generate(reference, text: str) -> tuple[str, list[int]]:
    out = reference.generate(input=text, disable_pbar=True)[0]
    return out["text"], [int(x) for x in out["punc_array"].reshape(-1).tolist()]


def test_logits_equal_funasr_in_float64(punc_dir, reference):
    ref = reference.model.double().eval()
    ours = load_punctuator(punc_dir)
    ours.model.double()
    table = json.loads((punc_dir / "tokens.json").read_text(encoding="utf-8"))
    rows = [[table.index(w) if w in table else table.index("<unk>") for w in split_words(t)][:40] for t in TEXTS]
    batch = ours.logits(rows)  # one padded forward
    for row, got in zip(rows, batch):
        ids = torch.tensor([row])
        want, _ = ref.punc_forward(ids, torch.tensor([len(row)]))
        got = got[: len(row)]
        cos = torch.nn.functional.cosine_similarity(got.flatten(), want[0].flatten(), dim=0)
        assert cos > 1 - 1e-12
        assert (got - want[0]).abs().max() < 1e-10
    ref.float()


def test_text_equals_funasr_generate(punc_dir, reference):
    ours = load_punctuator(punc_dir)
    got = ours.punctuate(TEXTS)  # all texts in lockstep, one forward per round
    for text, result in zip(TEXTS, got):
        want_text, want_marks = _generate(reference, text)
        assert result.text == want_text, text
        assert result.punc_array == result.marks == want_marks, text
        assert "".join(result.pieces) == result.text
    # the fixture exercises what it claims: marks of every kind, a carried tail
    marks = {m for r in got for m in r.marks}
    assert {2, 3, 4, 5} <= marks
    assert len(split_words(LONG_ZH)) > 5 * ours.split_size


def test_long_tail_cut_at_a_comma_equals_funasr(comma_dir):
    text = " ".join(CHARS * 10)  # 250 words, no period anywhere
    ours = load_punctuator(comma_dir).punctuate([text, ZH])
    for t, result in zip([text, ZH], ours):
        want_text, want_marks = _generate(_reference(comma_dir), t)
        assert (result.text, result.punc_array) == (want_text, want_marks)
    assert "。" in ours[0].text[:-1]  # the cut comma became a period before the end


def test_word_level_model_equals_funasr(tmp_path):
    """ct-punc's kind: a jieba_usr_dict in the directory; jieba cuts the Chinese runs into words."""
    pytest.importorskip("jieba", reason="jieba is not installed (the punc extra): no word-level model")
    from tests.postprocess._funasr_punc import write_funasr_punc_dir

    directory = write_funasr_punc_dir(tmp_path / "large", seed=2, word_level=True)
    texts = [ZH, MIXED, LONG_ZH, "我们 hello world 木头人不会讲话 i am fine 今天天气很好 x9 ok 你在做什么"]
    ours = load_punctuator(directory)
    assert ours.word_level
    got = ours.punctuate(texts)
    reference = _reference(directory)
    assert reference.model.jieba_usr_dict is not None  # funasr took the word-level path too
    for text, result in zip(texts, got):
        want_text, want_array = _generate(reference, text)
        assert (result.text, result.punc_array) == (want_text, want_array), text
    assert "木头人不会" in got[0].words and len(got[0].punc_array) > len(got[0].marks)  # the user dictionary's word


def test_batch_equals_one_at_a_time(punc_dir):
    ours = load_punctuator(punc_dir)
    together = [r.text for r in ours.punctuate(TEXTS + ["", "   "])]
    assert together == [ours.punctuate([t])[0].text for t in TEXTS] + ["", ""]


def test_has_punctuation_reads_both_forms(punc_dir):
    ours = load_punctuator(punc_dir)
    assert ours.has_punctuation("你好，世界") and ours.has_punctuation("hello, world")
    assert not ours.has_punctuation("hello world 你好") and not ours.has_punctuation("don't")


def test_a_word_level_model_without_jieba_says_how_to_get_it(punc_dir, tmp_path, monkeypatch):
    import shutil

    directory = shutil.copytree(punc_dir, tmp_path / "large")
    (directory / "jieba_usr_dict").write_text("木头人 100 n\n", encoding="utf-8")
    monkeypatch.setitem(sys.modules, "jieba", None)  # import jieba fails
    with pytest.raises(LoadError, match=r"needs jieba: pip install"):
        load_punctuator(directory)


def test_bad_directories_are_refused(punc_dir, tmp_path):
    with pytest.raises(LoadError, match="not a directory"):
        load_punctuator(tmp_path / "nowhere")
    for name in ("config.yaml", "model.pt", "tokens.json"):
        broken = tmp_path / name
        broken.mkdir()
        for other in ("config.yaml", "model.pt", "tokens.json"):
            if other != name:
                (broken / other).write_bytes((punc_dir / other).read_bytes())
        with pytest.raises(LoadError, match=f"no {name}"):
            load_punctuator(broken)
    (broken / "model.pt").write_bytes(b"not a checkpoint")  # the directory without tokens.json, given them
    (broken / "tokens.json").write_bytes((punc_dir / "tokens.json").read_bytes())
    with pytest.raises(LoadError, match="not a torch state dict"):
        load_punctuator(broken)
    other_table = tmp_path / "other"
    other_table.mkdir()
    for other in ("config.yaml", "model.pt"):
        (other_table / other).write_bytes((punc_dir / other).read_bytes())
    (other_table / "tokens.json").write_text(json.dumps(["<unk>", *WORDS]), encoding="utf-8")
    with pytest.raises(LoadError, match="does not match config.yaml"):
        load_punctuator(other_table)

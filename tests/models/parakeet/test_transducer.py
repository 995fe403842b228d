"""oasr's Parakeet RNN-T and TDT against transformers' ``ParakeetForRNNT`` / ``ParakeetForTDT`` on
the same saved checkpoint, in float64: encoder states, predictor and joint (token and duration
logits), and batched greedy labels, frames and TDT durations against ``generate`` for a padded
batch of unequal lengths and for one clip."""

from __future__ import annotations

import pytest
import torch

import oasr
from oasr.models.parakeet.convert import HFParakeetConverter
from oasr.models.registry import detect_architecture
from tests.models.parakeet.conftest import hf_features, parity, randomize_, train_tokenizer

TINY_ENCODER = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    subsampling_conv_channels=8,
    num_mel_bins=80,
    conv_kernel_size=9,
)
DURATIONS = (0, 1, 2, 3, 4)
DURATION_BIAS = (0.75, 2.0, 1.5, 1.0, 0.5)


def _shape_(model: torch.nn.Module, seed: int, blank_bias: float) -> None:
    """A stronger predictor, a zero-mean head and a blank bias, so greedy rows mix blanks,
    single labels and runs (the random init emits the same label on every step)."""
    g = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    with torch.no_grad():
        model.decoder.decoder_projector.weight.mul_(4)
        model.decoder.embedding.weight.mul_(3)
        head = model.joint.head
        head.weight.copy_(
            torch.randn(head.weight.shape, generator=g, dtype=head.weight.dtype) * 2 / head.in_features**0.5
        )
        head.bias.zero_()
        head.bias[model.config.blank_token_id] = blank_bias
        if head.out_features > vocab:  # TDT: durations of one frame or more are likelier than zero
            head.weight[vocab:] *= 0.25
            head.bias[vocab:] = torch.tensor(DURATION_BIAS, dtype=head.bias.dtype)


def _save(path, kind: str, seed: int = 0):
    from transformers import (
        ParakeetFeatureExtractor,
        ParakeetForRNNT,
        ParakeetForTDT,
        ParakeetProcessor,
        ParakeetRNNTConfig,
        ParakeetTDTConfig,
        ParakeetTokenizer,
    )

    tokenizer = train_tokenizer()
    common = dict(
        encoder_config=TINY_ENCODER,
        vocab_size=len(tokenizer) + 1,
        blank_token_id=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        decoder_hidden_size=24,
        max_symbols_per_step=5 if kind == "rnnt" else 10,
    )
    if kind == "rnnt":
        config, cls = ParakeetRNNTConfig(**common), ParakeetForRNNT
    else:
        config, cls = ParakeetTDTConfig(**common, durations=list(DURATIONS)), ParakeetForTDT
    torch.manual_seed(seed)
    model = cls(config).eval()
    randomize_(model, seed)
    _shape_(model, seed + 1, 6.0 if kind == "rnnt" else 4.0)
    model.save_pretrained(path)
    fe = ParakeetFeatureExtractor()
    ParakeetProcessor(feature_extractor=fe, tokenizer=tokenizer, decoder_type=kind).save_pretrained(path)
    return model.double(), ParakeetTokenizer.from_pretrained(path), fe


@pytest.fixture(scope="module", params=["rnnt", "tdt"])
def case(request, tmp_path_factory, waveforms):
    path = tmp_path_factory.mktemp(f"parakeet_{request.param}_tiny")
    model, tokenizer, fe = _save(path, request.param)
    loaded = oasr.load_pretrained(path)
    assert loaded.report.ok and not loaded.report.dropped, loaded.report.summary()
    loaded.model.double()
    feats, mask = hf_features(fe, waveforms)
    return request.param, path, model, tokenizer, loaded, feats.double(), mask


def _generate(model, feats, mask):
    """transformers' greedy labels per row: (tokens, frames, durations)."""
    blank = model.config.blank_token_id
    with torch.no_grad():
        out = model.generate(
            input_features=feats, attention_mask=mask, decoder_start_token_id=blank, max_new_tokens=8 * feats.shape[1]
        )
        enc_lens = model.encoder._get_subsampling_output_length(mask.sum(-1)).tolist()
    rows = []
    for seq, dur, n in zip(out.sequences.tolist(), out.durations.tolist(), enc_lens):
        frame, toks, frames, durs = 0, [], [], []
        for tok, d in zip(seq[1:], dur[1:]):  # column 0 is the start token
            if frame >= n:
                break
            if tok != blank:
                toks.append(tok)
                frames.append(frame)
                durs.append(d)
            frame += d
        assert frame >= n, "generate stopped before the row's last frame"
        rows.append((toks, frames, durs))
    return rows


def test_detected_as_a_parakeet_transducer(case):
    kind, path, model, tokenizer, loaded, _, _ = case
    name, converter = detect_architecture(path)
    assert name == "parakeet" and isinstance(converter, HFParakeetConverter)
    ours = loaded.model
    assert ours.architecture == "parakeet_transducer"
    assert ours.capabilities == frozenset({oasr.models.DecodeType.TRANSDUCER})
    assert ours.blank_id == len(tokenizer) and ours.blank_id in loaded.tokenizer_spec.special_ids
    assert ours.durations == (DURATIONS if kind == "tdt" else ())
    assert loaded.decoding_spec.params["durations"] == ours.durations
    assert loaded.feature_spec.kind == "parakeet_mel"
    explicit = oasr.load_pretrained(path, architecture="parakeet_transducer")
    assert explicit.model.architecture == "parakeet_transducer"


def test_encoder_predictor_and_joint_match(case):
    _, _, ref, _, loaded, feats, mask = case
    ours = loaded.model
    with torch.no_grad():
        theirs = ref.get_audio_features(input_features=feats, attention_mask=mask)
        hidden, lens = ours.encode_offline(feats, mask.sum(-1))
        projected = ours.joiner.project_encoder(hidden)
        assert torch.equal(lens, theirs.attention_mask.sum(-1).long())
        for row, n in enumerate(lens.tolist()):
            for mine, their in ((hidden, theirs.last_hidden_state), (projected, theirs.pooler_output)):
                cos, err = parity(mine[row, :n], their[row, :n])
                assert cos >= 0.99999 and err <= 1e-6, (row, cos, err)
        blank = ours.blank_id
        labels = torch.tensor([[blank, 3, 17, 17, 40], [blank, 8, 1, 30, 5]])
        their_pred = ref.decoder(labels)
        state, preds = ours.predictor.init_state(2), []
        for u in range(labels.shape[1]):
            if u:
                state = ours.predictor.advance(state, labels[:, u], torch.ones(2, dtype=torch.bool))
            preds.append(ours.predictor.predict(state))
        my_pred = torch.stack(preds, dim=1)
        enc = theirs.pooler_output[:2, :16, None]
        their_joint = ref.joint(decoder_hidden_states=their_pred[:, None], encoder_hidden_states=enc)
        my_joint = ours.joiner.join(enc, my_pred[:, None])
    for what, mine, their in (("predictor", my_pred, their_pred), ("joint", my_joint, their_joint)):
        cos, err = parity(mine, their)
        assert cos >= 0.99999 and err <= 1e-6, (what, cos, err)


def test_greedy_batch_and_one_clip_match_generate(case):
    kind, _, ref, tokenizer, loaded, feats, mask = case
    ours = loaded.model
    theirs = _generate(ref, feats, mask)
    mine = ours.greedy_decode(feats, mask.sum(-1))
    emitted = 0
    for row, (tokens, frames, durations) in enumerate(theirs):
        assert mine.tokens[row] == tokens, row
        assert mine.frames[row] == frames, row
        if kind == "tdt":
            assert mine.durations[row] == durations, row
        emitted += len(tokens)
    assert emitted > 30, "the random model should emit labels; the comparison is vacuous otherwise"
    if kind == "tdt":
        all_durations = {d for row in mine.durations for d in row}
        assert 0 in all_durations and len(all_durations) >= 3, all_durations
    else:
        assert mine.durations is None
    n = int(mask[0].sum())
    alone = _generate(ref, feats[:1, :n], mask[:1, :n])
    one = ours.greedy_decode(feats[:1, :n], torch.tensor([n]))
    assert (one.tokens[0], one.frames[0]) == alone[0][:2]
    special = set(loaded.tokenizer_spec.special_ids)
    text = loaded.tokenizer.decode([i for i in mine.tokens[0] if i not in special])
    assert text == tokenizer.decode(theirs[0][0], skip_special_tokens=True, group_tokens=False)

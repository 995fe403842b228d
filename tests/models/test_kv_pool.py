"""The per-row K/V pool: select (reorder / expand / drop) and merge keep every row's
cache intact, checked against decoding each row alone."""

from __future__ import annotations

import ctypes
import mmap
import sys

import pytest
import torch

from oasr.models.decoders.kv_pool import zeros_on_demand
from oasr.models.whisper.config import WhisperConfig
from oasr.models.whisper.model import WhisperModel


def _model() -> WhisperModel:
    torch.manual_seed(0)
    cfg = WhisperConfig(
        n_mels=8,
        n_audio_ctx=10,
        n_audio_state=16,
        n_audio_head=2,
        n_audio_layer=1,
        n_vocab=50,
        n_text_ctx=32,
        n_text_state=16,
        n_text_head=2,
        n_text_layer=2,
    )
    return WhisperModel(cfg).eval()


def _alone(model, memory, prompt, continuation):
    """Logits of one row decoded by itself."""
    pool = model.decoder.new_pool(1, 1)
    logits, st = model.decoder.prefill(pool, torch.tensor([prompt]), torch.tensor([len(prompt)]), memory=memory[None])
    out = [logits[0]]
    for t in continuation:
        out.append(model.decoder.step(st, torch.tensor([t]))[0])
    return torch.stack(out)


@torch.no_grad()
def test_select_merge_match_single_row_decodes():
    model = _model()
    dec = model.decoder
    mem = torch.randn(3, 10, 16)
    prompts = [[1, 2, 3], [4, 5], [6, 7, 8, 9]]
    conts = [[10, 11, 12], [13, 14, 15], [16, 17, 18]]
    ref = [_alone(model, mem[i], prompts[i], conts[i]) for i in range(3)]

    pool = dec.new_pool(8, 4)
    lens = torch.tensor([3, 2])
    toks = torch.tensor([[1, 2, 3], [4, 5, 0]])
    logits, a = dec.prefill(pool, toks, lens, memory=mem[:2])
    torch.testing.assert_close(logits[0], ref[0][0])
    torch.testing.assert_close(logits[1], ref[1][0])
    # Row 0 expands to two hypotheses (a beam), row 1 stays one: not uniform groups.
    a = dec.select(a, [0, 0, 1])
    assert a.group_size is None and a.n_groups == 2
    lg = dec.step(a, torch.tensor([10, 10, 13]))
    torch.testing.assert_close(lg[0], ref[0][1])
    torch.testing.assert_close(lg[1], ref[0][1])
    torch.testing.assert_close(lg[2], ref[1][1])
    # Drop the duplicate hypothesis, then a third request joins after the running rows.
    a = dec.select(a, [0, 2])
    assert a.group_size == 1
    logits_c, c = dec.prefill(
        pool,
        torch.tensor([[6, 7, 8, 9]]),
        torch.tensor([4]),
        row0=a.row0 + a.n_rows,
        group0=a.group0 + a.n_groups,
        memory=mem[2:3],
    )
    torch.testing.assert_close(logits_c[0], ref[2][0])
    assert dec.can_merge(a, c)
    a = dec.merge(a, c)
    lg = dec.step(a, torch.tensor([11, 14, 16]))
    for i, j in enumerate((2, 2, 1)):
        torch.testing.assert_close(lg[i], ref[i][j])
    # Swap-remove the first request: the last row moves into its place.
    a = dec.select(a, [2, 1])
    lg = dec.step(a, torch.tensor([17, 15]))
    torch.testing.assert_close(lg[0], ref[2][2])
    torch.testing.assert_close(lg[1], ref[1][3])


@torch.no_grad()
def test_beam_groups_share_cross_attention():
    model = _model()
    dec = model.decoder
    mem = torch.randn(2, 10, 16)
    pool = dec.new_pool(6, 2)
    _, st = dec.prefill(pool, torch.tensor([[1, 2], [3, 4]]), torch.tensor([2, 2]), memory=mem)
    st = dec.select(st, [0, 0, 0, 1, 1, 1])
    assert st.group_size == 3
    fast = dec.step(st, torch.tensor([5, 6, 7, 8, 9, 10]))
    ref = [
        _alone(model, mem[g], [1, 2] if g == 0 else [3, 4], [t])
        for g, t in zip([0, 0, 0, 1, 1, 1], [5, 6, 7, 8, 9, 10])
    ]
    for i in range(6):
        torch.testing.assert_close(fast[i], ref[i][1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mincore(2) is Linux's")
def test_cpu_pool_takes_memory_only_where_written():
    """A CPU pool is zeros that cost nothing until touched: of a 64 MiB buffer, writing one
    element and reading a few makes at most a (huge) page resident, not the buffer
    (``torch.zeros`` writes, and keeps, all of it)."""
    t = zeros_on_demand((16, 1 << 20), "cpu", torch.float32)
    assert t.shape == (16, 1 << 20) and t.dtype == torch.float32
    t[5, 7] = 1.5
    assert t[5, :16].tolist() == [0.0] * 7 + [1.5] + [0.0] * 8
    page = mmap.PAGESIZE
    n_pages = t.nbytes // page
    vec = (ctypes.c_ubyte * n_pages)()
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.mincore(ctypes.c_void_p(t.data_ptr()), ctypes.c_size_t(t.nbytes), vec) == 0
    resident = sum(b & 1 for b in vec)
    assert 1 <= resident * page <= 2 * (1 << 20)
    assert zeros_on_demand((2, 0, 3), "cpu", torch.bfloat16).shape == (2, 0, 3)

"""``Packing``: pad / unpad round trips, and the gapped layout that keeps a depthwise
convolution from reading across rows."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from oasr.layers import ConformerConvolution
from oasr.layers.packing import Packing, as_packed, as_rows

LENGTHS = [5, 0, 11, 1, 7]


def _packed(lengths, width=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    rows = [torch.randn(n, width, generator=g) for n in lengths]
    return rows, torch.cat(rows)


def test_pad_unpad_split_round_trip():
    rows, x = _packed(LENGTHS)
    p = Packing(torch.tensor(LENGTHS))
    assert (p.batch, p.total, p.max_len) == (5, 24, 11)
    assert p.cu_seqlens.tolist() == [0, 5, 5, 16, 17, 24]
    padded = p.pad(x, value=-1.0)
    assert padded.shape == (5, 11, 3)
    for i, r in enumerate(rows):
        assert torch.equal(padded[i, : len(r)], r)
        assert (padded[i, len(r) :] == -1.0).all()
    assert p.valid().sum(dim=1).tolist() == LENGTHS
    assert torch.equal(p.unpad(padded), x)
    assert torch.equal(p.unpad(F.pad(padded, (0, 0, 0, 4))), x)  # frames past the longest row are ignored
    assert [len(r) for r in p.split(x)] == LENGTHS
    assert p.position.tolist()[:7] == [0, 1, 2, 3, 4, 0, 1]
    again = Packing.from_cu_seqlens(p.cu_seqlens)
    assert torch.equal(again.flat_index, p.flat_index)
    assert as_rows(x, None) is x and as_packed(x, None) is x
    assert torch.equal(as_packed(as_rows(x, p), p), x)


@pytest.mark.parametrize("kernel,padding", [(7, (3, 3)), (8, (3, 4)), (5, (4, 0))])
def test_gapped_convolution_equals_each_row_alone(kernel, padding):
    rows, x = _packed(LENGTHS, width=4, seed=1)
    weight = torch.randn(4, 1, kernel)
    p = Packing(torch.tensor(LENGTHS))
    buf, index = p.gapped(x.t()[None], padding)  # (1, C, N + B * (k - 1))
    assert buf.shape[-1] == p.total + p.batch * (kernel - 1)
    out = F.conv1d(buf, weight, groups=4).index_select(-1, index)[0].t()  # (N, C)
    expected = [F.conv1d(F.pad(r.t()[None], padding), weight, groups=4)[0].t() for r in rows if len(r)]
    torch.testing.assert_close(out, torch.cat(expected), atol=1e-6, rtol=0)


@pytest.mark.parametrize("norm", ["batch_norm", "layer_norm"])
def test_conformer_convolution_packed_equals_padded(norm):
    torch.manual_seed(0)
    conv = ConformerConvolution(6, 8, norm=norm, padding=(3, 4)).eval()
    for param in conv.parameters():
        torch.nn.init.normal_(param, std=0.3)
    rows, x = _packed(LENGTHS, width=6, seed=2)
    p = Packing(torch.tensor(LENGTHS))
    with torch.no_grad():
        packed = conv(x, packing=p)
        padded = conv(p.pad(x), p.valid())
    torch.testing.assert_close(packed, p.unpad(padded), atol=1e-5, rtol=0)


def test_bad_packings_are_refused():
    with pytest.raises(ValueError, match=">= 0"):
        Packing(torch.tensor([3, -1]))
    with pytest.raises(ValueError, match=r"\(B,\)"):
        Packing(torch.ones(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="start at 0"):
        Packing.from_cu_seqlens(torch.tensor([1, 4]))
    p = Packing(torch.tensor([2, 3]))
    with pytest.raises(ValueError, match="holds 5"):
        p.pad(torch.zeros(4, 2))
    with pytest.raises(ValueError, match="does not hold"):
        p.unpad(torch.zeros(2, 2, 1))
    empty = Packing(torch.tensor([0, 0]))
    assert empty.pad(torch.zeros(0, 3)).shape == (2, 0, 3)

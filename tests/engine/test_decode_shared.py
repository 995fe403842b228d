"""The pieces the decode strategies share: the request table (``decode/requests.py``) and the
logit processors (``decode/logits.py``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from oasr.engine.config import EngineConfig, TranscribeOptions
from oasr.engine.decode.base import Request, StepEvent
from oasr.engine.decode.logits import SamplingParams, TokenRules, apply_token_rules, filter_scores
from oasr.engine.decode.requests import RequestTable, TableEntry
from oasr.engine.outputs import RequestOutput
from oasr.models.base import DecodeType

# ---------------------------------------------------------------------------
# The request table


class _ToyTable(RequestTable[TableEntry]):
    """One step finishes every queued request, except ids starting with "bad", which fail."""

    decode_type = DecodeType.CTC

    def __init__(self) -> None:
        super().__init__(SimpleNamespace(model=None), EngineConfig())
        self.queue: list[TableEntry] = []
        self.prepared: list[str] = []

    def prepare(self, request: Request) -> Request:
        self.prepared.append(request.request_id)
        request.features = "feats"
        return request

    def _new_entry(self, request: Request) -> TableEntry:
        return TableEntry(request, request.options)

    def _enqueue(self, entry: TableEntry) -> None:
        self.queue.append(entry)

    def _forget(self, entry: TableEntry) -> None:
        assert torch.is_inference_mode_enabled()
        self.queue.remove(entry)

    def _waiting_tasks(self) -> int:
        return len(self.queue)

    def step(self) -> list[StepEvent]:
        events: list[StepEvent] = []
        for entry in self.queue:
            if entry.rid.startswith("bad"):
                self._fail(entry, ValueError("bad"), events)
            elif self._remove(entry):
                self._complete(entry, RequestOutput(request_id=entry.rid, text="ok", segments=[]), events)
        self.queue = []
        return events


def test_request_table_bookkeeping():
    table = _ToyTable()
    for rid in ("a", "b", "bad"):
        table.add_request(Request(rid, None, TranscribeOptions()))
    assert table.prepared == ["a", "b", "bad"]  # prepare-if-missing
    with pytest.raises(ValueError, match="duplicate request id 'a'"):
        table.add_request(Request("a", None, TranscribeOptions()))
    assert table.abort("b") and not table.abort("b") and not table.abort("unknown")
    assert table.num_unfinished() == 2 and table.stats()["waiting_tasks"] == 2
    events = table.step()
    assert [(e.request_id, e.kind) for e in events] == [("a", "finished"), ("bad", "error")]
    assert table.num_unfinished() == 0
    stats = table.stats()
    assert (stats["requests_finished"], stats["requests_failed"], stats["requests_aborted"]) == (1, 1, 1)
    assert stats["running_rows"] == 0 and stats["joins_running"] == 0  # the names AsyncEngine reads


# ---------------------------------------------------------------------------
# The logit processors


def test_filter_scores_rows_are_independent():
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(4, 50, generator=g)
    params = SamplingParams(temperature=0.7, top_k=9, top_p=0.8)
    batched = filter_scores(scores, params)
    for r in range(4):
        assert torch.equal(batched[r], filter_scores(scores[r], params))
    assert int(torch.isfinite(batched).sum(-1).max()) <= 9


def test_token_rules_penalty_ngram_ban_and_suppression():
    logits = torch.tensor([[2.0, -1.0, 0.5, 1.0, 3.0], [1.0, 1.0, 1.0, 1.0, 1.0], [1.0, 2.0, 3.0, 4.0, 5.0]])
    shared = TokenRules(suppress=(4,))
    rows = [
        (TokenRules(suppress=(4,), repetition_penalty=2.0), [0, 1, 0]),
        (TokenRules(no_repeat_ngram_size=2), [1, 2, 1]),  # "1 2" seen: 2 may not follow 1 again
        (shared, [3]),
    ]
    apply_token_rules(logits, rows)
    inf = float("-inf")
    assert logits.tolist() == [[1.0, -2.0, 0.5, 1.0, inf], [1.0, 1.0, inf, 1.0, 1.0], [1.0, 2.0, 3.0, 4.0, inf]]

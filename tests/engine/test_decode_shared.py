"""The pieces the decode strategies share: the request table (``decode/requests.py``), the
autoregressive scheduler (``decode/autoregressive.py``) and the logit processors
(``decode/logits.py``).

The scheduler is checked on a tiny float64 causal LM: tasks that join a running batch (with
the pool growing under them), finish, and are discarded mid-decode must each get, step after
step, the logits of the same prompt decoded alone.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from oasr.engine.config import EngineConfig, TranscribeOptions
from oasr.engine.decode.autoregressive import Cohort, compaction_order, select_rows
from oasr.engine.decode.base import Request, StepEvent
from oasr.engine.decode.logits import SamplingParams, TokenRules, apply_token_rules, filter_scores
from oasr.engine.decode.requests import RequestTable, TableEntry
from oasr.engine.outputs import RequestOutput
from oasr.models.base import DecodeType
from oasr.models.decoders.causal_lm import CausalLm
from tests.models.tiny_configs import TINY_CONFIGS

ABS_MAX = 1e-9


# ---------------------------------------------------------------------------
# The scheduler


def _lm() -> CausalLm:
    """The tiny speech-LLM's text decoder (``tests/models/tiny_configs.py``), random, in float64."""
    torch.manual_seed(0)
    lm = CausalLm(TINY_CONFIGS["speech_llm"]().text).double().eval()
    with torch.no_grad():
        for p in lm.parameters():
            p.normal_(0.0, 0.3)
    return lm


def _inputs(lm: CausalLm, prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Prefill inputs of prompts of one length (no padding)."""
    ids = torch.tensor(prompts)
    return lm.embed(ids), torch.ones(ids.shape, dtype=torch.bool)


def _solo(lm: CausalLm, prompt: list[int], steps: int) -> list[torch.Tensor]:
    """Greedy logits of one prompt decoded alone: after the prefill, then after each step."""
    pool = lm.new_pool(1, max_len=64)
    logits, state = lm.prefill(pool, *_inputs(lm, [prompt]))
    out = [logits[0]]
    for _ in range(steps):
        logits = lm.step(state, logits.argmax(-1))
        out.append(logits[0])
    return out


@torch.inference_mode()
def test_cohort_rows_follow_their_tasks_through_joins_growth_finishes_and_discards():
    lm = _lm()
    prompts = {0: [5, 9, 2], 1: [3, 3, 8], 2: [11, 4, 8, 1, 6, 2, 9, 9], 3: [7, 1, 2, 3, 4, 5, 6, 0]}
    finish_after = {1: 1}  # task 1 stops after its first step
    n_steps = 4
    expected = {t: _solo(lm, p, n_steps) for t, p in prompts.items()}
    seen: dict[int, list[torch.Tensor]] = {t: [] for t in prompts}
    cohort: Cohort[int] = Cohort(lm, torch.device("cpu"))
    cohort.waiting.extend(prompts)
    steps_done = dict.fromkeys(prompts, 0)

    def greedy(logits: torch.Tensor):
        def update(task: int, lo: int, hi: int):
            seen[task].append(logits[lo])
            if task in finish_after and steps_done[task] >= finish_after[task]:
                return None
            return [0], [int(logits[lo].argmax())]

        return update

    def join(n: int) -> int:
        tasks = cohort.take(n, lambda t: False)
        need = max(len(prompts[t]) for t in tasks) + n_steps + 1
        cohort.reserve_length(need, rows=4, len_step=4, max_len=64, dtype=torch.float64)
        logits, new = lm.prefill(cohort.pool, *_inputs(lm, [prompts[t] for t in tasks]), row0=cohort.next_row0)
        return cohort.admit(new, *select_rows(tasks, [1] * len(tasks), greedy(logits), compact=False))

    def advance() -> None:
        logits = cohort.step(lm)
        for t in cohort.tasks:
            steps_done[t] += 1
        cohort.keep(*select_rows(cohort.tasks, [1] * len(cohort.tasks), greedy(logits)))

    assert join(2) == 0  # tasks 0 and 1 start the batch
    first_pool = cohort.pool
    advance()
    assert cohort.tasks == [0]  # task 1 finished
    assert join(2) == 2  # tasks 2 and 3 join the running batch, in a longer pool
    assert cohort.pool is not first_pool and cohort.pool.max_len > first_pool.max_len
    advance()
    cohort.discard(lambda t: t == 0)
    assert cohort.tasks == [3, 2] and cohort.n_rows == 2  # the last survivor filled the hole
    advance()
    advance()
    for task, got in seen.items():
        assert got, f"task {task} was never decoded"
        for i, (a, b) in enumerate(zip(got, expected[task])):
            err = float((a - b).abs().max())
            assert err <= ABS_MAX, f"task {task}, position {i}: max-abs {err:.3e} against its solo decode"
    assert [len(seen[t]) for t in range(4)] == [3, 2, 4, 4]
    cohort.release()
    assert cohort.pool is None and cohort.n_rows == 0


def test_select_rows_reorders_beams_and_compacts_finished_tasks():
    # Three tasks of two rows each; task "b" finishes, task "c" swaps its beams.
    answers = {"a": ([0, 1], [10, 11]), "b": None, "c": ([1, 1], [30, 31])}
    idx, tokens, alive = select_rows(["a", "b", "c"], [2, 2, 2], lambda t, lo, hi: answers[t])
    assert alive == ["a", "c"] and idx == [0, 1, 5, 5] and tokens == [10, 11, 30, 31]
    assert compaction_order([0, 2, 4], 5) == [0, 2, 1]  # the last survivor fills position 1


# ---------------------------------------------------------------------------
# The request table


class _ToyTable(RequestTable[TableEntry]):
    """One step finishes every queued request, except ids starting with "bad", which fail."""

    decode_type = DecodeType.CTC

    def __init__(self) -> None:
        super().__init__(SimpleNamespace(model=None, languages=None), EngineConfig())
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

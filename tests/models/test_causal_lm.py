"""The shared Qwen2 / Qwen3 causal LM against transformers' ``Qwen2ForCausalLM`` /
``Qwen3ForCausalLM`` built from tiny random configs, in float64.

Checked: hidden states and logits of a left-padded batch of unequal prompts (HF with
its attention mask and ``position_ids = cumsum(mask) - 1``), greedy prefill + step
against HF ``generate``, ``select`` with repeated indices and ``merge`` of two
prefilled states against a fresh prefill, tied and untied embeddings, and the
defaults ``from_hf`` fills for omitted text-config fields.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from oasr.models.decoders.causal_lm import CausalLm, CausalLmConfig
from oasr.models.decoders.kv_pool import PoolExhausted

transformers = pytest.importorskip("transformers")

COS_MIN = 1 - 1e-5
ABS_MAX = 1e-4
VOCAB = 97
PROMPT_LENS = (9, 5, 2)  # unequal, left-padded into one batch

# (family, tied) pairs; Qwen3 gets an explicit head_dim that differs from hidden / heads.
CASES = [("qwen2", False), ("qwen2", True), ("qwen3", False), ("qwen3", True)]


def _hf_config(family: str, tied: bool) -> dict:
    cfg = {
        "model_type": family,
        "vocab_size": VOCAB,
        "hidden_size": 32,
        "intermediate_size": 48,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 64,
        "rope_theta": 1000.0,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": tied,
        "pad_token_id": 0,
        "bos_token_id": None,
        "eos_token_id": None,
    }
    if family == "qwen3":
        cfg.update(head_dim=16, attention_bias=not tied)
    return cfg


def _build(family: str, tied: bool, seed: int = 0):
    """The HF reference (float64, SDPA attention: its eager path turns fully masked
    padding queries into NaN in float64, which then reach the valid rows) and a
    CausalLm loaded from its state dict by name."""
    cfg = _hf_config(family, tied)
    hf_cls = transformers.Qwen3ForCausalLM if family == "qwen3" else transformers.Qwen2ForCausalLM
    conf_cls = transformers.Qwen3Config if family == "qwen3" else transformers.Qwen2Config
    torch.manual_seed(seed)
    hf_conf = conf_cls(**{k: v for k, v in cfg.items() if k != "model_type"})
    hf_conf._attn_implementation = "sdpa"
    hf = hf_cls(hf_conf).double().eval()
    with torch.no_grad():  # HF initialises biases and norms to constants: randomise every tensor
        for p in hf.parameters():
            p.normal_(0.0, 0.3 if p.dim() > 1 else 0.5)
            if p.dim() == 1 and p.numel() in (32, 16):  # norm weights around 1
                p.add_(1.0)
    lm = CausalLm(CausalLmConfig.from_hf(cfg)).double().eval()
    sd = {}
    for name, t in hf.state_dict().items():
        if name == "lm_head.weight" and tied:
            continue
        sd[name.removeprefix("model.")] = t
    lm.load_state_dict(sd, strict=True)
    return hf, lm


def _prompts(seed: int = 1) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, VOCAB, (n,), generator=g).tolist() for n in PROMPT_LENS]


def _left_pad(prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    t = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), t, dtype=torch.long)
    valid = torch.zeros(len(prompts), t, dtype=torch.bool)
    for i, p in enumerate(prompts):
        ids[i, t - len(p) :] = torch.tensor(p)
        valid[i, t - len(p) :] = True
    return ids, valid


def _hf_positions(mask: torch.Tensor) -> torch.Tensor:
    return (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 1)


def _close(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    x, y = a.detach().double().flatten(), b.detach().double().flatten()
    cos = float(torch.nn.functional.cosine_similarity(x, y, dim=0))
    mad = float((x - y).abs().max())
    assert cos >= COS_MIN and mad <= ABS_MAX, f"{what}: cosine {cos:.8f}, max-abs {mad:.3e}"


@pytest.mark.parametrize(("family", "tied"), CASES)
def test_hidden_and_logits_match_transformers(family, tied):
    hf, lm = _build(family, tied)
    ids, valid = _left_pad(_prompts())
    with torch.no_grad():
        out = hf.model(input_ids=ids, attention_mask=valid.long(), position_ids=_hf_positions(valid))
        hf_hidden = out.last_hidden_state
        hf_logits = hf.lm_head(hf_hidden)
        hidden = lm.forward_hidden(lm.embed(ids), valid)
        logits = lm.logits(hidden)
    assert hidden.dtype == torch.float64
    _close(hidden[valid], hf_hidden[valid], f"{family} hidden")
    _close(logits[valid], hf_logits[valid], f"{family} logits")
    # Prefill into the pool returns the logits at each row's last position.
    pool = lm.new_pool(4, max_len=32)
    with torch.no_grad():
        last, state = lm.prefill(pool, lm.embed(ids), valid)
    _close(last, hf_logits[:, -1], f"{family} prefill logits")
    assert state.lengths == list(PROMPT_LENS)
    # An unpadded single row agrees with its row of the padded batch.
    with torch.no_grad():
        solo = lm.forward_hidden(lm.embed(ids[2:, -2:]), valid[2:, -2:])
    _close(solo[0], hidden[2, -2:], f"{family} single row vs padded batch")


def _greedy(lm: CausalLm, prompts: list[list[int]], n_new: int) -> list[list[int]]:
    ids, valid = _left_pad(prompts)
    pool = lm.new_pool(len(prompts), max_len=ids.shape[1] + n_new)
    out = [[] for _ in prompts]
    with torch.no_grad():
        logits, state = lm.prefill(pool, lm.embed(ids), valid)
        for _ in range(n_new):
            tok = logits.argmax(-1)
            for i, t in enumerate(tok.tolist()):
                out[i].append(t)
            logits = lm.step(state, tok)
    return out


@pytest.mark.parametrize(("family", "tied"), CASES)
def test_greedy_prefill_step_equals_hf_generate(family, tied):
    hf, lm = _build(family, tied)
    prompts = _prompts(seed=3)
    ids, valid = _left_pad(prompts)
    n_new = 12
    with torch.no_grad():
        ref = hf.generate(
            input_ids=ids,
            attention_mask=valid.long(),
            do_sample=False,
            max_new_tokens=n_new,
            min_new_tokens=n_new,
            pad_token_id=0,
        )
    expected = ref[:, ids.shape[1] :].tolist()
    assert _greedy(lm, prompts, n_new) == expected
    # The generations are not all one token (the check would be weak otherwise).
    assert any(len(set(row)) > 1 for row in expected)


def _fresh_next_logits(lm: CausalLm, prompts: list[list[int]]) -> torch.Tensor:
    ids, valid = _left_pad(prompts)
    with torch.no_grad():
        logits, _ = lm.prefill(lm.new_pool(len(prompts), max_len=ids.shape[1]), lm.embed(ids), valid)
    return logits


@pytest.mark.parametrize("family", ["qwen2", "qwen3"])
def test_select_with_repeats_equals_fresh_prefill(family):
    _, lm = _build(family, tied=False)
    prompts = _prompts(seed=5)
    ids, valid = _left_pad(prompts)
    pool = lm.new_pool(6, max_len=16)
    idx = [2, 0, 2, 1, 0]
    step_tokens = [11, 12, 13, 14, 15]
    with torch.no_grad():
        logits, state = lm.prefill(pool, lm.embed(ids), valid)
        first = logits.argmax(-1).tolist()
        lm.step(state, torch.tensor(first))  # one step before the select: the rows have grown
        state = lm.select(state, torch.tensor(idx))
        assert state.lengths == [PROMPT_LENS[i] + 1 for i in idx]
        got = lm.step(state, torch.tensor(step_tokens))
    expected = _fresh_next_logits(lm, [prompts[i] + [first[i], t] for i, t in zip(idx, step_tokens)])
    _close(got, expected, f"{family} select + step")
    # Dropping rows (a finished request leaving) keeps the others exact.
    with torch.no_grad():
        kept = lm.select(state, [3, 1])
        got2 = lm.step(kept, torch.tensor([20, 21]))
    expected2 = _fresh_next_logits(
        lm,
        [prompts[idx[3]] + [first[idx[3]], step_tokens[3], 20], prompts[idx[1]] + [first[idx[1]], step_tokens[1], 21]],
    )
    _close(got2, expected2, f"{family} select (drop) + step")


@pytest.mark.parametrize("family", ["qwen2", "qwen3"])
def test_merge_of_two_prefilled_states_equals_fresh_prefill(family):
    _, lm = _build(family, tied=True)
    prompts = _prompts(seed=7)
    extra = [5, 6, 7, 8, 9, 10, 11]
    pool = lm.new_pool(8, max_len=24)
    with torch.no_grad():
        ids_a, valid_a = _left_pad(prompts[:2])
        logits_a, a = lm.prefill(pool, lm.embed(ids_a), valid_a)
        tok_a = logits_a.argmax(-1)
        lm.step(a, tok_a)  # the running batch has decoded a token
        ids_b, valid_b = _left_pad([prompts[2], extra])
        _, b = lm.prefill(pool, lm.embed(ids_b), valid_b, row0=5)  # prefilled away from a's rows
        assert lm.can_merge(a, b)
        merged = lm.merge(a, b)
        assert merged.row0 == 0 and merged.n_rows == 4
        got = lm.step(merged, torch.tensor([30, 31, 32, 33]))
    ta = tok_a.tolist()
    expected = _fresh_next_logits(
        lm, [prompts[0] + [ta[0], 30], prompts[1] + [ta[1], 31], prompts[2] + [32], extra + [33]]
    )
    _close(got, expected, f"{family} merge + step")
    other = lm.new_pool(8, max_len=24)
    with torch.no_grad():
        _, c = lm.prefill(other, lm.embed(ids_b), valid_b)
    assert not lm.can_merge(merged, c)
    with pytest.raises(ValueError, match="cannot be merged"):
        lm.merge(merged, c)


def test_pool_bounds_and_padding_layout_are_refused():
    _, lm = _build("qwen2", tied=False)
    ids, valid = _left_pad(_prompts())
    with pytest.raises(PoolExhausted):
        lm.prefill(lm.new_pool(2, max_len=16), lm.embed(ids), valid)
    with pytest.raises(PoolExhausted):
        lm.prefill(lm.new_pool(3, max_len=4), lm.embed(ids), valid)
    right_padded = valid.flip(1)
    with pytest.raises(ValueError, match="left-padded"):
        lm.forward_hidden(lm.embed(ids), right_padded)
    pool = lm.new_pool(3, max_len=PROMPT_LENS[0] + 1)
    with torch.no_grad():
        logits, state = lm.prefill(pool, lm.embed(ids), valid)
        lm.step(state, logits.argmax(-1))
        with pytest.raises(PoolExhausted):
            lm.step(state, logits.argmax(-1))


@pytest.mark.parametrize("family", ["qwen2", "qwen3"])
def test_from_hf_fills_omitted_fields_from_transformers_defaults(family):
    hf_defaults = (transformers.Qwen3Config if family == "qwen3" else transformers.Qwen2Config)()
    cfg = CausalLmConfig.from_hf({"model_type": family})
    assert cfg.vocab_size == hf_defaults.vocab_size
    assert cfg.hidden_size == hf_defaults.hidden_size
    assert cfg.intermediate_size == hf_defaults.intermediate_size
    assert cfg.num_hidden_layers == hf_defaults.num_hidden_layers
    assert cfg.num_attention_heads == hf_defaults.num_attention_heads
    assert cfg.num_key_value_heads == hf_defaults.num_key_value_heads
    assert cfg.rms_norm_eps == hf_defaults.rms_norm_eps
    assert cfg.rope_theta == hf_defaults.rope_parameters["rope_theta"]
    assert cfg.max_position_embeddings == hf_defaults.max_position_embeddings
    assert cfg.tie_word_embeddings == hf_defaults.tie_word_embeddings
    hf_head_dim = getattr(hf_defaults, "head_dim", None) or hf_defaults.hidden_size // hf_defaults.num_attention_heads
    assert cfg.resolved_head_dim == hf_head_dim
    assert cfg.qk_norm == (family == "qwen3")
    # A partial Qwen2 text_config (as a published Qwen2-Audio config.json carries): the
    # given fields are read, the rest are the defaults; no model_type means Qwen2.
    partial = CausalLmConfig.from_hf({"hidden_size": 64, "num_attention_heads": 8, "rope_theta": 1e6})
    assert (partial.hidden_size, partial.num_attention_heads, partial.num_key_value_heads) == (64, 8, 8)
    assert partial.resolved_head_dim == 8 and partial.rope_theta == 1e6 and partial.attention_bias
    assert not partial.o_proj_bias and not partial.qk_norm
    assert partial.intermediate_size == transformers.Qwen2Config().intermediate_size
    # rope_theta may arrive inside rope_parameters (transformers 5 writes it there).
    nested = CausalLmConfig.from_hf(
        {"model_type": family, "rope_parameters": {"rope_type": "default", "rope_theta": 5e5}}
    )
    assert nested.rope_theta == 5e5
    # Caller defaults (a wrapper's sub-config init kwargs) apply to omitted fields only.
    tied = CausalLmConfig.from_hf({"model_type": family}, defaults={"tie_word_embeddings": True})
    assert tied.tie_word_embeddings
    assert dataclasses.replace(tied, tie_word_embeddings=False) == cfg


def test_from_hf_refuses_what_it_does_not_implement():
    with pytest.raises(ValueError, match="sliding-window"):
        CausalLmConfig.from_hf({"model_type": "qwen2", "use_sliding_window": True})
    with pytest.raises(ValueError, match="yarn"):
        CausalLmConfig.from_hf({"model_type": "qwen3", "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})
    with pytest.raises(ValueError, match="llama"):
        CausalLmConfig.from_hf({"model_type": "llama"})
    # Multimodal RoPE sections with the default rotary type collapse to 1-D RoPE: accepted.
    cfg = CausalLmConfig.from_hf(
        {"model_type": "qwen3", "rope_scaling": {"rope_type": "default", "mrope_section": [24, 20, 20]}}
    )
    assert cfg.qk_norm

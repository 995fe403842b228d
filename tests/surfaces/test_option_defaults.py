"""Every decoding option a surface offers is checked against the options dataclasses, where each
default is written once: a CLI flag or form field the user did not set leaves the option unset
(the chosen strategy's default), and a default a help text states is that strategy's."""

from __future__ import annotations

import argparse
import dataclasses
import re

import pytest

from oasr.engine.config import COMMON_FIELDS, UNSET, CommonOptions, TranscribeOptions
from oasr.engine.decode.registry import decode_strategy_class, strategies_taking

BUILTIN = ("aed", "llm", "ctc", "ctc_aed_rescoring", "transducer", "paraformer", "multitask", "rich_ctc")
# CLI flags that carry a TranscribeOptions field under another name.
FLAG_FIELDS = {"vad": "vad_filter"}


def _options_classes():
    return {name: decode_strategy_class(name).options_class for name in BUILTIN}


def test_each_strategy_option_is_a_request_option_left_unset_by_default():
    fields = {f.name: f for f in dataclasses.fields(TranscribeOptions)}
    owned = set()
    for name, cls in _options_classes().items():
        for f in dataclasses.fields(cls):
            assert f.name in fields, f"{name}: {f.name} is not a TranscribeOptions field"
            assert f.name not in COMMON_FIELDS, f"{name}: {f.name} is common; its default is CommonOptions'"
            owned.add(f.name)
    for name, f in fields.items():
        if name in COMMON_FIELDS:
            assert f.default == getattr(CommonOptions(), name) or f.default_factory is not dataclasses.MISSING
        else:
            assert f.default is UNSET, f"{name}: a strategy option's default belongs to its strategy's dataclass"
            assert name in owned, f"{name}: no built-in strategy reads it"


def test_strategy_defaults_are_their_references():
    classes = _options_classes()
    assert classes["aed"]().beam_size == 5 and classes["aed"]().best_of == 5  # faster-whisper
    assert classes["ctc"]().beam_size == 1  # WeNet ctc_greedy_search, transformers' CTC pipelines
    assert classes["ctc_aed_rescoring"]().beam_size == 10  # WeNet recognize.py
    assert classes["transducer"]().beam_size is None  # the checkpoint's: greedy unless a NeMo archive names a beam
    llm = classes["llm"]()
    assert (llm.temperature, llm.top_k, llm.top_p, llm.repetition_penalty) == (None,) * 4  # the checkpoint's
    assert dataclasses.fields(classes["paraformer"]) == ()
    rich = classes["rich_ctc"]()  # funasr's SenseVoice: greedy CTC, generate(use_itn=False)
    assert (rich.beam_size, rich.itn) == (1, False)


def _decode_actions(parser: argparse.ArgumentParser):
    fields = {f.name for f in dataclasses.fields(TranscribeOptions)}
    for action in parser._actions:
        name = FLAG_FIELDS.get(action.dest, action.dest)
        if name in fields:
            yield name, action


def _subparser(command: str) -> argparse.ArgumentParser:
    from oasr.cli.main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command]


@pytest.mark.parametrize("command", ["transcribe", "eval", "serve"])
def test_cli_flags_left_out_set_no_option(command):
    from oasr.cli.common import decode_kwargs
    from oasr.cli.main import build_parser

    actions = list(_decode_actions(_subparser(command)))
    assert len(actions) >= 4
    argv = {"transcribe": ["transcribe", "x.wav"], "eval": ["eval", "m.jsonl"], "serve": ["serve"]}[command]
    args = build_parser().parse_args(argv)
    if command == "serve":
        from oasr.cli.serve import settings_from_args

        assert settings_from_args(args).decode_options() == {}
    else:
        assert decode_kwargs(args) == {}
    for _name, action in actions:
        if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
            continue  # a switch sets its option only when given (decode_kwargs above)
        assert action.default is None, f"{command} {action.option_strings}: a default of its own ({action.default!r})"


_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:,-?\d+(?:\.\d+)?)*")


@pytest.mark.parametrize("command", ["transcribe", "eval", "serve"])
def test_defaults_named_in_help_are_the_strategies(command):
    """A default a flag's help states is the default of a strategy that takes the option: a number
    is one strategy's number, "the checkpoint's" / "the model's" is a strategy whose default is None."""
    checked = 0
    for name, action in _decode_actions(_subparser(command)):
        if name in COMMON_FIELDS:
            continue
        takers = strategies_taking(name)
        assert takers, f"{action.option_strings}: no strategy takes {name}"
        defaults = [getattr(decode_strategy_class(t).options_class(), name) for t in takers]
        numbers = set()
        for value in defaults:
            if isinstance(value, tuple):
                numbers.add(tuple(float(x) for x in value))
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                numbers.add(float(value))
        for clause in re.findall(r"default[^);]*", action.help or ""):
            checked += 1
            where = f"{command} {action.option_strings} help {clause!r}; the strategies' defaults: {defaults}"
            if "checkpoint's" in clause or "model's" in clause:
                assert None in defaults, where
                continue
            for number in _NUMBER.findall(clause):
                parts = tuple(float(x) for x in number.split(","))
                assert (parts[0] if len(parts) == 1 else parts) in numbers, where
    assert checked >= (2 if command == "serve" else 8)


def test_form_fields_left_out_set_no_option():
    """The OpenAI form fields that map to options default to 'not given'."""
    from oasr.server.protocol import TranscriptionRequest

    req = TranscriptionRequest(model="m")
    assert req.temperature is None and req.prompt is None and req.language is None
    assert not req.granularities and req.chunking_strategy is None


def test_an_option_the_strategy_does_not_take_names_those_that_do():
    from oasr.engine.config import OptionNotTaken, StrategyOptions

    ctc = decode_strategy_class("ctc").options_class
    with pytest.raises(
        OptionNotTaken, match=r"top_k: the 'ctc' decoding does not take it \(only 'llm' decoding does\)"
    ):
        ctc.resolve(TranscribeOptions(top_k=5), "ctc")
    with pytest.raises(TypeError, match="patience"):
        StrategyOptions.resolve(TranscribeOptions(patience=2.0), "toy")
    resolved = ctc.resolve(TranscribeOptions(), "ctc")
    assert resolved.beam_size == 1 and resolved.hotword_weight == 1.5 and resolved.best_of is UNSET

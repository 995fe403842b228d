"""oasr's punctuation post-processor against funasr's ``AutoModel.generate`` on CPU, same process,
same weights.

The model has ct-punc's Chinese release shape (``punc_ct-transformer_zh-cn-common-vocab272727``:
272,727 words, embedding and SANM encoder of 256, 8 heads, feed-forward 1024, 4 blocks) with
random weights built by funasr's own classes and written as its release directory, so both sides
read the same files. The head is biased as the test fixture's, so that marks of every kind occur
and tails are carried from round to round.

The texts are ``--texts`` transcripts of 40 to 300 Chinese characters (random characters of the
word table, seeded): what a batch of Paraformer results hands the post-processor. Each round
times, alternating: funasr ``generate(input=text)`` on each text in turn (its ``inference`` takes
one text a call), oasr ``punctuate([text])`` on each in turn, and oasr ``punctuate(texts)`` (every
text's next mini-sentence in one forward). Medians over ``--rounds``; the texts are checked equal
on every side first.

    python benchmarks/punctuation_bench.py --rounds 5 --threads 1

Needs funasr 1.4.16 (``pip install torch==2.13.0 funasr==1.4.16``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

VOCAB = 272727
WIDTH = {"input_size": 256, "output_size": 256, "attention_heads": 8, "linear_units": 1024, "num_blocks": 4}


def write_model(directory: Path) -> list[str]:
    """ct-punc's Chinese shape at random weights, as a release directory; returns the word table."""
    import funasr.models.ct_transformer.model  # noqa: F401  (registers the class)
    import funasr.models.sanm.encoder  # noqa: F401
    import yaml
    from funasr.register import tables

    from tests.postprocess._funasr_punc import config

    cfg = config()
    cfg["encoder_conf"].update(WIDTH)
    cfg["model_conf"].update(embed_unit=256, att_unit=256)
    words = ["<blank>", "<s>", "</s>", *(chr(0x4E00 + i) for i in range(20000))]
    words += [f"w{i}" for i in range(VOCAB - len(words) - 1)] + ["<unk>"]
    torch.manual_seed(0)
    model = tables.model_classes.get("CTTransformer")(
        encoder=cfg["encoder"], encoder_conf=cfg["encoder_conf"], vocab_size=len(words), **cfg["model_conf"]
    ).eval()
    with torch.no_grad():
        model.decoder.weight.mul_(4.0)
        model.decoder.bias.copy_(torch.tensor([-3.0, 1.5, 0.5, 0.5, 0.0, -0.5]))
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.yaml").write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    torch.save(model.state_dict(), directory / "model.pt")
    (directory / "tokens.json").write_text(json.dumps(words, ensure_ascii=False), encoding="utf-8")
    return words


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from funasr import AutoModel

    from oasr.postprocess.punctuation import load_punctuator

    g = torch.Generator().manual_seed(1)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "ct-punc"
        words = write_model(directory)
        chars = words[3:20003]
        lengths = torch.randint(40, 301, (args.texts,), generator=g).tolist()
        texts = ["".join(chars[i] for i in torch.randint(0, len(chars), (n,), generator=g).tolist()) for n in lengths]
        reference = AutoModel(
            model=str(directory), disable_update=True, device="cpu", log_level="ERROR", ncpu=args.threads
        )
        ours = load_punctuator(directory)
    assert torch.get_num_threads() == args.threads, "funasr changed torch's thread count"

    def funasr_each() -> list[str]:
        return [reference.generate(input=t, disable_pbar=True)[0]["text"] for t in texts]

    def oasr_each() -> list[str]:
        return [ours.punctuate([t])[0].text for t in texts]

    def oasr_batch() -> list[str]:
        return [r.text for r in ours.punctuate(texts)]

    sides = {"funasr, one text a call": funasr_each, "oasr, one text a call": oasr_each, "oasr, batched": oasr_batch}
    outputs = {name: run() for name, run in sides.items()}
    assert len({tuple(v) for v in outputs.values()}) == 1, "the sides' texts differ"
    times: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(args.rounds):
        for name, run in sides.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    base = statistics.median(times["funasr, one text a call"])
    print(f"{args.texts} texts, {sum(lengths)} characters, {args.threads} thread(s), median of {args.rounds} rounds")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"  {name:26s} {median * 1000:8.1f} ms   {base / median:5.2f}x funasr")


if __name__ == "__main__":
    main()

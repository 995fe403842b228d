"""A random Moonshine checkpoint at a released model's shapes, saved by transformers' own classes
with the tests' tokenizer (ids past its pieces decode to nothing), for ``oasr bench`` against
transformers: no hub here, and the speed of a greedy decode depends on the shapes, not the weights.

The shapes are those of UsefulSensors' config.json for moonshine-tiny and moonshine-base (the
vocabulary and the decoder context included). A random decoder never writes its end id, so every
request runs to the model card's budget (6.5 positions per second of audio) in both systems.

    python benchmarks/moonshine_checkpoint.py /tmp/moonshine-base --size base
    oasr bench --model /tmp/moonshine-base --peer transformers --threads 2 --batch-size 1 8
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

SIZES = {
    "tiny": dict(hidden_size=288, intermediate_size=1152, encoder_num_hidden_layers=6, decoder_num_hidden_layers=6),
    "base": dict(hidden_size=416, intermediate_size=1664, encoder_num_hidden_layers=8, decoder_num_hidden_layers=8),
}
SHARED = dict(
    encoder_num_attention_heads=8, decoder_num_attention_heads=8, vocab_size=32768, max_position_embeddings=194
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path, help="directory to write (created)")
    p.add_argument("--size", choices=sorted(SIZES), default="base")
    args = p.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.models.moonshine.conftest import save_checkpoint

    args.out.mkdir(parents=True, exist_ok=True)
    save_checkpoint(args.out, **SIZES[args.size], **SHARED)
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

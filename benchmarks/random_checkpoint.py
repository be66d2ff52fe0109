"""Write a random-weight checkpoint of about 100M parameters in a family's real layout, to
measure the engine on (benchmarks/engine_bench.py --model DIR). Weights are random, so
answers are meaningless; sizes and layouts are real. The tokenizer is the tests'
character tokenizer.

    python benchmarks/random_checkpoint.py llada2 /tmp/llada2-100m
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # for tests.tiny_model / tests.tiny_moe when run as a script

from tests.tiny_model import write_tiny_checkpoint  # noqa: E402
from tests.tiny_moe import write_tiny_moe  # noqa: E402

# about 100M parameters each (almost all in the layers: the vocabulary is ~45 characters)
SIZES = {
    "llada": {"d_model": 768, "n_layers": 12, "n_heads": 12, "n_kv_heads": 12,
              "mlp_hidden_size": 2560, "max_sequence_length": 4096},
    "llada_moe": {"hidden_size": 512, "num_hidden_layers": 8, "num_attention_heads": 8,
                  "num_key_value_heads": 4, "moe_layer_freq": [1] * 8, "num_experts": 32,
                  "num_experts_per_tok": 4, "expert_intermediate_size": 256,
                  "dense_intermediate_size": 1408, "max_position_embeddings": 4096},
    "llada2": {"hidden_size": 512, "num_hidden_layers": 8, "num_attention_heads": 8,
               "num_key_value_heads": 2, "head_dim": 64, "first_k_dense_replace": 1,
               "intermediate_size": 1408, "num_experts": 32, "num_experts_per_tok": 4,
               "n_group": 4, "topk_group": 2, "moe_intermediate_size": 256,
               "num_nextn_predict_layers": 0, "max_position_embeddings": 4096},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("family", choices=sorted(SIZES))
    parser.add_argument("directory", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--layers", type=int,
                        help="fewer layers of the same shape (a faster CPU benchmark: the "
                             "engine's costs are per layer)")
    args = parser.parse_args()
    sizes = dict(SIZES[args.family])
    if args.layers is not None:
        key = "n_layers" if args.family == "llada" else "num_hidden_layers"
        sizes[key] = args.layers
        if "moe_layer_freq" in sizes:
            sizes["moe_layer_freq"] = [1] * args.layers
    if args.family == "llada":
        write_tiny_checkpoint(args.directory, seed=args.seed, max_shard_bytes=None, **sizes)
    else:
        write_tiny_moe(args.directory, args.family, seed=args.seed, **sizes)
    print(args.directory)


if __name__ == "__main__":
    main()

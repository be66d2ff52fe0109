"""Write a random-weight checkpoint of about 100M parameters in a family's real layout, to
measure the engine on (benchmarks/engine_bench.py --model DIR). Weights are random, so
answers are meaningless; sizes and layouts are real. The tokenizer is the tests'
character tokenizer.

    python benchmarks/random_checkpoint.py llada2 /tmp/llada2-100m
    python benchmarks/random_checkpoint.py llada /tmp/llada-8b-2l --shape real --layers 2
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # for tests.tiny_model / tests.tiny_moe when run as a script

from tests.tiny_model import write_tiny_checkpoint  # noqa: E402
from tests.tiny_moe import write_tiny_moe  # noqa: E402

# about 100M parameters each (almost all in the layers: the vocabulary is the ~45
# characters, in 64 rows so that it splits over 2, 4 or 8 tensor-parallel ranks)
SIZES: dict[str, dict[str, Any]] = {
    "llada": {"d_model": 768, "n_layers": 12, "n_heads": 12, "n_kv_heads": 12,
              "mlp_hidden_size": 2560, "max_sequence_length": 4096, "embedding_size": 64},
    "llada_moe": {"hidden_size": 512, "num_hidden_layers": 8, "num_attention_heads": 8,
                  "num_key_value_heads": 4, "moe_layer_freq": [1] * 8, "num_experts": 32,
                  "num_experts_per_tok": 4, "expert_intermediate_size": 256,
                  "dense_intermediate_size": 1408, "max_position_embeddings": 4096,
                  "vocab_size": 64},
    "llada2": {"hidden_size": 512, "num_hidden_layers": 8, "num_attention_heads": 8,
               "num_key_value_heads": 2, "head_dim": 64, "first_k_dense_replace": 1,
               "intermediate_size": 1408, "num_experts": 32, "num_experts_per_tok": 4,
               "n_group": 4, "topk_group": 2, "moe_intermediate_size": 256,
               "num_nextn_predict_layers": 0, "max_position_embeddings": 4096,
               "vocab_size": 64},
}
# the published models' widths (LLaDA-8B-Instruct, LLaDA-MoE-7B-A1B, LLaDA2.0-mini) with
# their vocabularies, for --shape real (few layers: a checkpoint GPUs can split and a
# disk can hold; random_model_bench.py has the full depths in device memory)
REAL: dict[str, dict[str, Any]] = {
    "llada": {"d_model": 4096, "n_heads": 32, "n_kv_heads": 32, "mlp_hidden_size": 12288,
              "embedding_size": 126464, "max_sequence_length": 4096},
    "llada_moe": {"hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 16,
                  "num_experts": 64, "num_experts_per_tok": 8, "expert_intermediate_size": 1024,
                  "dense_intermediate_size": 8192, "vocab_size": 157184,
                  "max_position_embeddings": 8192},
    "llada2": {"hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 4,
               "head_dim": 128, "first_k_dense_replace": 1, "intermediate_size": 5120,
               "num_experts": 256, "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4,
               "moe_intermediate_size": 512, "num_nextn_predict_layers": 0,
               "vocab_size": 157184, "max_position_embeddings": 8192},
}
LAYER_FIELD = {"llada": "n_layers", "llada_moe": "num_hidden_layers",
               "llada2": "num_hidden_layers"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("family", choices=sorted(SIZES))
    parser.add_argument("directory", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--shape", choices=("100m", "real"), default="100m")
    parser.add_argument("--layers", type=int,
                        help="fewer layers of the same widths (default: 2 with --shape real, "
                             "all of them otherwise); the engine's costs are per layer")
    args = parser.parse_args()
    sizes = dict(SIZES[args.family] if args.shape == "100m" else REAL[args.family])
    layers = 2 if args.layers is None and args.shape == "real" else args.layers
    if layers is not None:
        sizes[LAYER_FIELD[args.family]] = layers
        if args.family == "llada_moe":
            sizes["moe_layer_freq"] = [1] * layers
            sizes["moe_layer_freq"] = [1] * args.layers
    if args.family == "llada":
        write_tiny_checkpoint(args.directory, seed=args.seed, max_shard_bytes=None, **sizes)
    else:
        write_tiny_moe(args.directory, args.family, seed=args.seed, **sizes)
    print(args.directory)


if __name__ == "__main__":
    main()

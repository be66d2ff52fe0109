#!/usr/bin/env bash
# One GPU check, printing one JSON object (about 15 minutes on one H100/H200-class GPU):
#   1. the kernel tests on CUDA (tests/kernels/test_kernels.py, tests/engine/test_engine_kernels.py),
#   2. benchmarks/kernels_bench.py (each kernel against its torch path, engine shapes),
#   3. benchmarks/random_model_bench.py: the engine on a random LLaDA-8B-shaped bf16 model
#      built in GPU memory (and LLaDA-MoE-shaped when the engine has that family), batch
#      1 / 32 / 128, threshold 0.9 + dual cache, torch and triton kernel paths,
#   4. long prompts (ADR 014): the same engine bench on LLaDA-8B at prompts of 1,024 tokens,
#      gen 256, block 32, batch 32, and benchmarks/kv_cache_bench.py (time and memory of
#      one span forward reading / writing the KV cache, 4 LLaDA-8B layers, 64 x 1,024;
#      with BASELINE=DIR, another checkout such as the previous commit side by side).
#   5. benchmarks/diffusion_gemma_bench.py: DiffusionGemma (uniform-noise canvases) on a
#      random ~100M-parameter bf16 checkpoint against transformers' generate, batch 1 / 64,
#      canvases of 256 over 2 canvases (the released canvas length), with the engine's
#      wall time over its matrix products' time; and the released shape's step memory
#      (ADR 042): vocabulary 262,144, canvas 256, hidden 2,816, 48 steps, 2 random
#      layers, batch 1 / 64 against transformers and 128 (the engine alone): peak GPU
#      memory and tokens/s, and benchmarks/diffusion_gemma_structured_bench.py at that
#      vocabulary (ADR 043): batch 64 of canvases of 256, each constraint against free
#      rows (tokens/s, row forwards/s, valid and stop shares, the constraint's share),
#   6. benchmarks/tp_bench.py where 2 or more GPUs are visible: tensor parallelism 1 / 2
#      (and 8 with 8 GPUs) on 2-layer checkpoints of the LLaDA-8B, LLaDA-MoE-7B and
#      LLaDA2-mini widths (per-rank memory, tokens/s, ratio to one GPU); and
#      DiffusionGemma at TP 2 (diffusion_gemma_bench.py --tensor-parallel 2: its tokens
#      against one GPU's, ADR 037).
# Without a GPU it runs nothing heavy and says which parts it skipped (exit 0).
# Parts named as arguments (kernel_tests kernels_bench engine_bench long_prompt kv_cache
# diffusion_gemma tensor_parallel) run alone, so that a device call of 10 minutes holds
# them: diffusion_gemma (part 5) gives its four runs 9.5 minutes at most in all.
#     bash benchmarks/gpu_check.sh
#     bash benchmarks/gpu_check.sh diffusion_gemma
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

parts="kernel_tests kernels_bench engine_bench long_prompt kv_cache diffusion_gemma tensor_parallel"
for asked in "$@"; do
    case " $parts " in
        *" $asked "*) ;;
        *) echo "gpu_check.sh: no part named '$asked'; parts: $parts" >&2; exit 2 ;;
    esac
done
ASKED="$*"
wanted() {  # whether part $1 runs: every part when none is named
    [ -z "$ASKED" ] || [[ " $ASKED " == *" $1 "* ]]
}

if ! python -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    echo '{"gpu": false, "skipped": ["kernel tests on CUDA", "kernels_bench", "engine bench on random LLaDA-8B / LLaDA-MoE shapes", "long-prompt engine bench (1,024-token prompts, batch 32)", "kv_cache_bench (LLaDA-8B layers, 64 x 1,024)", "diffusion_gemma_bench (bf16, batch 1 / 64, canvases of 256)", "DiffusionGemma step memory at the released vocabulary and canvas (batch 1 / 64 / 128)", "DiffusionGemma structured lines at the released vocabulary (batch 64)", "tensor-parallel TP 2 / 8 on LLaDA-8B, LLaDA-MoE-7B and LLaDA2-mini shapes", "DiffusionGemma at TP 2"], "reason": "no CUDA device on this machine"}'
    exit 0
fi

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
start=$(date +%s)
if wanted kernel_tests; then
    timeout 180 python -m pytest -q -p no:cacheprovider tests/kernels/test_kernels.py \
        tests/engine/test_engine_kernels.py >"$scratch/tests.txt" 2>&1
    echo $? >"$scratch/tests.rc"
fi
if wanted kernels_bench; then
    timeout 120 python benchmarks/kernels_bench.py >"$scratch/kernels.json" \
        2>"$scratch/kernels.err"
    echo $? >"$scratch/kernels.rc"
fi
if wanted engine_bench; then
    timeout 240 python benchmarks/random_model_bench.py --shapes llada-8b,llada-moe \
        --batch-sizes 1,32,128 >"$scratch/engine.json" 2>"$scratch/engine.err"
    echo $? >"$scratch/engine.rc"
fi
if wanted long_prompt; then
    timeout 300 python benchmarks/random_model_bench.py --shapes llada-8b --batch-sizes 32 \
        --prompt-length 1024 --gen-length 256 >"$scratch/long.json" 2>"$scratch/long.err"
    echo $? >"$scratch/long.rc"
fi
if wanted kv_cache; then
    timeout 180 python benchmarks/kv_cache_bench.py --layers 4 --rows 64 --columns 1024 \
        --absent 8 --repeats 5 ${BASELINE:+--baseline "$BASELINE"} \
        >"$scratch/kv_cache.json" 2>"$scratch/kv_cache.err"
    echo $? >"$scratch/kv_cache.rc"
fi
if wanted diffusion_gemma; then
    timeout 150 python benchmarks/diffusion_gemma_bench.py --device cuda --dtype bfloat16 \
        --batch-sizes 1,64 --canvas-length 256 --gen-length 512 --prompt-length 128 \
        --steps 16 --products >"$scratch/diffusion_gemma.json" \
        2>"$scratch/diffusion_gemma.err"
    echo $? >"$scratch/diffusion_gemma.rc"
    released="--device cuda --dtype bfloat16 --vocab 262144 --canvas-length 256
        --gen-length 256 --hidden 2816 --layers 2 --prompt-length 128 --steps 48"
    # shellcheck disable=SC2086  # $released: several arguments
    timeout 180 python benchmarks/diffusion_gemma_bench.py $released --batch-sizes 1,64 \
        >"$scratch/diffusion_gemma_released.json" \
        2>"$scratch/diffusion_gemma_released.err"
    echo $? >"$scratch/diffusion_gemma_released.rc"
    # shellcheck disable=SC2086
    timeout 120 python benchmarks/diffusion_gemma_bench.py $released --batch-sizes 128 \
        --no-transformers >"$scratch/diffusion_gemma_128.json" \
        2>"$scratch/diffusion_gemma_128.err"
    echo $? >"$scratch/diffusion_gemma_128.rc"
    timeout 120 python benchmarks/diffusion_gemma_structured_bench.py --vocab 262144 \
        --device cuda --dtype bfloat16 --batch-size 64 --canvas-length 256 \
        --gen-length 256 >"$scratch/diffusion_gemma_structured.json" \
        2>"$scratch/diffusion_gemma_structured.err"
    echo $? >"$scratch/diffusion_gemma_structured.rc"
fi
if wanted tensor_parallel; then
    gpus=$(python -c 'import torch; print(torch.cuda.device_count())')
    if [ "$gpus" -ge 2 ]; then
        sizes=1,2
        [ "$gpus" -ge 8 ] && sizes=1,2,8
        timeout 900 python benchmarks/tp_bench.py --device cuda --shape real --layers 2 \
            --sizes "$sizes" --batch-sizes 1,32 --gen-length 128 >"$scratch/tp.json" \
            2>"$scratch/tp.err"
        echo $? >"$scratch/tp.rc"
        timeout 300 python benchmarks/diffusion_gemma_bench.py --device cuda --dtype bfloat16 \
            --batch-sizes 1,64 --canvas-length 256 --gen-length 512 --prompt-length 128 \
            --steps 16 --tensor-parallel 2 >"$scratch/diffusion_gemma_tp.json" \
            2>"$scratch/diffusion_gemma_tp.err"
        echo $? >"$scratch/diffusion_gemma_tp.rc"
    else
        for name in tp diffusion_gemma_tp; do
            echo "{\"skipped\": \"tensor-parallel runs need 2 or more GPUs; $gpus visible\"}" \
                >"$scratch/$name.json"
            echo 0 >"$scratch/$name.rc"
        done
    fi
fi

SCRATCH="$scratch" SECONDS_TAKEN=$(( $(date +%s) - start )) python - <<'PY'
import json, os
from pathlib import Path

scratch = Path(os.environ["SCRATCH"])

def part(name):
    if not (scratch / f"{name}.rc").exists():
        return {"skipped": "not among the parts asked for"}
    rc = int((scratch / f"{name}.rc").read_text())
    out = (scratch / f"{name}.json").read_text() if (scratch / f"{name}.json").exists() else ""
    try:
        return {"exit_code": rc, **json.loads(out)}
    except ValueError:
        err = (scratch / f"{name}.err").read_text()[-2000:]
        return {"exit_code": rc, "error": (out + err)[-2000:]}

tests_ran = (scratch / "tests.rc").exists()
tests = (scratch / "tests.txt").read_text().strip().splitlines() if tests_ran else []
print(json.dumps({
    "gpu": True,
    "seconds": int(os.environ["SECONDS_TAKEN"]),
    "kernel_tests": {"exit_code": int((scratch / "tests.rc").read_text()),
                     "summary": tests[-1] if tests else "", "tail": tests[-15:]}
    if tests_ran else {"skipped": "not among the parts asked for"},
    "kernels_bench": part("kernels"),
    "engine_bench": part("engine"),
    "long_prompt_engine_bench": part("long"),
    "kv_cache_bench": part("kv_cache"),
    "diffusion_gemma_bench": part("diffusion_gemma"),
    "diffusion_gemma_released_shape": part("diffusion_gemma_released"),
    "diffusion_gemma_released_shape_batch_128": part("diffusion_gemma_128"),
    "diffusion_gemma_structured": part("diffusion_gemma_structured"),
    "tensor_parallel": part("tp"),
    "diffusion_gemma_tensor_parallel": part("diffusion_gemma_tp"),
}, indent=1))
PY

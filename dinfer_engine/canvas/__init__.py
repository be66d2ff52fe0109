"""The canvas as an object: what a row's answer region starts as, what one step may
change, and when it is done (docs/adr/033-canvas-objects.md). Every loop holds one canvas
per run (dinfer_engine/loop.py), built from its family's entry (run_canvas.canvas_for).

- masked.MaskCanvas (LLaDA, LLaDA-MoE): gen_length masks after the prompt, blocks counted
  from the prompt's end, bidirectional forwards under the cache strategy;
- infill.InfillCanvas: as MaskCanvas, and rows may hold prompt-gap-suffix canvases whose
  given text never changes;
- masked.BlockCanvas (LLaDA2, LLaDA2.1 with or without editing): masks on an absolute
  block grid, block-causal forwards over a cache of committed blocks;
- uniform.UniformCanvas (DiffusionGemma): a row's answer is canvases of canvas_length
  uniform random tokens (uniform.UniformNoiseCanvas, one at a time), renoised by entropy
  (its loop: dinfer_engine/uniform_generation.py).

The masked loop (dinfer_engine/generation.py) calls its canvas without knowing which it is.
"""

from dinfer_engine.canvas.uniform import UniformNoiseCanvas, step

__all__ = ["UniformNoiseCanvas", "step"]

"""Published dense peaks of common data-centre GPUs, for utilisation figures (MFU, share
of memory bandwidth). Unknown devices report None rather than a guess."""

from __future__ import annotations

import torch

# name fragment -> (bf16 dense TFLOP/s, HBM GB/s), from the vendors' data sheets (SXM parts)
PEAKS = {
    "H200": (989.0, 4800.0),
    "H100": (989.0, 3350.0),
    "A100": (312.0, 2039.0),
    "L40S": (362.0, 864.0),
}


def device_peaks(device: torch.device) -> tuple[float | None, float | None]:
    """(bf16 TFLOP/s, GB/s) of a CUDA device, or (None, None) when not in the table."""
    if device.type != "cuda":
        return None, None
    name = torch.cuda.get_device_name(device)
    for fragment, peaks in PEAKS.items():
        if fragment in name:
            return peaks
    return None, None

"""Back-of-envelope models: memory per GPU, Amdahl speedups, training FLOPs."""

from mxprec.analysis.amdahl import PEAK_RATIO, amdahl_speedup, amdahl_table, peak_ratio
from mxprec.analysis.flops import llama_train_flops, mfu
from mxprec.analysis.memory import (
    BYTES_PER_VALUE,
    FORMAT_BITS,
    RECIPE_SAVED_FORMAT,
    MemoryEstimate,
    bytes_per_value,
    format_bytes_per_value,
    llama_layer_saved_values,
    llama_memory,
    seed_memory,
)

__all__ = [
    "BYTES_PER_VALUE",
    "FORMAT_BITS",
    "PEAK_RATIO",
    "RECIPE_SAVED_FORMAT",
    "MemoryEstimate",
    "amdahl_speedup",
    "amdahl_table",
    "bytes_per_value",
    "format_bytes_per_value",
    "llama_layer_saved_values",
    "llama_memory",
    "llama_train_flops",
    "mfu",
    "peak_ratio",
    "seed_memory",
]

"""Whether this CPU computes in bfloat16 natively, for the settings that ask for bfloat16 on the CPU.

torch runs bfloat16 matrix products on any x86 CPU, but only CPUs with AVX512-BF16 or AMX-BF16 do it in hardware;
elsewhere they are emulated and slower than float32. Measured on a CPU with AVX512-BF16 (AMD EPYC, 2 idle cores,
``python benchmarks/cpu_precision.py``, docs/guides/real-models.md#speed-settings-measured): Qwen2.5-Coder-0.5B
answers 2.0 times as fast in bfloat16 (80 prompts: 148 s against 298 s, 78 of 80 answers the same) and
SmolLM2-135M's attention capture 1.5 times as fast (the same labels); a LoRA SmolLM2 training step took 2.8 s under
bfloat16 autocast against 5.0 s.
"""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)

__all__ = ["BF16_FLAGS", "cpu_bf16_native", "warn_unless_cpu_bf16"]

CPUINFO = Path("/proc/cpuinfo")
BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # the /proc/cpuinfo flags of native bfloat16 arithmetic (x86)


def cpu_bf16_native(cpuinfo: Path | None = None) -> bool | None:
    """True when the first processor's ``flags`` line of `cpuinfo` (default `CPUINFO`) names one of `BF16_FLAGS`,
    False when it names none, None when there is no such file or line (not Linux, not x86: unknown)."""
    try:
        text = (cpuinfo or CPUINFO).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "flags":
            return any(flag in value.split() for flag in BF16_FLAGS)
    return None


def warn_unless_cpu_bf16(setting: str, cpuinfo: Path | None = None) -> bool | None:
    """Log a warning naming `setting` (e.g. ``eval.dtype: bfloat16``) when this CPU has no native bfloat16
    (`cpu_bf16_native` False): the setting still runs, emulated, and is usually slower than float32. Returns
    `cpu_bf16_native`'s answer."""
    native = cpu_bf16_native(cpuinfo)
    if native is False:
        log.warning("%s on a CPU without %s: bfloat16 is emulated here and usually slower than float32; set "
                    "float32 (or false) for speed", setting, " or ".join(BF16_FLAGS))
    return native

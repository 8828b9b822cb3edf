"""What this CPU computes natively, for choices that depend on it (the server's NativeBfloat16)."""
import functools


@functools.lru_cache(maxsize=None)
def native_bfloat16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """True where the CPU has bfloat16 arithmetic (AVX512_BF16 or AMX). Elsewhere bfloat16 autocast
    is emulated: on a Zen 3 it made a training step of the 128-token classifier about 22x slower
    (models/experiments/bench_autocast.py)."""
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.startswith("flags"):
                    flags = line.split()
                    return "avx512_bf16" in flags or "amx_bf16" in flags
    except OSError:
        pass
    return False


def autocast_enabled(amp: int) -> bool:
    """A training script's --amp: 1 on, 0 off, -1 (the default) on only where bfloat16 is native."""
    return native_bfloat16() if amp < 0 else bool(amp)

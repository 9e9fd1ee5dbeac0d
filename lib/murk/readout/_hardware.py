"""What this machine multiplies fastest: measured matmul rates and the CPU read-out dtype they choose.

The read-out runs in float32 on a CPU by default (``readout.dtype_cpu: float32``,
:data:`murk.readout` loads it so; the exactness tests rely on it). Many current server
CPUs multiply bfloat16 matrices several times faster than float32 (AVX-512 BF16,
AMX), and the study itself runs in bf16 (spec Sec. III, Table III), so
``readout.dtype_cpu: auto`` measures both rates on this machine and takes bf16
where it is clearly faster (:data:`AUTO_BF16_MIN_RATIO`). The first-token softmax
and the output head stay float32 in bf16 (:func:`murk.readout.float32_head`).

The choice depends on a timing, so it is made once per process, said at load time
with both rates, and recorded with the run (the read-out's ``dtype``): two runs on
one machine choose alike unless the machine's relative rates change, and a run that
must be exact sets ``float32``.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass

logger = logging.getLogger("murk")

#: bf16 is chosen by ``auto`` when its measured matmul rate is at least this multiple of float32's: below it,
#: bf16 rounding (c_int within about 1e-2, benchmarks/README.md "bf16 tolerance") is not worth the speed
AUTO_BF16_MIN_RATIO = 2.0
#: the matrix size of :func:`cpu_dtype_choice`'s probe (n x n by n x n; 2 n^3 FLOPs per product)
PROBE_N = 1024
#: seconds per dtype that :func:`cpu_dtype_choice`'s probe measures for (after one warm-up product)
PROBE_SECONDS = 0.25


def matmul_gflops(dtype, n: int = 2048, device: str = "cpu", seconds: float = 1.0, repeats: int = 3) -> float:
    """Dense square matmul throughput of this machine in one dtype (GFLOP/s, the best of ``repeats``).

    Parameters
    ----------
    dtype : torch.dtype or str
        E.g. ``torch.float32``, ``"bfloat16"``.
    n : int
        Matrix size: ``(n, n) @ (n, n)``, counted as ``2 n^3`` FLOPs.
    device : str
        ``"cpu"`` or a CUDA device (synchronised before each reading).
    seconds : float
        Time each repeat runs for, at least one product.
    repeats : int
        Repeats; the best is returned (``timeit`` convention: the least disturbed).

    Returns
    -------
    float
        GFLOP/s, with torch's current thread count (``torch.get_num_threads()``).

    Raises
    ------
    AttributeError
        ``dtype`` names no torch dtype.
    """
    import torch

    dt = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    g = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(n, n, generator=g).to(device=device, dtype=dt)
    b = torch.randn(n, n, generator=g).to(device=device, dtype=dt)
    sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)
    a @ b
    sync()
    best = 0.0
    for _ in range(max(int(repeats), 1)):
        k, t0 = 0, time.perf_counter()
        while True:
            a @ b
            k += 1
            sync()
            dt_s = time.perf_counter() - t0
            if dt_s >= seconds:
                break
        best = max(best, 2.0 * n ** 3 * k / dt_s / 1e9)
    return best


@dataclass(frozen=True)
class DtypeChoice:
    """The CPU read-out dtype that ``readout.dtype_cpu: auto`` chose, with the rates it was chosen by.

    Attributes
    ----------
    dtype : str
        ``"bfloat16"`` or ``"float32"``.
    fp32_gflops, bf16_gflops : float
        Measured matmul rates (GFLOP/s, :func:`matmul_gflops` at :data:`PROBE_N`); NaN
        for bf16 where torch cannot multiply bf16 on this CPU.
    """

    dtype: str
    fp32_gflops: float
    bf16_gflops: float

    @property
    def ratio(self) -> float:
        """bf16 rate over float32 rate."""
        return self.bf16_gflops / self.fp32_gflops

    def message(self) -> str:
        """One line for the terminal and the log."""
        return (f"readout.dtype_cpu=auto: matmul on this CPU {self.bf16_gflops:.0f} GFLOP/s in bfloat16, "
                f"{self.fp32_gflops:.0f} in float32 (x{self.ratio:.2f}; bf16 needs x{AUTO_BF16_MIN_RATIO:g}): "
                f"reading out in {self.dtype}")


@functools.lru_cache(maxsize=1)
def cpu_dtype_choice() -> DtypeChoice:
    """Choose the CPU read-out dtype by measuring float32 and bfloat16 matmul (once per process).

    Returns
    -------
    DtypeChoice
        ``bfloat16`` when its rate is at least :data:`AUTO_BF16_MIN_RATIO` times float32's,
        else ``float32``. About 1 s of probing (:data:`PROBE_SECONDS` x 2 dtypes x 2 repeats).
    """
    import math

    fp32 = matmul_gflops("float32", PROBE_N, seconds=PROBE_SECONDS, repeats=2)
    try:
        bf16 = matmul_gflops("bfloat16", PROBE_N, seconds=PROBE_SECONDS, repeats=2)
    except RuntimeError:  # no bf16 matmul kernel for this CPU in this torch build
        bf16 = math.nan
    ok = not math.isnan(bf16) and bf16 >= AUTO_BF16_MIN_RATIO * fp32
    return DtypeChoice("bfloat16" if ok else "float32", fp32, bf16)


def resolve_cpu_dtype(name: str) -> str:
    """The dtype name a ``readout.dtype_cpu`` setting stands for: ``auto`` measured, others as given.

    Parameters
    ----------
    name : str
        ``"auto"`` or a torch dtype name (``"float32"``, ``"bfloat16"``, ...).

    Returns
    -------
    str
        A torch dtype name. For ``auto`` the choice is logged (logger ``murk``, INFO) and
        printed on standard error once per process.
    """
    if str(name) != "auto":
        return str(name)
    choice = cpu_dtype_choice()
    _say_once(choice.message())
    return choice.dtype


@functools.lru_cache(maxsize=None)
def _say_once(message: str) -> None:
    """Print ``message`` on standard error and log it (logger ``murk``, INFO), once per process and message."""
    import sys

    print(f"murk: {message}", file=sys.stderr)
    logger.info(message)

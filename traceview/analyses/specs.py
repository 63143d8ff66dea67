"""Peak throughput of the GPUs traceview knows, for roofline estimates.

Keyed by the `deviceProperties[].name` a Kineto trace carries (regex, first match wins); ROCm devices
that report a generic name ("AMD Radeon Graphics") are recognised by their compute-unit count.
Numbers are vendor datasheet values, **dense** (no sparsity), per visible device (one GCD for MI250):

- `tc_tflops`: 16-bit Tensor Core / Matrix Core peak (bf16/fp16), used for 16-bit and 8-bit GEMMs;
- `fp32_tflops`: FP32 non-tensor (CUDA core / vector) peak, used for fp32 ops (TF32 may or may not be on);
- `tf32_tflops` (derived): dense TF32 Tensor Core peak = half the 16-bit peak (NVIDIA Ampere/Ada/Hopper/
  Blackwell datasheets), used by the fp32-gemm rule;
- `hbm_tbps`: device memory bandwidth (TB/s);
- `host_gbps`: practical pinned host<->device bandwidth (GB/s) of the usual host link.

The ridge point (FLOP/byte where compute and memory time are equal) is `peak / hbm`; TraceLens uses the
same max(FLOPs/peak, bytes/BW) roofline with per-arch JSON files (github.com/AMD-AGI/TraceLens). An unknown GPU falls back
to the A100 row and says so (`Spec.known = False`).
"""

from __future__ import annotations

import re

from ..records import record


@record(frozen=True)
class Spec:
    """One device's datasheet figures (peak throughputs and bandwidth) the roofline and the rules price with."""

    name: str
    tc_tflops: float
    fp32_tflops: float
    hbm_tbps: float
    host_gbps: float
    known: bool = True

    def peak_flops(self, bytes_per_elem: float | None) -> float:
        """FLOP/s for an op whose operands have this element size (<= 2 bytes -> tensor cores)."""
        return 1e12 * (self.tc_tflops if bytes_per_elem is not None and bytes_per_elem <= 2 else self.fp32_tflops)

    @property
    def tf32_tflops(self) -> float:
        """Dense TF32 Tensor Core peak: half the 16-bit peak on every NVIDIA part that has TF32 (Ampere,
        Ada, Hopper, Blackwell datasheets: A100 156 of 312, H100 SXM 494.5 of 989)."""
        return self.tc_tflops / 2

    @property
    def bw(self) -> float:
        return self.hbm_tbps * 1e12


# (regex on deviceProperties name, Spec). Order matters: specific before generic.
SPECS: list[tuple[str, Spec]] = [
    (r"H200", Spec("H200", 989.0, 67.0, 4.8, 55.0)),
    (r"H100.*PCIe|H100 PCIe", Spec("H100 PCIe", 756.0, 51.0, 2.0, 55.0)),
    (r"H100|H800|GH200", Spec("H100 SXM", 989.0, 67.0, 3.35, 55.0)),
    (r"B200|GB200", Spec("B200", 2250.0, 75.0, 8.0, 55.0)),
    (r"B100", Spec("B100", 1750.0, 60.0, 8.0, 55.0)),
    (r"A100.*80GB|A100-SXM4-80GB|A100 80GB", Spec("A100 80GB", 312.0, 19.5, 2.039, 25.0)),
    (r"A100|A800", Spec("A100 40GB", 312.0, 19.5, 1.555, 25.0)),
    (r"L40S", Spec("L40S", 362.0, 91.6, 0.864, 25.0)),
    (r"L40", Spec("L40", 181.0, 90.5, 0.864, 25.0)),
    (r"\bL4\b", Spec("L4", 121.0, 30.3, 0.3, 25.0)),
    (r"A10G|\bA10\b", Spec("A10", 125.0, 31.2, 0.6, 25.0)),
    (r"V100", Spec("V100", 125.0, 15.7, 0.9, 12.0)),
    (r"\bT4\b", Spec("T4", 65.0, 8.1, 0.32, 12.0)),
    (r"GP100", Spec("Quadro GP100", 20.7, 10.3, 0.717, 12.0)),
    (r"RTX 4090", Spec("RTX 4090", 165.0, 82.6, 1.008, 25.0)),
    (r"MI300X|MI308", Spec("MI300X", 1307.0, 163.4, 5.3, 55.0)),
    (r"MI325", Spec("MI325X", 1307.0, 163.4, 6.0, 55.0)),
    (r"MI250X", Spec("MI250X (1 GCD)", 191.5, 23.9, 1.6, 25.0)),
    (r"MI250|MI210", Spec("MI250 (1 GCD)", 181.0, 22.6, 1.6, 25.0)),
]
# ROCm reports "AMD Radeon Graphics"; the CU count (numSms) tells the part.
ROCM_BY_CUS: dict[int, str] = {104: "MI250|MI210", 110: "MI250X", 304: "MI300X|MI308", 228: "MI300X|MI308"}
FALLBACK = "A100|A800"


def lookup(props: dict | None) -> Spec:
    """The spec for one `deviceProperties` entry (or None): name regex, then ROCm CU count, else A100."""
    props = props or {}
    name = str(props.get("name") or "")
    for pat, spec in SPECS:
        if re.search(pat, name):
            return spec
    cus = props.get("numSms")
    if cus in ROCM_BY_CUS and ("AMD" in name or props.get("gcnArchName")):
        key = ROCM_BY_CUS[cus]
        return next(s for p, s in SPECS if p == key)
    base = next(s for p, s in SPECS if p == FALLBACK)
    return Spec(f"unknown ({name or 'no deviceProperties'}; assumed A100)", base.tc_tflops, base.fp32_tflops,
                base.hbm_tbps, base.host_gbps, known=False)


def trace_spec(meta) -> Spec:
    """Spec of device 0 of a trace (`TraceMeta`)."""
    props = meta.device_properties[0] if meta.device_properties else None
    return lookup(props)

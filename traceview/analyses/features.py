"""What the trace already does — CUDA-graph replay, compiled regions and Triton kernels, fused or foreach
optimizers, low-precision kernels, DataLoader workers, compilation inside the steps — so that advice never
recommends what is in use and says the next step instead (`RuleContext.features`)."""

from __future__ import annotations

import polars as pl

from ..engine import CHAIN
from ..frames import filled, pick
from ..ingest.categories import GRAPH_LAUNCH_RE
from ..memo import per_trace
from ..model import RUNTIME_CATS, Trace
from ..records import record

COMPILED_REGION_RE = r"^Torch-Compiled Region|^## Call CompiledFxGraph|^CompiledFunction$"
TRITON_RE = r"^triton_"
#: Dynamo/Inductor compilation and autotuning spans (torch._dynamo.utils.dynamo_timed and friends)
COMPILE_RE = (r"\(dynamo_timed\)$|^entire_frame_compile$|^backend_compile$|^CachingAutotuner\.|^async_compile\.|"
              r"^inductor_compile$|^compile_fx|^_compile\.|^dynamo$|^OutputGraph\.call_user_compiler")
#: a fused optimizer: torch.optim's fused ops (`fused=True`), or an optimizer class named Fused* (apex's and
#: DeepSpeed's FusedAdam / FusedLAMB / FusedSGD, whose `Optimizer.step#FusedAdam.step` span torch.optim records)
FUSED_OPT_RE = r"^aten::_fused_(adam|adamw|sgd|adagrad)_?$|^Optimizer\.step#Fused\w*\.step$"
#: how every match of FUSED_OPT_RE starts: its `\w` (Unicode word characters) costs ~1 ms of a tiny trace's run to
#: compile, so it is compiled only where some op name starts so (`detect`)
FUSED_OPT_STARTS = ("aten::_fused_", "Optimizer.step#Fused")
#: fused optimizer kernels, by kernel name: torch's fused Adam/SGD/Adagrad functors and apex's / DeepSpeed's
#: multi-tensor Adam/LAMB kernels (what runs even when no op is linked: CUDA graphs, C++ extensions)
FUSED_OPT_KERNEL_RE = r"(?i:fused_?(adam|sgd|adagrad|lamb))|(Adam|LAMB|Lamb|SGD)Functor"
#: multi-tensor (foreach) ops, and the kernel every foreach op launches (one launch over a list of tensors)
FOREACH_RE = r"^aten::_foreach_"
MULTI_TENSOR_KERNEL_RE = r"multi_tensor_apply"
LOW_PRECISION_RE = r"(?i)bf16|bfloat16|fp16|f16|half|e4m3|e5m2"
WORKERS_RE = r"_MultiProcessingDataLoaderIter"
SINGLE_PROCESS_RE = r"_SingleProcessDataLoaderIter"


@record(frozen=True)
class Features:
    """What the trace's program uses (CUDA graphs, torch.compile, Triton, fused optimizers...): `detect`."""

    cuda_graphs: bool = False  # steps replay CUDA graphs (cudaGraphLaunch, or kernels launched by a graph)
    compiled: bool = False  # torch.compile'd regions run (Torch-Compiled Region / CompiledFxGraph)
    triton_kernels: int = 0  # Inductor/Triton kernels
    compiling: bool = False  # Dynamo/Inductor compile or autotune spans inside the trace
    fused_optimizer: bool = False  # AdamW(fused=True) & co., apex/DeepSpeed Fused* optimizers (ops, spans or kernels)
    foreach_optimizer: bool = False  # multi-tensor (_foreach_) ops or their multi_tensor_apply kernels
    low_precision: bool = False  # bf16/fp16/fp8 kernels (autocast or low-precision weights)
    dataloader_workers: bool | None = None  # True: worker processes; False: in-process; None: no DataLoader seen

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


#: from this many compute kernels the name tests run on the distinct names (with their counts)
_DISTINCT_MIN = 4096


@per_trace
def host_names(trace: Trace, cat: str) -> pl.Series:
    """The distinct names of the host events of category `cat` (a few hundred over every event: a rule tests its
    regex on them first, and scans the rows only when some name matches)."""
    return pick(trace.host, "cat", "name").filter(pl.col("cat") == cat)["name"].unique()


def detect(trace: Trace, kb: pl.DataFrame | None = None) -> Features:
    """The trace's features; `kb` (the roofline per kernel, classify.kernel_bound) adds operand widths: a
    kernel with <= 2-byte operands is low precision even when its name does not say so."""
    # distinct names: every test below asks whether any name matches
    ops = pl.concat([host_names(trace, "cpu_op"), host_names(trace, "user_annotation")])
    rt = (pick(trace.host, "cat", "name").lazy().filter(pl.col("cat").is_in(RUNTIME_CATS)).select(pl.col("name").unique())
          .collect(**CHAIN)["name"])
    k = trace.gpu[["kind", "name"]].filter(pl.col("kind") == "compute")
    # kernel names: each distinct name once with its count (a few dozen names over every kernel)
    if k.height >= _DISTINCT_MIN:
        kv = k["name"].value_counts()
        kn, triton = kv["name"], int(kv["count"].filter(kv["name"].str.contains(TRITON_RE)).sum())
    else:
        kn = k["name"]
        triton = int(kn.str.contains(TRITON_RE).sum())
    dl = ops.filter(ops.str.starts_with("enumerate(DataLoader)#"))
    workers = None
    if dl.len():
        workers = bool(dl.str.contains(WORKERS_RE).any()) or not bool(dl.str.contains(SINGLE_PROCESS_RE).any())
    fused = {"fused": FUSED_OPT_RE} if _any_starts(ops, FUSED_OPT_STARTS) else {}  # (else no name can match)
    o = _any(ops, compiled=COMPILED_REGION_RE, compiling=COMPILE_RE, foreach=FOREACH_RE, **fused)
    kt = _any(kn, fused=FUSED_OPT_KERNEL_RE, foreach=MULTI_TENSOR_KERNEL_RE, low=LOW_PRECISION_RE)
    return Features(
        cuda_graphs=bool(rt.str.contains(GRAPH_LAUNCH_RE).any() or filled(trace.gpu["graph"], False).any()),
        compiled=o["compiled"],
        triton_kernels=triton,
        compiling=o["compiling"],
        fused_optimizer=o.get("fused", False) or kt["fused"],
        foreach_optimizer=o["foreach"] or kt["foreach"],
        low_precision=kt["low"] or (kb is not None and "bpe" in kb.columns and bool((kb["bpe"] <= 2).any())),
        dataloader_workers=workers,
    )


def _any_starts(names: pl.Series, starts: tuple[str, ...]) -> bool:
    """Whether some value of `names` (distinct names: a few hundred) starts with one of `starts`, without a query."""
    return any(n.startswith(starts) for n in names.to_list() if n is not None)


def _any(names: pl.Series, **patterns: str) -> dict[str, bool]:
    """Whether some value of `names` matches each of `patterns` (null never matches): one query for all."""
    got = pl.DataFrame([names.alias("n")]).select(**{k: pl.col("n").str.contains(p).any() for k, p in patterns.items()})
    return {k: bool(v) for k, v in got.row(0, named=True).items()}

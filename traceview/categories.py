"""Event categories of the Kineto format and which events' `args` the loader reads.

No polars here: the prefetch thread's scanner asks `args_group` while the main thread still imports.
"""

from __future__ import annotations

import re

# host categories of runtime/driver API calls (launches, copies, syncs) across backends
RUNTIME_CATS = ["cuda_runtime", "cuda_driver", "xpu_runtime", "xpu_driver", "mtia_runtime",
                "privateuse1_runtime", "privateuse1_driver"]
HOST_CATS = ["cpu_op", "user_annotation", "python_function", *RUNTIME_CATS]
GPU_CATS = ["kernel", "gpu_memcpy", "gpu_memset", "cuda_sync", "mtia_ccp_events"]
# 2021-era category names (tb_plugin samples) and old flow names
OLD_CATS = {"Operator": "cpu_op", "Runtime": "cuda_runtime", "Kernel": "kernel", "Memcpy": "gpu_memcpy",
            "Memset": "gpu_memset", "Python": "python_function", "async": "ac2g",
            "async_cpu_to_gpu": "ac2g", "async_gpu": "ac2g", "Driver": "cuda_driver"}
# ops whose rarely used args (Concrete Inputs, collective fields) are read: collectives, sync copies, and the
# convolution forward ops (their Concrete Inputs hold stride/padding/dilation for the FLOPs model) and the
# indexing ops (the dim they index, and Input Strides: an expanded index reads one value per row)
RARE_NAMES = (r"^(record_param_comms|nccl:|gloo:|hipMemcpy|cudaMemcpy|c10d::|"
              r"aten::(_?convolution|conv[123]d|cudnn_convolution|miopen_convolution|mkldnn_convolution|"
              r"gather|index_select|embedding|take)$)")
RARE_RE = re.compile(RARE_NAMES)
META_NAMES = ("thread_name", "process_name", "process_labels")

HOST_ARGS, OTHER_ARGS = 1, 2  # the scanner's args groups: the host ones are freed once the loader has read them


def args_group(ph: str, cat: str, name: str) -> int:
    """Whether the loader reads an event's `args` object, and when: 0 never, HOST_ARGS in its `_host_args`,
    OTHER_ARGS later (asked by the scanner once per distinct triple, so that it keeps only those): a
    superset of the rows the loader's `_host_args`, `_args_frame` and metadata reads select (Python's `re`
    matches at least what polars' regex does with these anchored patterns)."""
    if ph == "X":
        c = "cpu_op" if cat == "" else OLD_CATS.get(cat, cat)
        if c in HOST_CATS:
            needed = c != "python_function" or name.startswith("nn.Module:") or RARE_RE.search(name) is not None
            return HOST_ARGS if needed else 0
        return OTHER_ARGS if c in GPU_CATS or c == "gpu_user_annotation" else 0
    if ph == "i":
        return OTHER_ARGS if name == "[memory]" else 0
    return OTHER_ARGS if ph == "M" and name in META_NAMES else 0



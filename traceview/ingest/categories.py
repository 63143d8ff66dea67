"""Event categories of the Kineto format and which events' `args` the loader reads.

No polars here: the prefetch thread's scanner asks `argtables.tables_of` while the main thread still imports.
"""

from __future__ import annotations

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
# indexing ops (the dim they index, and Input Strides: an expanded index reads one value per row), and the GEMMs
# (Input Strides: a row not a multiple of 16 bytes runs a fallback kernel, rules/unaligned_gemm.py), and SDPA
# (its is_causal: a causal fused kernel skips the masked half of the scores, analyses/causal.py)
RARE_NAMES = (r"^(record_param_comms|nccl:|gloo:|hipMemcpy|cudaMemcpy|c10d::|"
              r"aten::(_?convolution|conv[123]d|cudnn_convolution|miopen_convolution|mkldnn_convolution|"
              r"gather|index_select|embedding|take|"
              r"mm|addmm|_addmm_activation|bmm|baddbmm|addbmm|matmul|linear|_scaled_mm|"
              r"scaled_dot_product_attention)$)")
# a CUDA / HIP graph's launch, runtime or driver API, any version or per-thread-stream variant (cudaGraphLaunch,
# cudaGraphLaunch_v10000, cudaGraphLaunch_ptsz, cuGraphLaunch, hipGraphLaunch, hipGraphLaunch_spt): the kernels
# it launches are one graph's nodes (the GPU frame's `graph`)
GRAPH_LAUNCH_RE = r"^(cuda|cu|hip)GraphLaunch(_v\d+|_ptsz|_spt)?$"
META_NAMES = ("thread_name", "process_name", "process_labels")
# categories Kineto writes that the analysis reads through other fields or leaves out on purpose (flows, the
# profiler's own overhead and ranges, instant and counter events): any other is unknown, and said
OTHER_KINETO_CATS = ["", "Trace", "ac2g", "fwdbwd", "gpu_user_annotation", "overhead", "cpu_instant_event",
                     "cuda_profiler_range", "external_correlation", "mtia_insight", "glow_runtime", "hpu_op",
                     "collective_comm", "gpu_pm_counter", "xpu_op", "privateuse1_op"]

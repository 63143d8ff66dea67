"""Short kernel names for the terminal: a CUDA C++ signature, a Triton/Inductor kernel, a mangled cuDNN/CUTLASS
symbol or a cuBLAS/cuDNN/xmma/Tensile name cut to the part that identifies the kernel (the JSON keeps the full
name)."""

from __future__ import annotations

import re

SHORT = 60  # a name this short is shown as it is (after the Triton prefix is dropped)
_TEMPLATE = re.compile(r"<[^<>]*>")
#: the functor or op inside ATen's generic elementwise / reduce kernels: what they compute
_HINT = re.compile(r"\b(\w+(?:Functor|functor|Ops|_kernel_cuda|_impl|Op))\b")
_WRAPPERS = {
    "AUnaryFunctor",
    "BUnaryFunctor",
    "BinaryFunctor",
    "func_wrapper_t",
    "gpu_kernel_impl",
    "ReduceOp",
    "CUDAFunctor_add",
    "OpaqueType",
}
_GENERIC = {"kernel", "Kernel", "Kernel2", "device_kernel", "type", "operator()", "execute_kernel"}
_LIBS = (
    "cub",
    "cudnn",
    "cutlass",
    "cublasLt",
    "cublas",
    "fbgemm_gpu",
    "thrust",
    "flash",
    "xmma",
    "cask_cudnn",
)
_DTYPE = re.compile(r"^(?:bf16|f16|fp16|tf32|f32|fp32|f64|fp8|e4m3|e5m2|i8|s8|u8)+$")
_TILE = re.compile(r"(\d+x\d+(?:x\d+)?)")


def short_kernel(name: str) -> str:
    """The part of a kernel name that identifies it, e.g. `vectorized_elementwise_kernel<MulFunctor>` for
    `void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<…MulFunctor<float>…>(…)`."""
    if not name:
        return name
    if re.match(r"triton_[a-z]+_", name):  # Inductor: triton_{poi,red,per,tem}_fused_<ops>_<n>
        return name.replace("_fused_", "_", 1)  # the op list and the index identify it; "fused" says nothing
    if name.startswith("_Z"):
        return _mangled(name)
    if "(" in name or "<" in name or "::" in name:
        return _signature(name)
    if len(name) <= SHORT:
        return name
    if name.startswith("Cijk_"):  # Tensile (rocBLAS): the layout and the macro tile
        tile = re.search(r"_MT(\d+x\d+x\d+)", name)
        return "_".join(name.split("_")[:4]) + (f" MT{tile.group(1)}" if tile else "")
    return _underscored(name.replace("cudnn_generated_fort_native_", "cudnn_"))


def _signature(name: str) -> str:
    s = name.replace("(anonymous namespace)::", "")
    hint = None
    lt = s.find("<")
    if lt >= 0:
        cands = [c for c in _HINT.findall(s[lt:]) if c not in _WRAPPERS]
        hint = cands[0] if cands else None
        first_arg = re.match(r"<\s*([\w:]+)", s[lt:])
    else:
        first_arg = None
    prev = None
    while prev != s:  # innermost template arguments first
        prev, s = s, _TEMPLATE.sub("", s)
    head = s.split("(", 1)[0].strip() if not s.startswith("(") else s
    head = (
        head.split(" ")[-1] if " " in head else head
    )  # the return type goes (`void`, `std::enable_if…::type`)
    comps = [c for c in head.split("::") if c]
    if not comps:
        return name[:SHORT]
    base = comps[-1]
    if base in _GENERIC:
        if first_arg and base != "type":  # cutlass::Kernel<cutlass_80_tensorop_…>: the argument is the kernel
            arg = first_arg.group(1).split("::")[-1]
            if not arg.isdigit():
                return _underscored(arg) if len(arg) > SHORT else arg
        base = "::".join(comps[-2:])
    lib = next((c for c in comps[:-1] if c in _LIBS), None)
    out = f"{lib}::{base}" if lib and not base.startswith(lib) else base
    if hint and ("elementwise" in base or "reduce" in base or "index" in base):
        out += f"<{hint}>"
    return out


def _mangled(name: str) -> str:
    """An Itanium-mangled symbol (`_ZN17cutlass__5x_cudnn6KernelINS_4conv6kernel23ImplicitGemmConvolution…`):
    its namespace, the first identifier that names the algorithm, the pass and the tile."""
    ids: list[str] = []
    pos = 0
    for m in re.finditer(r"\d+", name):  # length-prefixed identifiers, read left to right
        if (
            m.start() < pos or name[m.start() - 2 : m.start() - 1] == "L"
        ):  # inside one read, or a literal (Li64E)
            continue
        n, at = int(m.group()), m.end()
        ident = name[at : at + n]
        if n and len(ident) == n and re.fullmatch(r"[A-Za-z_]\w*", ident):
            ids.append(ident)
            pos = at + n
    if not ids:
        return name[:SHORT]
    algo = next((i for i in ids[1:] if re.search(r"Gemm|Conv|Attention|Fmha|Softmax|Norm", i)), None)
    what = [ids[0]] + ([algo] if algo else [])
    passes = {p for i in ids for p in ("Fprop", "Dgrad", "Wgrad") if p in i}
    if passes:
        what.append("/".join(sorted(passes)).lower())
    shape = re.search(r"GemmShapeILi(\d+)ELi(\d+)ELi(\d+)E", name)
    if shape:
        what.append("x".join(shape.groups()))
    return " ".join(what)


def _underscored(name: str) -> str:
    """A long underscore-separated name (`sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_…`): the
    words before its data types, the first data type, the layout and the tile."""
    toks = name.split("_")
    keep: list[str] = []
    dtype = layout = tile = None
    for t in toks:
        if tile is None and (m := _TILE.search(t)) and (t.startswith("tilesize") or t == m.group(1)):
            tile = m.group(1)
            break
        if dtype is None and _DTYPE.match(t) and keep:
            dtype = t
        elif dtype is not None and layout is None and t in ("nn", "nt", "tn", "tt"):
            layout = t
        elif dtype is None:
            keep.append(t)
    out = "_".join(keep + ([dtype] if dtype else []))
    out += "".join(f" {x}" for x in (layout, tile) if x)
    return out if len(out) < len(name) else name

"""Per-layer view: every host op and GPU activity attributed to the nn.Module (layer) that issued it.

Layer nodes, in order of preference:
1. `python_function` events `nn.Module: <Class>_<k>` (traces recorded `with_stack`), named by class and
   per-class counter; a `module::<qualified.path>` annotation directly inside such a frame (the collectors'
   `--modules`) gives it a readable path (`blocks.3.attn`) that replaces the `Class_k` path as `layer`.
2. `module::` annotations alone (no Python frames).
3. Other `user_annotation` ranges (`record_function`), when neither of the above exists.
4. Top-level `cpu_op`s, when there is nothing else.
`Optimizer.step#…`, `Optimizer.zero_grad#…` and `enumerate(DataLoader)#…` are pseudo-layers of their own.

A forward op belongs to its innermost enclosing node (an ancestor climb, one join per tree level). A
backward op belongs to the layer whose forward op created its autograd node: backward
`(pid, Fwd thread id, Sequence number)` ↔ forward `(pid, thread, Sequence number)`; the thread index →
OS thread map comes from the `fwdbwd` flows (one end on each side). GPU activities take the layer of the
runtime call that launched them, so each gets exactly one layer or `(unattributed)`.

Memory follows the node events, not their nesting: depths, paths and ancestors come from parent pointers (pointer
doubling), inclusive sums are added up the tree a level at a time (`subtree_sums`), with no list of ancestors per
layer. Only path strings are bounded: from PATH_LEVELS levels down a path is shortened (`…N levels…`).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ..engine import CHAIN, IN_MEMORY
from ..frames import column, dropnull, filled, members, notnull, omit, pick, take
from ..memo import per_trace
from ..model import RUNTIME_CATS, Trace
from ..records import record
from .intervals import open_at
from .roofline import peak_expr
from .rowid import by_id, forget, join_by_id, positions
from .specs import Spec, trace_spec
from .tree import ancestor_ids, call_tree, roots, thread_ids
from .windows import in_steps

UNATTRIBUTED = "(unattributed)"
MODULE_PREFIX = "nn.Module: "
ATTR_PREFIX = "module::"
PSEUDO_RE = r"^(Optimizer\.(step|zero_grad)#|enumerate\(DataLoader\)#)"
# annotations that are not layers: steps, collectives, profiler internals
NOT_LAYER_RE = r"^(ProfilerStep#|nccl:|PyTorch Profiler|## forward ##$)"
PL_MODULE = "[pl][module]"  # Lightning PyTorchProfiler's module ranges, `[pl][module]<class>: <path>`
PL_PROFILE = "[pl][profile]"  # and its hook ranges, `[pl][profile][<owner>]<Class>.<hook>`
PL_USER_STEP_RE = r"\.((?:training|validation|test|predict)_step)$"  # the user's step method inside the hook
PHASES = ("forward", "backward", "optimizer", "dataloader", "other")
CLASSES = ("gpu_compute", "gpu_memory", "communication", "host_sync", "input", "cpu_launch", "other_idle")

# the per-layer tree; empty (with these columns) when the trace has no layer to attribute to
_TREE_SCHEMA = {"layer": pl.String, "parent_layer": pl.String, "name": pl.String, "layer_class": pl.String,
                "kind": pl.String, "depth": pl.Int32, "module_path": pl.String,
                "src": pl.String, "first_ts": pl.Int64, "calls": pl.UInt32}
#: a row's layer as codes: `lc` a row of `Attribution.names`, `ph` an index into PHASES
_CODES_SCHEMA = {"i": pl.UInt32, "lc": pl.UInt32, "ph": pl.UInt8}
_NAMES_SCHEMA = {"layer": pl.String, "layer_class": pl.String, "depth": pl.Int32}
_OTHER = PHASES.index("other")
#: paths (`module_path`, `kind`, and `layer` where a path names it) spell out every level of a layer nested less
#: than this deep; a deeper layer's path is shortened to `<first two levels>/…N levels…/<parent>/<name>` (`hidden`).
#: Real models nest a few levels (GPT-2: 4); a full path per layer of a hostile trace nesting thousands of frames
#: would be depth² bytes (issue 33). Only the strings are shortened: every depth is its own layer, with its own times.
PATH_LEVELS = 32


def hidden(levels: int) -> str:
    """The part of a shortened path that stands for the `levels` levels it leaves out."""
    return f"…{levels} levels…"


# (eq=False: it holds frames/arrays, whose field-wise == and hash raise; it is compared and keyed by identity,
# and the generated __eq__/__hash__ cost start-up time at import)
@record(frozen=True, eq=False)
class Attribution:
    """Each host row's layer, by the source the trace records layers with (`attribution`)."""

    source: str  # "modules" | "module_annotations" | "annotations" | "ops" | "none"
    host: pl.DataFrame  # [i, lc, ph] (codes: `decode`) for cpu_op and runtime rows, in id order
    names: pl.DataFrame  # [layer, layer_class, depth] of each layer code (a few rows: the distinct layers); the
    #                      last row is `(unattributed)`. Rows hold codes, not strings: a string per row costs
    #                      16 bytes or more per column on traces of millions of events
    tree: pl.DataFrame  # one row per layer [layer, parent_layer, name, layer_class, kind, depth,
    #                       module_path, src, first_ts, calls]; a parent layer is shallower than its children
    #                       (its depth: that of its shallowest node)
    shortened: int = 0  # layers nested PATH_LEVELS deep or deeper: their paths are shortened (`hidden`)

    @property
    def unattributed(self) -> int:
        """The code of `(unattributed)`."""
        return self.names.height - 1

    def known(self, lc: pl.Series) -> pl.Series:
        """Per code in `lc`: a layer, not `(unattributed)` (null for a null code)."""
        return take(self.names["layer"] != UNATTRIBUTED, lc)

    def decode(self, codes: pl.DataFrame, *cols: str) -> list[pl.Series]:
        """The named columns (layer, layer_class, depth, phase) of the rows of `codes` [lc, ph]; a null code reads
        null."""
        out = []
        for c in cols:
            if c == "phase":
                out.append(pl.Series("phase", PHASES).gather(codes["ph"]))
            else:
                out.append(self.names[c].gather(codes["lc"]))
        return out

    def rows(self, codes: pl.DataFrame) -> pl.DataFrame:
        """[i, layer, layer_class, depth, phase] of the rows of `codes` [i, lc, ph]."""
        return pl.DataFrame([codes["i"], *self.decode(codes, "layer", "layer_class", "depth", "phase")])


@per_trace
def attribution(trace: Trace) -> Attribution:
    """Layer nodes and host attribution of a trace, computed once per Trace object (rules, the layer
    table and the report all ask for it)."""
    return _attribute(trace)


def host_layers(trace: Trace) -> pl.DataFrame:
    """[i (host row: cpu_op or runtime call), layer, layer_class, depth, phase] (decoded on each call: callers keep
    what they need)."""
    att = attribution(trace)
    return att.rows(att.host)


@per_trace
def gpu_codes(trace: Trace) -> pl.DataFrame:
    """[i (gpu row id), lc, ph]: the layer codes (`Attribution.names`) of each GPU activity; `(unattributed)`
    when no layer issued it."""
    att = attribution(trace)
    hl = att.host
    g = pick(trace.gpu, "i", "launch", "op")
    # the launching runtime call is the most direct link; the op (via External id) when there is none; a
    # sentinel for activities that neither reaches
    lpos, opos = _rowpos(hl, g["launch"]), _rowpos(hl, g["op"])
    # (the attribution's rows are looked up by id here only, once per trace: their id table, 38 MiB at 10 M tiny
    # events, is not kept under every later phase)
    forget(hl)
    pos = np.where(lpos >= 0, lpos, opos)
    found = pos >= 0
    pos = np.where(found, pos, 0)
    lc = np.where(found, hl["lc"].to_numpy()[pos] if hl.height else 0, att.unattributed)
    ph = np.where(found, hl["ph"].to_numpy()[pos] if hl.height else 0, _OTHER)
    return pl.DataFrame([g["i"].cast(pl.UInt32), pl.Series("lc", lc, pl.UInt32), pl.Series("ph", ph, pl.UInt8)])


def gpu_layers(trace: Trace) -> pl.DataFrame:
    """[i (gpu row id), layer, layer_class, depth, phase]: one row per GPU activity; `(unattributed)`
    when no layer issued it (decoded on each call from `gpu_codes`)."""
    return attribution(trace).rows(gpu_codes(trace))


# ---- node detection ---------------------------------------------------------------------------


def _strip_index(e: pl.Expr) -> pl.Expr:
    return e.str.replace(r"_\d+$", "")


def _node_events(trace: Trace) -> tuple[pl.DataFrame, str]:
    """Candidate node events [i, label, cls, src] and the source kind of the layer tree."""
    host = trace.host
    # one pass over the host events keeps the few that can be nodes (by name prefix or annotation category);
    # every filter below runs on those
    h = host.lazy().select("i", "cat", "name").filter(
        pl.col("name").str.starts_with(MODULE_PREFIX) | pl.col("name").str.starts_with(ATTR_PREFIX)
        | pl.col("name").str.starts_with("Optimizer.") | pl.col("name").str.starts_with("enumerate(")
        | (pl.col("cat") == "user_annotation")).collect(**IN_MEMORY)
    ann = pl.col("cat").is_in(["user_annotation", "cpu_op"])
    name = pl.col("name")
    # which rows each kind of node takes, in one query (`h` holds the few rows that can be nodes): most kinds have
    # none in a trace, and take no filter and select then (a small trace's run is mostly each query's fixed cost)
    take = h.lazy().select(
        mods=(pl.col("cat") == "python_function") & name.str.starts_with(MODULE_PREFIX),
        attrs=ann & name.str.starts_with(ATTR_PREFIX),
        lightning=name.str.starts_with("[pl]"),
        pseudo=ann & (name.str.starts_with("Optimizer.") | name.str.starts_with("enumerate("))
        & name.str.contains(PSEUDO_RE),
        other=(pl.col("cat") == "user_annotation") & ~name.str.contains(PSEUDO_RE)
        & ~name.str.contains(NOT_LAYER_RE) & ~name.str.starts_with("[pl]"),
    ).select(pl.all().fill_null(False)).collect(**CHAIN)

    def nodes_of(kind: str, label_dtype: pl.DataType, **cols: pl.Expr) -> pl.DataFrame:
        """[i, label, cls, src] of the rows `kind` takes (no query when it takes none)."""
        if not take[kind].any():
            return pl.DataFrame(schema={"i": h.schema["i"], "label": label_dtype, "cls": pl.String, "src": pl.String})
        return h.filter(take[kind]).select("i", **cols)

    mods = nodes_of("mods", pl.String, label=pl.col("name").str.strip_prefix(MODULE_PREFIX),
                    cls=_strip_index(pl.col("name").str.strip_prefix(MODULE_PREFIX)), src=pl.lit("module"))
    attrs = nodes_of("attrs", pl.String, label=pl.col("name").str.strip_prefix(ATTR_PREFIX),
                     cls=pl.col("name").str.strip_prefix(ATTR_PREFIX).str.replace_all(r"(^|\.)\d+(\.|$)", "$1*$2"),
                     src=pl.lit("attr"))
    if take["lightning"].any():  # Lightning's PyTorchProfiler ranges
        plm, plf = _lightning_nodes(h.filter(ann))
        attrs = pl.concat([attrs, plm], how="vertical_relaxed")
    else:
        plf = None
    pseudo = nodes_of("pseudo", h.schema["name"], label=pl.col("name"), cls=pl.col("name").str.extract(r"^([^#]+)#"),
                      src=pl.when(pl.col("name").str.starts_with("enumerate(")).then(pl.lit("dataloader"))
                      .otherwise(pl.lit("optimizer")))
    parts = [mods, attrs, pseudo] + ([plf] if plf is not None else [])
    if mods.height:
        source = "modules"
    elif attrs.height:
        source = "module_annotations"
    else:
        other = nodes_of("other", h.schema["name"], label=pl.col("name"),
                         cls=pl.col("name").str.replace(r"[#_ ]?\d+$", ""), src=pl.lit("annotation"))
        parts.append(other)
        source = "annotations" if other.height else "ops"
    nodes = pl.concat([p.lazy() for p in parts], how="vertical_relaxed")  # (collected once, below)
    if source == "ops":
        # top-level forward ops (backward ones follow their forward op through the sequence number),
        # outside the pseudo-layers
        # the roots of the cpu_op tree (`top_level_ops`: the layer table reads them too), in host order
        # (the kept rows' ids and names only: on a tiny-event trace every op is one)
        at = _top_rows(trace)
        cand = pick(host, "name", "fwd_tid")[at]
        name = pl.col("name")
        at = at.filter(cand.select(~(pl.col("fwd_tid").fill_null(0) > 0) & ~name.str.contains(NOT_LAYER_RE)
                                   & ~name.str.contains(PSEUDO_RE)).to_series())
        del cand
        top = pick(host, "i", "name")[at]
        if pseudo.height and top.height:
            inside = _innermost(host.select("i", "pid", "tid", "ts")[at],
                                by_id(host, pseudo["i"].sort(), "i", "pid", "tid", "ts", "end").with_columns(
                                    parent=pl.lit(None, pl.UInt32), depth=pl.lit(0, pl.Int32)))
            top = top.join(inside, on="i", how="anti")
        nodes = pl.concat([nodes, top.lazy().select("i", label=pl.col("name"), cls=pl.col("name"), src=pl.lit("op"))],
                          how="vertical_relaxed")
        if top.height == 0:
            source = "none"
    return nodes.collect(**CHAIN), source


def _lightning_nodes(h: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Nodes of Lightning's PyTorchProfiler ranges (docs/integrations.md): `[pl][module]<class>: <path>` is the
    module `path` (as a `module::` annotation); `[pl][profile]<hook>` is Lightning's own hook, framework time
    (`(Lightning) <hook>`, src `framework`), except the user's `*_step` method it calls (`training_step`...)."""
    path = pl.col("name").str.strip_prefix(PL_MODULE).str.extract(r": (.+)$")
    mods = h.filter(pl.col("name").str.starts_with(PL_MODULE)).select(
        "i", label=path, cls=path.str.replace_all(r"(^|\.)\d+(\.|$)", "$1*$2"), src=pl.lit("attr")
    ).filter(pl.col("label").is_not_null())
    hook = pl.col("name").str.strip_prefix(PL_PROFILE)
    user = hook.str.extract(PL_USER_STEP_RE)
    hooks = h.filter(pl.col("name").str.starts_with(PL_PROFILE)).select(
        "i", label=pl.coalesce(user, pl.lit("(Lightning) ") + hook),
        cls=pl.coalesce(user, pl.lit("(Lightning)")),
        src=pl.when(user.is_null()).then(pl.lit("framework")).otherwise(pl.lit("annotation")))
    return mods, hooks


def _build_tree(host: pl.DataFrame, nodes: pl.DataFrame, ops_alone: bool = True) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Nest the node events; merge `module::` annotations into the module frame that holds them.

    Returns (node events with their layer, per-layer tree). Op nodes alone by `_op_tree` (`ops_alone`, else through
    the general path: the tests compare them)."""
    # Nest the nodes among themselves by time: a `with record_function(...)` range opens inside the
    # `__enter__` frame and outlives it, so the full host tree is not reliable around annotations,
    # but module frames and annotations do nest properly with each other.
    cols = [c for c in ("i", "cat", "pid", "tid", "ts", "dur", "ev_idx") if c in host.columns]
    # the node rows in host order (ids ascend): a lookup by id, not an is_in over every host row
    if nodes.height and (nodes["src"] == "op").all():
        # the roots of the cpu_op tree alone: none encloses another (`roots`), all are roots of the node tree
        if ops_alone:
            return _op_tree(host, nodes)
        nodes = nodes.with_columns(pnode=pl.lit(None, pl.UInt32))
    else:
        sub = call_tree(by_id(host, nodes["i"].unique().sort(), *cols))
        nodes = join_by_id(nodes, "i", sub, pl.col("parent").alias("pnode"))  # sub: one row per node, by id
    if not (nodes["src"] == "attr").any():  # no `module::` annotation: nothing to merge
        nodes = nodes.with_columns(attr=pl.lit(None, pl.String))
    else:
        # an attr annotation whose nearest enclosing node is a module frame names that frame (same call)
        src_of = nodes.select(pl.col("i").alias("pnode"), pl.col("src").alias("psrc"))
        nodes = nodes.join(src_of, on="pnode", how="left")
        alias = nodes.filter((pl.col("src") == "attr") & (pl.col("psrc") == "module")).select(
            pl.col("i").alias("_a"), pl.col("pnode").alias("_m"), pl.col("label").alias("attr"),
            pl.col("cls").alias("attr_cls"))
        nodes = nodes.join(alias.select("_a"), left_on="i", right_on="_a", how="anti")
        nodes = (nodes.join(alias.select("_a", "_m"), left_on="pnode", right_on="_a", how="left")
                 .with_columns(pnode=pl.coalesce("_m", "pnode")).drop("_m", "psrc"))
        nodes = nodes.join(alias.select(pl.col("_m").alias("i"), "attr"), on="i", how="left").with_columns(
            attr=pl.when(pl.col("src") == "attr").then(pl.col("label")).otherwise(pl.col("attr")))
    return _layer_paths(host, nodes)


def _layer_paths(host: pl.DataFrame, nodes: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """`_build_tree` after the nesting: nodes [i, label, cls, src, pnode, attr] → (node events with their layer, path
    and depth; per-layer tree). Linear in the nodes whatever their depth: depths and path identities by pointer
    doubling over the parent pointers (log2(depth) vectorised passes), path strings level by level only for the
    first PATH_LEVELS levels; a deeper node's path is `<first two levels>/…N levels…/<parent>/<name>`, from its
    ancestors at depth 1 and 1 from it (no string per ancestor)."""
    par = _parent_positions(nodes)
    depth, reached = _depths(par)
    if not reached.all():  # a node under a parent that is not a node (merged away): no layer, as the tree never reaches it
        nodes = nodes.filter(pl.Series(reached))
        par = _parent_positions(nodes)
        depth = depth[reached]
    if nodes.height == 0:
        empty = pl.DataFrame(schema={"i": pl.UInt32, "pnode": pl.UInt32, "layer": pl.String, "cls": pl.String,
                                     "ndepth": pl.Int32, "src": pl.String, "ts": pl.Int64, "end": pl.Int64})
        return empty, pl.DataFrame(schema=_TREE_SCHEMA)
    # shallowest first (a layer's first node is its shallowest: its parent layer is shallower than it), levels
    # contiguous
    order = np.argsort(depth, kind="stable")
    if not (order == np.arange(order.size)).all():
        nodes, depth = nodes[order], depth[order]
        par = _parent_positions(nodes)
    n = nodes.height
    bounds = np.searchsorted(depth, np.arange(int(depth[-1]) + 2))
    label, cls = nodes["label"], nodes["cls"]
    # full paths, one level at a time, for the first PATH_LEVELS levels
    mp, kd = [label[: bounds[1]]], [cls[: bounds[1]]]
    for lv in range(1, min(int(depth[-1]), PATH_LEVELS - 1) + 1):
        s, e = int(bounds[lv]), int(bounds[lv + 1])
        up = pl.DataFrame([mp[-1].alias("_pp"), kd[-1].alias("_pk")])[par[s:e] - bounds[lv - 1]]
        lvl = pl.DataFrame([label[s:e], cls[s:e]]).hstack(up).select(
            module_path=pl.col("_pp") + "/" + pl.col("label"), kind=pl.col("_pk") + "/" + pl.col("cls"))
        mp.append(lvl["module_path"])
        kd.append(lvl["kind"])
    mp = pl.concat(mp).alias("module_path")
    kd = pl.concat(kd).alias("kind")
    ndeep = n - int(bounds[min(PATH_LEVELS, bounds.size - 1)])
    if ndeep:  # deeper: `<first two levels>/…N levels…/<parent>/<name>` (N: the levels between)
        s = n - ndeep
        a1 = _kth_ancestor(par, np.where(np.arange(n) >= s, depth - 1, 0))[s:]
        pp = par[s:]
        head = pl.DataFrame([mp.gather(a1).alias("_hp"), kd.gather(a1).alias("_hk"), label.gather(pp).alias("_pl"),
                             cls.gather(pp).alias("_pc"), label[s:], cls[s:],
                             pl.Series("_n", depth[s:] - 3).cast(pl.String)])
        pre, post = hidden(0).split("0")
        gap = pl.lit(f"/{pre}") + pl.col("_n") + pl.lit(f"{post}/")
        deep = head.select(module_path=pl.col("_hp") + gap + pl.col("_pl") + "/" + pl.col("label"),
                           kind=pl.col("_hk") + gap + pl.col("_pc") + "/" + pl.col("cls"))
        mp = pl.concat([mp[:s], deep["module_path"]])
        kd = pl.concat([kd[:s], deep["kind"]])
    out = nodes.select("i", "pnode", "label", "cls", "src", "attr").hstack(
        [mp, kd, pl.Series("ndepth", depth, pl.Int32)])
    # attr paths are already readable kinds (`blocks.*.attn`)
    out = out.with_columns(kind=pl.when(pl.col("attr").is_not_null() & (pl.col("src") == "attr"))
                           .then(pl.col("cls")).otherwise(pl.col("kind")), layer=pl.coalesce("attr", "module_path"))
    if ndeep and out["attr"][n - ndeep:].null_count():
        # a shortened path names no layer by itself: the layer is the node's full path, compared as a path id
        # (equal ids, equal label paths); its name is the shortened path, numbered ` #2`, ` #3`... where two
        # layers would share one
        pid = _path_ids(label, par)
        deep = pl.Series(np.arange(n) >= n - ndeep) & out["attr"].is_null()
        out = out.with_columns(layer=pl.when(deep).then(None).otherwise(pl.col("layer")),
                               _pid=pl.when(deep).then(pl.Series(pid))).hstack(by_id(host, out["i"], "ts"))
        named = (out.filter(deep).group_by("_pid").agg(pl.col("module_path").first().alias("_name"),
                                                        pl.col("ts").min().alias("_t"), pl.col("ndepth").first())
                 .sort("_t", "ndepth", "_pid", maintain_order=True))
        taken = out["layer"].drop_nulls().unique().implode()
        named = named.with_columns(_r=pl.int_range(1, pl.len() + 1).over("_name")
                                   + pl.col("_name").is_in(taken).cast(pl.Int64))
        named = named.select("_pid", _name=pl.when(pl.col("_r") > 1)
                             .then(pl.col("_name") + " #" + pl.col("_r").cast(pl.String)).otherwise(pl.col("_name")))
        out = (out.join(named, on="_pid", how="left", maintain_order="left")
               .with_columns(layer=pl.coalesce("layer", "_name")).drop("_name", "_pid", "ts"))
    # each node's parent layer: its parent node's layer
    out = out.with_columns(parent_layer=out["layer"].gather(pl.Series(par).set(pl.Series(par < 0), None)))
    out = out.select("i", "pnode", "layer", "module_path", "label", "cls", "kind", "ndepth", "parent_layer", "src",
                     "attr")
    out = pl.concat([out, by_id(host, out["i"], "ts", "end")], how="horizontal")
    tree = (out.group_by("layer").agg(
        pl.col("parent_layer").first(), pl.col("label").first().alias("name"), pl.col("cls").first().alias("layer_class"),
        pl.col("kind").first(), pl.col("ndepth").first().alias("depth"), pl.col("module_path").first(),
        pl.col("src").first(), pl.col("ts").min().alias("first_ts"), pl.len().alias("calls"))
        .sort("first_ts", "depth", maintain_order=True))
    return out, tree


def _parent_positions(nodes: pl.DataFrame) -> np.ndarray:
    """Each node's parent as a row position in `nodes` (-1: a root, -2: a parent that is not among the nodes)."""
    ids = nodes["i"].cast(pl.Int64).to_numpy()
    pn = _np_ids(nodes["pnode"])
    order = np.argsort(ids, kind="stable")
    j = np.minimum(np.searchsorted(ids[order], pn), max(ids.size - 1, 0))
    found = (pn >= 0) & (ids[order][j] == pn) if ids.size else np.zeros(0, bool)
    return np.where(found, order[j] if ids.size else 0, np.where(pn >= 0, -2, -1))


def _depths(par: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(number of ancestors, reaches a root) per node of the forest `par` (parent positions, -1 a root, -2 a missing
    parent): pointer doubling, log2(depth) passes."""
    dist = (par >= 0).astype(np.int64)
    ptr = par.copy()
    act = np.flatnonzero(ptr >= 0)
    while act.size:
        q = ptr[act]
        dist[act] += dist[q]
        ptr[act] = ptr[q]
        act = act[ptr[act] >= 0]
    return dist, ptr == -1


def _kth_ancestor(par: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Each node's ancestor `k` levels up (0: itself; k at most its depth) in the forest `par`: the binary digits of
    k, one pointer-doubling pass each."""
    cur = np.arange(par.size)
    up = np.where(par >= 0, par, np.arange(par.size))  # a root points at itself
    k = k.astype(np.int64).copy()
    while (k > 0).any():
        bit = (k & 1).astype(bool)
        cur[bit] = up[cur[bit]]
        k >>= 1
        up = up[up]
    return cur


def _path_ids(label: pl.Series, par: np.ndarray) -> np.ndarray:
    """A number per node, equal for two nodes exactly when their label paths from the root are equal: prefix
    doubling over the parent pointers (the key of 2^k levels from the keys of 2^(k-1)), log2(depth) sorts."""
    n = par.size
    key = label.rank("dense").fill_null(0).cast(pl.Int64).to_numpy()
    ptr = par.copy()
    while (ptr >= 0).any():
        has = ptr >= 0
        at = np.where(has, ptr, 0)
        _, key = np.unique(key * (n + 2) + np.where(has, key[at] + 1, 0), return_inverse=True)
        ptr = np.where(has, ptr[at], -1)
    return key.astype(np.int64)


def _op_tree(host: pl.DataFrame, nodes: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """`_build_tree` of op nodes alone (the "ops" fallback: roots of the cpu_op tree, none encloses another): every
    node is a root whose layer and path are its label. The tree's rows are built per layer, not per node (no path,
    kind or ancestor list per node: a tiny-event trace has a node per op)."""
    out = pl.concat([nodes.lazy().select("i", "label", "cls", "src", layer="label").with_columns(
        pnode=pl.lit(None, pl.UInt32), ndepth=pl.lit(0, pl.Int32)).collect(**CHAIN), by_id(host, nodes["i"], "ts", "end")],
        how="horizontal")
    layer = pl.col("layer")
    tree = (out.lazy().group_by("layer").agg(pl.col("label").first().alias("name"), pl.col("cls").first().alias("layer_class"),
                                             pl.col("ts").min().alias("first_ts"), pl.len().alias("calls"))
            .select("layer", pl.lit(None, pl.String).alias("parent_layer"), "name", "layer_class",
                    pl.col("layer_class").alias("kind"), pl.lit(0, pl.Int32).alias("depth"), layer.alias("module_path"),
                    pl.lit("op").alias("src"), "first_ts", "calls")
            .sort("first_ts", "depth", maintain_order=True).collect(**CHAIN))
    return out, tree


def _innermost(rows: pl.DataFrame, nodes: pl.DataFrame) -> pl.DataFrame:
    """`_innermost_ids` as a frame [i, node] of the rows that have a node."""
    node = _innermost_ids(rows, nodes)
    hit = node >= 0
    return pl.DataFrame({"i": rows["i"].filter(pl.Series(hit)).cast(pl.UInt32),
                         "node": pl.Series(node[hit], dtype=pl.UInt32)})


def _innermost_ids(rows: pl.DataFrame, nodes: pl.DataFrame) -> np.ndarray:
    """For each row [i, pid, tid, ts], the innermost node [i, pid, tid, ts, end, parent, depth] on its
    thread that contains its start: the last node started at or before it (an as-of search on (thread, time);
    the deepest of nodes starting together), or the nearest ancestor of that node still open (one vectorised
    step per node-tree level). Returns the node's id per row (-1: none), in the rows' order."""
    if rows.height == 0 or nodes.height == 0:
        return np.full(rows.height, -1, np.int64)
    cols = ("pid", "tid", "ts")
    if any(rows[c].null_count() for c in cols) or any(nodes[c].null_count() for c in (*cols, "depth", "end")):
        return _np_ids(by_id(_innermost_joins(rows, nodes).sort("i"), rows["i"], "node")["node"])
    nr = rows.height
    gid = thread_ids(np.concatenate([rows["pid"].to_numpy(), nodes["pid"].to_numpy()]),
                     np.concatenate([rows["tid"].to_numpy(), nodes["tid"].to_numpy()]))
    rts, nts = rows["ts"].to_numpy(), nodes["ts"].to_numpy()
    lo = min(int(rts.min()), int(nts.min()))
    span = max(int(rts.max()), int(nts.max())) - lo + 1
    if gid is None or (int(gid.max()) + 1) * span >= 2**62:
        return _np_ids(by_id(_innermost_joins(rows, nodes).sort("i"), rows["i"], "node")["node"])
    rg, ng = gid[:nr], gid[nr:]
    nk = ng * span + (nts - lo)
    no = np.lexsort((nodes["depth"].to_numpy(), nk))
    j = np.searchsorted(nk[no], rg * span + (rts - lo), side="right") - 1
    cand = no[np.maximum(j, 0)]
    ok = (j >= 0) & (ng[cand] == rg)
    nend = nodes["end"].to_numpy()
    nid = nodes["i"].cast(pl.Int64).to_numpy()
    ids = np.sort(nid, kind="stable")  # ids come ascending: a linear pass
    par = filled(nodes["parent"].cast(pl.Int64), -1).to_numpy()
    pp = np.minimum(np.searchsorted(ids, par), max(ids.size - 1, 0))
    ppos = np.where((par >= 0) & (ids[pp] == par), np.argsort(nid, kind="stable")[pp], -1)  # parent's position
    res = np.full(nr, -1, np.int64)
    act, c = np.flatnonzero(ok), cand[ok]
    while act.size:
        inside = rts[act] < nend[c]
        res[act[inside]] = c[inside]
        act, c = act[~inside], ppos[c[~inside]]
        act, c = act[c >= 0], c[c >= 0]
    return np.where(res >= 0, nid[res], -1)


def _innermost_joins(rows: pl.DataFrame, nodes: pl.DataFrame) -> pl.DataFrame:
    """`_innermost` by joins (null times or thread ids, ids too large to pack)."""
    n = nodes.select(pl.col("i").alias("node"), "pid", "tid", pl.col("ts").alias("_nts"), "depth").sort("_nts", "depth", maintain_order=True)
    cur = (rows.select("i", "pid", "tid", "ts").sort("ts")
           .join_asof(n, left_on="ts", right_on="_nts", by=["pid", "tid"], strategy="backward",
                      check_sortedness=False)
           .select("i", "ts", "node").filter(pl.col("node").is_not_null()))
    info = nodes.select(pl.col("i").alias("node"), pl.col("end").alias("_nend"), pl.col("parent").alias("_up"))
    found: list[pl.DataFrame] = []
    while cur.height:
        cur = cur.join(info, on="node", how="inner")
        inside = pl.col("ts") < pl.col("_nend")
        found.append(cur.filter(inside).select("i", "node"))
        cur = cur.filter(~inside & pl.col("_up").is_not_null()).select("i", "ts", pl.col("_up").alias("node"))
    if not found:  # no row starts after any node on its thread
        return pl.DataFrame(schema={"i": pl.UInt32, "node": pl.UInt32})
    return pl.concat(found).cast({"i": pl.UInt32, "node": pl.UInt32})


# ---- attribution ------------------------------------------------------------------------------


def _fwd_thread_map(trace: Trace, h: pl.DataFrame, fwd_ops: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """[pid, fwd_tid (RecordFunction thread index), ftid (OS tid of the forward thread)] from the
    fwdbwd flows (ends on the cpu_ops `h` [pid, tid, ts, fwd_tid]), and [pid, ftid1] for processes with a single
    forward thread (the fallback)."""
    fl = trace.flows.filter(pl.col("cat") == "fwdbwd")
    pairs = pl.DataFrame(schema={"pid": pl.Int64, "fwd_tid": pl.Int64, "ftid": pl.Int64})
    if fl.height:
        # a semi join on (pid, tid, ts), as a join on the time alone (cheaper to hash) and a filter
        s = (fl.filter(pl.col("ph") == "s")
             .join(h.select(pl.col("pid").alias("_p"), pl.col("tid").alias("_t"), "ts"), on="ts")
             .filter((pl.col("pid") == pl.col("_p")) & (pl.col("tid") == pl.col("_t")))
             .select("id", "pid", pl.col("tid").alias("ftid")).unique("id"))
        f = (fl.filter(pl.col("ph") == "f")
             .join(h.filter(pl.col("fwd_tid") > 0).select("pid", "tid", "ts", "fwd_tid"), on=["pid", "tid", "ts"])
             .select("id", "pid", "fwd_tid").unique("id"))
        pairs = (s.join(f, on=["id", "pid"]).group_by("pid", "fwd_tid")
                 .agg(pl.col("ftid").mode().min()).select("pid", "fwd_tid", "ftid"))
    # no flows: a process with a single forward thread maps every thread index to it
    single = (fwd_ops.group_by("pid").agg(pl.col("ftid").unique()).filter(pl.col("ftid").list.len() == 1)
              .select("pid", pl.col("ftid").list.first().alias("ftid1")))
    return pairs, single


#: a host row's phase code (`Attribution.host.ph`): its index in PHASES
_PHASE_CODE = {p: k for k, p in enumerate(PHASES)}


def _np_ids(s: pl.Series) -> np.ndarray:
    """Row ids/positions as int64, -1 for null (a nullable integer column reads as float with NaN in numpy)."""
    a = s.to_numpy()
    if s.null_count():
        return np.where(np.isnan(a), -1, a).astype(np.int64)
    return a.astype(np.int64, copy=False)


def _distinct(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`np.unique(ids, return_inverse=True)` of non-negative row ids, by a table as long as the largest id (no
    sort)."""
    if ids.size == 0:
        return ids, ids
    seen = np.zeros(int(ids.max()) + 1, bool)
    seen[ids] = True
    rank = np.cumsum(seen) - 1
    return np.flatnonzero(seen), rank[ids]


def _rowpos(frame: pl.DataFrame, ids: pl.Series) -> np.ndarray:
    """The row position in `frame` of each id (-1: none)."""
    nulls = ids.null_count()
    if nulls and nulls < ids.len():  # the ids present only (no float-with-NaN round trips of every row)
        have = notnull(ids)
        out = np.full(ids.len(), -1, np.int64)
        out[have.to_numpy()] = _rowpos(frame, ids.filter(have))
        return out
    p = positions(frame, ids)
    if p is None:  # ids neither sorted nor compact: by a join
        p = by_id(frame.with_row_index("_pos"), ids, "_pos")["_pos"]
    return _np_ids(p)


def _attribute(trace: Trace) -> Attribution:
    host = trace.host
    rows = (host.lazy().filter(pl.col("cat").is_in(["cpu_op", *RUNTIME_CATS]))
            .select("i", "pid", "tid", "ts", "seq", "fwd_tid", "op", _op=pl.col("cat") == "cpu_op").collect(**IN_MEMORY))
    # a runtime call is in grad mode when the op that made it is (numpy on row positions: no join)
    opos = _rowpos(host, rows["op"])
    grad = notnull(rows["seq"]).to_numpy() | ((opos >= 0) & notnull(column(host, "seq")).to_numpy()[opos])
    rows = omit(rows, "op")
    if host.height == 0:
        return Attribution("none", pl.DataFrame(schema=_CODES_SCHEMA), _layer_codes(pl.DataFrame(schema=_NAMES_SCHEMA))[0],
                           pl.DataFrame(schema=_TREE_SCHEMA))
    events, source = _node_events(trace)
    nodes, tree = _build_tree(host, events)
    phase_of = pl.col("src").replace_strict({p: _PHASE_CODE[p] for p in ("optimizer", "dataloader")},
                                            default=_PHASE_CODE["forward"], return_dtype=pl.Int8)
    nl = nodes.lazy().select("i", "layer", pl.col("cls").alias("layer_class"), pl.col("ndepth").alias("depth"),
                             phase_of.alias("nphase")).sort("i").collect(**CHAIN)  # (by node id, for the search below)
    # forward: innermost enclosing node (or the op itself when ops are the nodes)
    # ops made nodes (the "ops" fallback) are their own layer; everything else by time containment
    # (op nodes too: an op's children and its runtime calls belong to it)
    node_ev = pl.concat([nodes, by_id(host, nodes["i"], "pid", "tid")], how="horizontal").select(
        "i", "pid", "tid", "ts", "end", pl.col("pnode").alias("parent"), pl.col("ndepth").alias("depth"))
    # an op that is a node (the "ops" fallback) is its own layer (no search for it)
    own_ids = nodes.filter(pl.col("src") == "op")["i"]
    del nodes, events  # (a row per node: on a tiny-event trace, per op)
    own = rows["i"].is_in(members(own_ids)).to_numpy() if own_ids.len() else None
    if own is None or not own.any():
        node = _innermost_ids(rows, node_ev)
    else:
        node = rows["i"].cast(pl.Int64).to_numpy().copy()
        node[~own] = _innermost_ids(rows.filter(pl.Series(~own)), node_ev)
    del node_ev, own
    # backward: the innermost enclosing autograd node op (it carries the sequence number); the mask of those
    # ops without a string comparison on every host row
    auto = filled(column(host, "fwd_tid") > 0, False).to_numpy()
    at = np.flatnonzero(auto)
    auto[at] = filled(take(host["cat"], at) == "cpu_op", False).to_numpy()
    bnode = ancestor_ids(host, rows["i"], auto, include_self=True)
    bwd_row = bnode >= 0
    fnode = np.full(rows.height, -1, np.int64)
    if bwd_row.any():
        fnode[bwd_row] = _forward_nodes(trace, rows, node, bnode[bwd_row])
    # each row's layer node: the forward op's node for a backward row, else its own; then the node's position
    # in `nl` (its height: no node, `(unattributed)`) and the code of its layer
    lnode = np.where(fnode >= 0, fnode, node)
    del fnode, node, bnode  # (each array one int64 per cpu_op and runtime row, as those below: freed early)
    nid = nl["i"].to_numpy()
    pos = np.minimum(np.searchsorted(nid, lnode), max(nid.size - 1, 0))
    found = (lnode >= 0) & (nid[pos] == lnode) if nid.size else np.zeros(rows.height, bool)
    pos[~found] = nl.height
    # phase: backward rows, then the node's phase, then grad mode (a loss computed outside the model: forward)
    node_phase = np.append(nl["nphase"].to_numpy(), -1)
    code = np.full(rows.height, _PHASE_CODE["other"], np.uint8)
    code[grad] = _PHASE_CODE["forward"]
    code[found] = node_phase[pos[found]]
    code[bwd_row] = _PHASE_CODE["backward"]
    del found, grad, bwd_row
    names, node_code = _layer_codes(nl)
    out = pl.DataFrame([rows["i"].cast(pl.UInt32), pl.Series("lc", node_code[pos], pl.UInt32),
                        pl.Series("ph", code, pl.UInt8)])
    out = out if out["i"].is_sorted() else out.sort("i")
    return Attribution(source, out, names, tree, int((tree["depth"] >= PATH_LEVELS).sum()))


def _forward_nodes(trace: Trace, rows: pl.DataFrame, node: np.ndarray, bnode: np.ndarray) -> np.ndarray:
    """The node of the forward op (-1: none) of each autograd node op `bnode` (host ids): the op of the same
    sequence number on the forward thread, found through the thread map of the fwdbwd flows. `rows` are the
    cpu_op and runtime rows [i, pid, tid, ts, seq, fwd_tid, _op (a cpu_op)] and `node` their forward nodes."""
    # forward op of each sequence number: the one that started last on its thread
    fsel = rows["seq"].is_not_null() & (rows["fwd_tid"].fill_null(0) == 0)
    fwd_ops = (rows.select("pid", "tid", "seq", "ts").hstack([pl.Series("node", node)]).filter(fsel)
               .sort("ts").group_by("pid", "tid", "seq").agg(pl.col("node").last().alias("fnode"))
               .rename({"tid": "ftid"}))
    pairs, single = _fwd_thread_map(trace, rows.filter("_op").select("pid", "tid", "ts", "fwd_tid"), fwd_ops)
    # each distinct autograd node once
    bu, binv = _distinct(bnode)
    bnodes = pl.Series("bnode", bu, pl.UInt32)
    bn = (pl.concat([bnodes.to_frame(), by_id(trace.host, bnodes, "pid", pl.col("seq").alias("bseq"),
                                                pl.col("fwd_tid").alias("bft"))], how="horizontal")
          .join(pairs.rename({"fwd_tid": "bft"}), on=["pid", "bft"], how="left")
          .join(single, on="pid", how="left")
          .with_columns(ftid=pl.coalesce("ftid", "ftid1"))
          .join(fwd_ops, left_on=["pid", "ftid", "bseq"], right_on=["pid", "ftid", "seq"], how="left")
          .select("bnode", "fnode").sort("bnode"))
    return _np_ids(bn["fnode"])[binv]


#: up to this many layer nodes, `_layer_codes` numbers their distinct layers in Python
_FEW_NODES = 4096


def _layer_codes(nl: pl.DataFrame) -> tuple[pl.DataFrame, np.ndarray]:
    """The distinct [layer, layer_class, depth] of the nodes `nl` (one row per code, `(unattributed)` last) and
    each node's code (the last entry: the code of no node)."""
    key = ["layer", "layer_class", "depth"]
    if nl.height <= _FEW_NODES:  # a few nodes: a dict (fewer polars calls)
        seen: dict[tuple, int] = {}
        code = np.array([seen.setdefault(k, len(seen)) for k in pick(nl, *key).iter_rows()], np.int64)
    else:
        code = nl.select(pl.struct(key).rank("dense"))[:, 0].to_numpy().astype(np.int64) - 1
    _, first = np.unique(code, return_index=True)
    un = pl.DataFrame({"layer": [UNATTRIBUTED], "layer_class": [UNATTRIBUTED], "depth": [None]}, schema=_NAMES_SCHEMA)
    names = pl.concat([pick(nl, *key)[first].cast(_NAMES_SCHEMA), un])
    return names, np.append(code, first.size)


def tree_parents(tree: pl.DataFrame) -> np.ndarray:
    """Each row's parent layer as a row position in `tree` (-1: a root)."""
    if tree.height <= _FEW_NODES:  # a few layers (one row each): a dict (fewer polars calls)
        row = {layer: k for k, layer in enumerate(tree["layer"].to_list()) if layer is not None}
        return np.array([row.get(p, -1) for p in tree["parent_layer"].to_list()], np.int64)
    pos = tree.select(pl.col("layer"), pl.int_range(pl.len(), dtype=pl.Int64).alias("_r"))
    p = tree.select("parent_layer").join(pos, left_on="parent_layer", right_on="layer", how="left",
                                         maintain_order="left")["_r"]
    return p.fill_null(-1).to_numpy()


def subtree_sums(tree: pl.DataFrame, vals: np.ndarray) -> np.ndarray:
    """Per layer (a row of `tree`), its values plus those of every layer below it: `vals` (one row per layer) added
    into the parent row, deepest level first (a parent is shallower than its children), one vectorised step per
    level; memory as `vals`, whatever the depth."""
    par = tree_parents(tree)
    out = vals.copy()
    has = np.flatnonzero(par >= 0)
    if has.size == 0:
        return out
    dep = tree["depth"].to_numpy()
    order = has[np.argsort(-dep[has], kind="stable")]
    for grp in np.split(order, np.flatnonzero(np.diff(dep[order])) + 1):
        np.add.at(out, par[grp], out[grp])
    return out


def layers_within(trace: Trace, layer: str) -> list[str]:
    """`layer` and every layer nested in it, by the tree's parent pointers (not by name: a `module::` name or a
    shortened path is no prefix of its sub-layers' names); `[layer]` for a name the tree does not hold."""
    tree = attribution(trace).tree
    names = tree["layer"]
    at = np.flatnonzero((names == layer).fill_null(False).to_numpy())
    if at.size == 0:
        return [layer]
    par, dep = tree_parents(tree), tree["depth"].to_numpy()
    inside = np.zeros(tree.height, bool)
    inside[at[0]] = True
    # shallowest first: a parent is shallower than its children, so its mark is final when theirs are set
    order = np.flatnonzero((dep > dep[at[0]]) & (par >= 0))
    order = order[np.argsort(dep[order], kind="stable")]
    for grp in np.split(order, np.flatnonzero(np.diff(dep[order])) + 1):
        inside[grp] |= inside[par[grp]]
    return names.filter(pl.Series(inside)).to_list()


def ancestor_pairs(tree: pl.DataFrame, levels: int | None = None) -> pl.DataFrame:
    """[lid, alid]: each layer (row of `tree`) with itself and its ancestors up to `levels` levels (all: None) above
    it, nearest first; as many rows as layers times their depth (callers bound `levels`)."""
    par = tree_parents(tree)
    lid = np.arange(tree.height)
    cur = lid
    parts: list[tuple[np.ndarray, np.ndarray]] = []
    while lid.size and (levels is None or len(parts) < levels):
        parts.append((lid, cur))
        up = par[cur]
        keep = up >= 0
        lid, cur = lid[keep], up[keep]
    if not parts:
        return pl.DataFrame(schema={"lid": pl.UInt32, "alid": pl.UInt32})
    return pl.DataFrame([pl.Series("lid", np.concatenate([a for a, _ in parts]), pl.UInt32),
                         pl.Series("alid", np.concatenate([b for _, b in parts]), pl.UInt32)])


# ---- per-layer table --------------------------------------------------------------------------


def device_peaks(trace: Trace) -> Spec:
    """The device's datasheet peaks."""
    return trace_spec(trace.meta)


def top_level_ops(trace: Trace) -> pl.DataFrame:
    """cpu_ops with no enclosing cpu_op on their thread (what Python called): [i, name, pid, tid, ts, end, dur]
    (taken from the host frame on each call: callers keep what they need)."""
    return trace.host.select("i", "name", "pid", "tid", "ts", "end", "dur")[_top_rows(trace)]


@per_trace
def _top_rows(trace: Trace) -> pl.Series:
    """The host rows of `top_level_ops`, in host order. Row positions are what is kept: the ops' columns, a
    frame as long as the ops (a tiny-event trace: every op is top-level), would be held to the end of the
    analysis (10 M tiny events: 170 MB)."""
    cols = [c for c in ("i", "cat", "pid", "tid", "ts", "dur", "end", "ev_idx") if c in trace.host.columns]
    ops = trace.host.lazy().with_row_index("_row").filter(pl.col("cat") == "cpu_op").select("_row", *cols).collect(**IN_MEMORY)
    return ops["_row"].filter(roots(omit(ops, "_row")))


@per_trace
def _top_codes(trace: Trace) -> pl.DataFrame:
    """The layer codes [lc, ph] of the rows of `top_level_ops` (beside them: its columns are not copied)."""
    return by_id(attribution(trace).host, take(trace.host["i"], _top_rows(trace)), "lc", "ph")


def _top(trace: Trace, *cols: str) -> pl.DataFrame:
    """Outermost cpu_ops' `cols` with their layer code `lc`."""
    return pick(trace.host, *cols)[_top_rows(trace)].hstack([_top_codes(trace)["lc"]])


#: segments summed at a time by `_class_time`
_CHUNK = 1 << 20


def _class_time(part: pl.DataFrame, lid: np.ndarray) -> pl.DataFrame:
    """[lid, cls, dur]: the partition's time per (layer id `lid` of each segment, class), for the pairs that occur;
    integer sums. Summed by `bincount` over chunks of segments (no frame of a key per segment and no hash group-by
    of the class strings: a tiny-event trace has two segments per kernel); each chunk's sums are exact in float64
    (integers below 2**53 ns: segments tile the steps, no sum passes the recording's length)."""
    cls = part["cls"].cast(pl.Enum(CLASSES), strict=False)
    if cls.null_count() or part["ts"].null_count() or part["end"].null_count() or part.height == 0:
        return (part.select("cls", dur=pl.col("end") - pl.col("ts")).hstack([pl.Series("lid", lid, pl.UInt32)])
                .group_by("lid", "cls").agg(pl.col("dur").sum()))
    nk = len(CLASSES)
    code, ts, end = cls.to_physical().to_numpy(), part["ts"].to_numpy(), part["end"].to_numpy()
    size = (int(lid.max()) + 1) * nk
    tot = np.zeros(size, np.int64)
    seen = np.zeros(size, bool)
    for a in range(0, part.height, _CHUNK):
        b = a + _CHUNK
        key = lid[a:b].astype(np.int64)
        key *= nk
        key += code[a:b]
        tot += np.bincount(key, weights=end[a:b] - ts[a:b], minlength=size).astype(np.int64)
        seen[key] = True
    has = np.flatnonzero(seen)
    return pl.DataFrame([pl.Series("lid", has // nk, pl.UInt32), take(pl.Series(CLASSES, dtype=pl.String), has % nk).alias("cls"),
                         pl.Series("dur", tot[has], pl.Int64)])


def _top_ops(trace: Trace) -> pl.DataFrame:
    """Outermost cpu_ops (no enclosing cpu_op) with their layer: [i, pid, tid, ts, end, dur, layer, phase]."""
    return trace.host.select("i", "pid", "tid", "ts", "end", "dur")[_top_rows(trace)].hstack(
        attribution(trace).decode(_top_codes(trace), "layer", "phase"))


def segment_layers(trace: Trace, segments: pl.DataFrame) -> pl.DataFrame:
    """Give each classifier segment [step, ts, end, cls] the layer responsible for it: the layer of the GPU
    activity running at its midpoint for GPU classes, else the layer of the outermost host op running
    then (on any thread), else `(unattributed)`."""
    code = _segment_codes(trace, segments)
    return segments.select("step", "ts", "end", "cls").hstack([attribution(trace).names["layer"].gather(code).alias("layer")])


def _segment_codes(trace: Trace, segments: pl.DataFrame) -> pl.Series:
    """`segment_layers`' layer of each segment as a layer code."""
    # the searches run on the midpoints alone, in time order, and find row positions; the layer strings are
    # gathered once at the end and the segments' own columns are not copied (a tiny-event trace has a segment
    # per launch and per kernel)
    t = segments.select(t=(pl.col("ts") + pl.col("end")) // 2)["t"]
    order = None if t.is_sorted() else t.arg_sort()  # the classifier's segments come in time order
    q = (t if order is None else t.gather(order)).to_frame()
    g = (trace.gpu.lazy().select("i", pl.col("ts").alias("_gts"), pl.col("end").alias("_gend"), "kind")
         .filter(pl.col("kind") != "sync").drop("kind").sort("_gts").collect(**CHAIN))
    # every GPU row has its layer row: a lookup by id (in time order: the strings are gathered once)
    att = attribution(trace)
    g = omit(join_by_id(g, "i", gpu_codes(trace), pl.col("lc").alias("_gl")), "i").with_row_index("_p")
    gp = _open_at(q, omit(g, "_gl"), "_gts", "_gend")
    g = g["_gl"]  # (the activities' times: no longer read)
    top = _top(trace, "pid", "tid", "ts", "end")
    top = top.filter(att.known(top["lc"]))
    threads = pick(top, "pid", "tid").unique()
    hops = top.lazy().select("pid", "tid", pl.col("ts").alias("_hts"), pl.col("end").alias("_hend"),
                             pl.col("lc").alias("_hl")).sort("_hts").collect(**CHAIN).with_row_index("_p")
    if threads.height <= 1:  # one thread: the op open at the midpoint, without the per-thread cross join
        hp = _open_at(q, omit(hops, "pid", "tid", "_hl"), "_hts", "_hend")
    elif threads.height <= _FEW_THREADS and not any(hops[c].null_count() for c in hops.columns if c != "_hl"):
        hp = _open_op(q["t"].to_numpy(), hops)
    else:
        q = q.with_row_index("_s")
        h = (q.join(threads, how="cross").sort("t")
             .join_asof(hops.drop("_hl"), left_on="t", right_on="_hts", by=["pid", "tid"], strategy="backward",
                        check_sortedness=False)
             .filter(pl.col("t") < pl.col("_hend")).sort("_hts").group_by("_s").agg(pl.col("_p").last()))
        hp = _np_ids(q.join(h, on="_s", how="left").sort("_s")["_p"])
    # GPU classes: the GPU activity's layer, else the host op's; the others the other way round; else none
    gpu_cls = (segments["cls"] if order is None else segments["cls"].gather(order)).is_in(
        ["gpu_compute", "gpu_memory", "communication"]).fill_null(False).to_numpy()
    # (in place: a tiny-event trace has a segment per kernel and per launch, each array one int64 per segment)
    ng = g.len()
    hq = hp if hp.flags.writeable else hp.copy()
    hq[hq >= 0] += ng
    use_h = np.where(gpu_cls, gp < 0, hq >= 0)
    del gpu_cls
    pos = gp if gp.flags.writeable else gp.copy()
    pos[use_h] = hq[use_h]
    del hq, use_h
    pos[pos < 0] = ng + hops.height
    idx = pl.Series(pos, dtype=pl.UInt32)
    if order is not None:  # back to the segments' order
        idx = idx.gather(order.arg_sort())
    return take(pl.concat([g, hops["_hl"], pl.Series([att.unattributed], dtype=pl.UInt32)]), idx)


def _open_at(q: pl.DataFrame, rows: pl.DataFrame, start: str, end: str) -> np.ndarray:
    """Per time `q["t"]` (ascending), the position `_p` (`rows`' row index) of the last of `rows` (by `start`) started
    at or before it, where it is still open then (`t < end`); -1 where none is: an as-of search. Without nulls by a
    binary search on the arrays (no frame of every query with the row's columns: a tiny-event trace has a query per
    segment)."""
    if rows[start].null_count() or rows[end].null_count() or not rows[start].is_sorted():
        return _np_ids(q.join_asof(rows, left_on="t", right_on=start, strategy="backward", check_sortedness=False)
                       .select(pl.when(pl.col("t") < pl.col(end)).then(pl.col("_p")))[:, 0])
    return open_at(rows[start].to_numpy(), rows[end].to_numpy(), q["t"].to_numpy())


#: up to this many host threads with layered ops, `segment_layers` searches each thread's ops in turn
_FEW_THREADS = 16


def _open_op(t: np.ndarray, hops: pl.DataFrame) -> np.ndarray:
    """The row (-1: none) of the op [pid, tid, _hts, _hend] open at each time `t` on its thread (top-level ops do not
    overlap on one thread: the last one started at or before `t`), the latest-started of those over the
    threads; null where none is open. One binary search per thread (a handful), no cross join."""
    gid = thread_ids(hops["pid"].to_numpy(), hops["tid"].to_numpy())
    if gid is None:
        gid = hops.select(pl.struct("pid", "tid").rank("dense"))[:, 0].to_numpy()
    hts, hend = hops["_hts"].to_numpy(), hops["_hend"].to_numpy()
    best = np.full(t.size, -1, np.int64)
    best_ts = np.full(t.size, np.iinfo(np.int64).min, np.int64)
    for g in np.unique(gid):
        mine = np.flatnonzero(gid == g)
        mine = mine[np.argsort(hts[mine], kind="stable")]
        j = open_at(hts[mine], hend[mine], t)
        c = mine[np.maximum(j, 0)]
        ok = (j >= 0) & (hts[c] >= best_ts)
        best[ok], best_ts[ok] = c[ok], hts[c[ok]]
    return best


@per_trace
def shape_signatures(trace: Trace) -> pl.DataFrame:
    """[layer, shape_sig, shapes]: what each layer computes on, from the `Input Dims` of the forward ops it
    runs (itself and its submodules, down to PATH_LEVELS levels below it). Two layers of one class are the same layer only with the same
    signature (GPT-2's `Conv1D` c_fc [768, 3072] vs c_proj [3072, 768]). `shapes` is a readable label: the
    layer's first GEMM/conv/attention op with its input dims (else its op with the longest dims). Null
    signature without shapes (record_shapes off)."""
    att = attribution(trace)
    schema = {"layer": pl.String, "shape_sig": pl.UInt64, "shapes": pl.String}
    h = trace.host
    if att.tree.height == 0 or "input_dims" not in h.columns:
        return pl.DataFrame(schema=schema)
    # the ops with dims first, as a mask over the host rows (no frame of every forward row's strings: a tiny-event
    # trace's ops all run forward, none with dims); their times, names and dims then
    has = filled((h["cat"] == "cpu_op") & notnull(h["input_dims"]) & (h["input_dims"].cat.len_bytes() > 2), False)
    if not has.any():  # record_shapes off
        return pl.DataFrame(schema=schema)
    dims = pl.col("input_dims").cast(pl.String)
    fw = pick(att.host.filter(pl.col("ph") == PHASES.index("forward")), "i", "lc")
    at = positions(h, fw["i"])
    keep = (by_id(h.select("i", has.alias("_k")), fw["i"], "_k")["_k"] if at is None else take(has, at))
    fw = fw.filter(filled(keep, False))
    fw = pl.DataFrame([fw["i"], take(att.names["layer"], fw["lc"])])
    ops = (pl.concat([fw, by_id(h, fw["i"], "ts", "name", "input_dims")], how="horizontal").lazy()
           .select("i", "layer", "ts", "name", dims.alias("d"))
           .filter(pl.col("d").str.contains(r"\d")).collect(**CHAIN))
    if ops.height == 0:
        return pl.DataFrame(schema=schema)
    heavy = pl.col("name").str.contains(r"(?i)mm|linear|conv|attention|matmul")
    # distinct (layer, op, dims) first: repeated steps and calls collapse before the climb to the ancestors
    ops = (ops.lazy().group_by("layer", "name", "d").agg(pl.col("ts").min())
           .with_columns(combo=pl.col("name") + pl.col("d"), _pri=pl.when(heavy).then(0).otherwise(1),
                         _len=-pl.col("d").str.len_chars().cast(pl.Int64)))
    # each layer's ops count for it and the layers up to PATH_LEVELS levels above it (all of them but in a hostile
    # trace nesting deeper: a pair per layer and level)
    tree = att.tree
    lids = pl.DataFrame([tree["layer"], pl.Series("lid", np.arange(tree.height), pl.UInt32)])
    pairs = ancestor_pairs(tree, PATH_LEVELS)
    pairs = pl.DataFrame([pairs["lid"], take(tree["layer"], pairs["alid"]).alias("_anc")])
    inc = (ops.join(lids.lazy(), on="layer").drop("layer").join(pairs.lazy(), on="lid").drop("lid")
           .rename({"_anc": "layer"}))
    # `addmm [2304], [4096, 768], [768, 2304]`: tensor inputs only (scalars are `[]`)
    tensors = pl.col("d").str.replace_all(r"\[\]\s*,?\s*", "").str.replace_all(r",\s*\]$", "]")
    label = pl.col("name").str.strip_prefix("aten::") + " " + tensors.str.slice(1).str.strip_suffix("]")
    return inc.group_by("layer").agg(
        pl.col("combo").unique().sort().str.join("|").hash().alias("shape_sig"),
        label.sort_by("_pri", "ts", "_len").first().alias("shapes"),
    ).cast(schema).collect(**CHAIN)


def layer_table(trace: Trace, steps: pl.DataFrame | None = None, depth: int | None = None,
                findings: pl.DataFrame | None = None, kb: pl.DataFrame | None = None,
                part: pl.DataFrame | None = None) -> pl.DataFrame:
    """`layer_table_phases`' table."""
    return layer_table_phases(trace, steps, depth, findings, kb, part)[0]


def layer_table_phases(trace: Trace, steps: pl.DataFrame | None = None, depth: int | None = None,
                       findings: pl.DataFrame | None = None, kb: pl.DataFrame | None = None,
                       part: pl.DataFrame | None = None) -> tuple[pl.DataFrame, dict[str, int]]:
    """(the layer table, GPU ns per training phase {phase: ns} of the same activities: those that start in a step,
    syncs left out; summed from the table's own per-kernel frame, not a second search of every kernel).

    The table: one row per layer (tree order) plus `(unattributed)`, over the given steps (default: all).

    Times are ns and *inclusive* (a block counts its submodules); `self_gpu_ns` is the layer's own
    share, so sum(self_gpu_ns) over all layers + the `(unattributed)` row = total GPU time (kernels,
    memcpy, memset). With `depth`, deeper layers are left out (their time is in their ancestors).
    `kb` (per-kernel roofline [i, flops, bytes, bpe, bound]) adds FLOPs, bytes and the bound; `part` (the
    classifier's segments [step, ts, end, cls]) adds the class shares; `findings` [layer, code] the findings."""
    steps = trace.steps if steps is None else steps
    att = attribution(trace)
    tree = att.tree
    # rows are grouped by layer id (`lid`: the layer's row in `tree`, its height for `(unattributed)`), integers
    # instead of layer strings; the strings come from the tree's rows
    row = {layer: k for k, layer in enumerate(tree["layer"].to_list())}
    nt = tree.height
    lid_of = np.array([row.get(layer, nt) for layer in att.names["layer"].to_list()], np.int64)
    unl = np.append(tree["layer"].to_numpy() == UNATTRIBUTED, True)  # per lid: `(unattributed)`
    # every row counts for its own layer and each enclosing one: sums per layer first, then added up the tree
    # (`subtree_sums`: no copy of a row per enclosing layer, so memory does not grow with the nesting)
    ph = pl.col("ph")

    def incl(own: pl.DataFrame, cols: list[str]) -> pl.DataFrame:
        """[lid, cols...] of the layers (lid < nt) with rows in their subtree: the per-layer sums `own` [lid, cols...,
        _n (rows)] added up the tree (integer columns exactly, float ones in float64)."""
        ids = own["lid"]
        if ids.null_count() or (own.height and ids.max() >= nt):  # (a query only when there is a row to drop)
            own = own.filter(pl.col("lid") < nt)
        lid = own["lid"].to_numpy()
        sums: dict[str, np.ndarray] = {}
        # one climb per kind of column: the integer ones together (exact), the float ones together
        for kind in (False, True):
            cs = [c for c in [*cols, "_n"] if own.schema[c].is_float() == kind]
            if cs:
                a = np.zeros((nt, len(cs)), np.float64 if kind else np.int64)
                a[lid] = np.column_stack([filled(own[c], 0).to_numpy() for c in cs])  # (no query per climb)
                a = subtree_sums(tree, a)
                sums.update({c: a[:, k] for k, c in enumerate(cs)})
        keep = sums["_n"] > 0  # the layers with rows in their subtree (numpy masks: no filter and drop queries)
        return pl.DataFrame([pl.Series("lid", np.arange(nt)[keep], pl.UInt32),
                             *(pl.Series(c, sums[c][keep]).cast(own.schema[c]) for c in cols)])

    # classifier shares: the step time each layer is responsible for, split by class (first: the segments' search
    # runs before the per-kernel frames below are built, not beside them)
    sh = None
    if part is not None and part.height:
        sl = _class_time(part, lid_of.astype(np.uint32)[_segment_codes(trace, part).to_numpy()])  # per layer first
        wide = sl.group_by("lid").agg(*[pl.col("dur").filter(pl.col("cls") == c).sum().alias(c) for c in CLASSES],
                                      pl.len().alias("_n"))
        # (lazy: the shares are computed in the table's query below)
        rolled = incl(wide, list(CLASSES)).lazy().unpivot(index="lid", variable_name="cls", value_name="dur")
        sh = pl.concat([rolled, sl.lazy().filter(pl.Series(unl[sl["lid"].to_numpy()]))], how="diagonal_relaxed")
        sh = sh.group_by("lid").agg(pl.col("dur").sum().alias("time_ns"),
                                    *[pl.col("dur").filter(pl.col("cls") == c).sum().alias(f"share_{c}")
                                      for c in CLASSES])
        sh = sh.with_columns([(100 * pl.col(f"share_{c}") / pl.col("time_ns")).alias(f"share_{c}") for c in CLASSES])
        dom = pl.concat_list([pl.col(f"share_{c}") for c in CLASSES]).list.arg_max()
        sh = sh.with_columns(dominant=dom.replace_strict(dict(enumerate(CLASSES)), return_dtype=pl.String))
    # (copies and fills as a flag, not the kind strings: a frame as long as the kernels)
    copy = pl.col("kind").is_in(["memcpy", "memset"])
    g = in_steps(trace.gpu.lazy().filter(pl.col("kind") != "sync").select(
        "i", "ts", "dur", copy.alias("_copy"), pl.col("bytes").cast(pl.Float64).alias("_cbytes")).collect(**IN_MEMORY), steps)
    g = join_by_id(g, "i", gpu_codes(trace), "lc", "ph")  # every GPU row has its layer row
    g = omit(g, "lc").hstack([pl.Series("lid", lid_of[g["lc"].to_numpy()], pl.UInt32)])
    if kb is not None:
        g = join_by_id(g, "i", kb, *[c for c in ("flops", "bytes", "bpe", "bound", "tf32") if c in kb.columns])
    # the per-kernel columns below in one query (a small trace's run is mostly polars' fixed cost per query)
    lg = g.lazy().with_columns([pl.lit(None, dt).alias(c) for c, dt in (
        ("flops", pl.Float64), ("bytes", pl.Float64), ("bpe", pl.Float64), ("bound", pl.String), ("tf32", pl.Boolean))
        if c not in g.columns])
    # copies and fills move their own byte count
    lg = lg.with_columns(bytes=pl.when("_copy").then(pl.col("_cbytes")).otherwise(pl.col("bytes")),
                         bound=pl.when("_copy").then(pl.lit("memory")).otherwise(pl.col("bound")))
    spec = device_peaks(trace)
    if spec is not None:  # always known (an unknown GPU falls back to a default row that says so)
        # the shortest time the device could do this work in (roofline): FLOPs at the peak of the math unit they
        # ran on (tensor cores for <= 2-byte operands and for TF32 kernels, `roofline.peak_expr`), bytes at the
        # HBM bandwidth
        lg = lg.with_columns(_tf=pl.col("flops") / peak_expr(spec), _tb=pl.col("bytes") / (spec.hbm_tbps * 1e12))
    else:
        lg = lg.with_columns(_tf=pl.lit(None, pl.Float64), _tb=pl.lit(None, pl.Float64))
    # the columns the sums read: each row is repeated per enclosing layer below (on a tiny-event trace the
    # frame has as many rows as kernels: the ids, times and kinds would be copied for nothing)
    g = lg.select("lid", "ph", "dur", "flops", "bytes", "bound", "_tf", "_tb").collect(**CHAIN)
    phase_ns = {PHASES[k]: v for k, v in g.group_by("ph").agg(pl.col("dur").sum()).iter_rows()}
    top = in_steps(_top(trace, "ts", "dur"), steps)  # (what the CPU sums read)
    top = omit(top, "lc").hstack([pl.Series("lid", lid_of[top["lc"].to_numpy()], pl.UInt32)])
    fwd, bwd = PHASES.index("forward"), PHASES.index("backward")
    gagg = [pl.col("dur").sum().alias("gpu_ns"), pl.col("dur").filter(ph == fwd).sum().alias("fwd_gpu_ns"),
            pl.col("dur").filter(ph == bwd).sum().alias("bwd_gpu_ns"),
            pl.col("dur").filter(~ph.is_in([fwd, bwd])).sum().alias("other_gpu_ns"),
            pl.len().alias("kernels")]
    hasf = pl.col("flops").is_not_null() | pl.col("bytes").is_not_null()
    fagg = [pl.col(c).sum().alias(c) for c in ("flops", "bytes", "_tf", "_tb")]
    # the float sums (FLOPs, bytes, ideal times) grouped by the layer's string, as before the layer ids: a float
    # sum's rounding depends on how polars splits a group's rows, which differs with the key's type and with its
    # sorted flag (gathered from two or more strings: none; from a one-layer tree it would be set). Without a
    # float to sum (no kernel with FLOPs or bytes: a tiny-event trace) there is no rounding to keep, and no string
    # per kernel, which was the top of the analysis's peak of memory there: by the layer id
    lookup = pl.concat([tree["layer"], pl.Series([UNATTRIBUTED])])
    gk = g.filter(pl.col("lid") < nt)
    if gk.select(hasf.any()).item():
        own = (gk.with_columns(layer=take(lookup, gk["lid"])).group_by("layer")
               .agg(*gagg, *fagg, hasf.any().cast(pl.Int64).alias("_hasf"), pl.len().alias("_n")))
        own = omit(own, "layer").hstack([pl.Series("lid", [row[x] for x in own["layer"].to_list()], dtype=pl.UInt32)])
    else:
        own = gk.group_by("lid").agg(*gagg, pl.len().alias("_n")).with_columns(
            *[pl.lit(0.0).alias(c) for c in ("flops", "bytes", "_tf", "_tb")], _hasf=pl.lit(0, pl.Int64))
    del gk
    gcols = ["gpu_ns", "fwd_gpu_ns", "bwd_gpu_ns", "other_gpu_ns", "kernels", "flops", "bytes", "_tf", "_tb", "_hasf"]
    per = incl(own, gcols).lazy().with_columns(pl.col("_hasf") > 0)  # (lazy: computed in the table's query)
    del own
    self_ = g.lazy().group_by("lid").agg(pl.col("dur").sum().alias("self_gpu_ns"), pl.len().alias("self_kernels"))
    # the bound holding most of a layer's GPU time (its sub-layers' included); ties to the first name
    bk = (g.lazy().filter(pl.col("bound").is_not_null()).group_by("lid", "bound").agg(pl.col("dur").sum(), pl.len().alias("_n"))
          .collect(**CHAIN))
    bound = pl.DataFrame(schema={"lid": pl.UInt32, "bound": pl.String})
    if bk.height:
        kinds = sorted(set(bk["bound"].to_list()))  # (a few rows per layer: no query)
        # per layer, each bound's sums side by side (a pivot with 0 for none), in one query
        b = pl.col("bound")
        wide = bk.lazy().group_by("lid").agg(*[pl.col("dur").filter(b == k).sum().alias(f"dur_{k}") for k in kinds],
                                             *[pl.col("_n").filter(b == k).sum().alias(f"_n_{k}") for k in kinds])
        wide = wide.with_columns(_n=pl.sum_horizontal(*[pl.col(f"_n_{k}") for k in kinds])).collect(**CHAIN)
        up = incl(wide, [c for c in wide.columns if c not in ("lid", "_n")])
        d = np.stack([np.where(up[f"_n_{b}"].to_numpy() > 0, up[f"dur_{b}"].to_numpy(), -1) for b in kinds], axis=1)
        bound = pl.DataFrame([up["lid"], take(pl.Series("bound", kinds, pl.String), d.argmax(axis=1))])
    # integer sums: summed per layer first, then through the ancestors
    cpu = incl(top.group_by("lid").agg(pl.col("dur").sum().alias("cpu_ns"), pl.len().alias("_n")), ["cpu_ns"])
    # the table from here on is one lazy query (a small trace's run is mostly polars' fixed cost per query)
    out = (tree.lazy().select(pl.int_range(nt, dtype=pl.UInt32).alias("lid"), "layer", "name", "layer_class", "kind",
                              "depth", "parent_layer", "module_path", "calls", "first_ts")
           .join(per.lazy(), on="lid", how="left").join(self_.lazy(), on="lid", how="left")
           .join(bound.lazy(), on="lid", how="left").join(cpu.lazy(), on="lid", how="left"))
    un = g.filter(pl.Series(unl[g["lid"].to_numpy()]))
    if un.height or nt == 0:  # (the joins above keep the tree's rows)
        urow = un.group_by(pl.lit(UNATTRIBUTED).alias("layer")).agg(*gagg, *fagg, hasf.any().alias("_hasf")).lazy().with_columns(
            self_gpu_ns=pl.col("gpu_ns"), self_kernels=pl.col("kernels"),
            cpu_ns=pl.lit(int(top["dur"].filter(pl.Series(unl[top["lid"].to_numpy()])).sum())),
            name=pl.lit(UNATTRIBUTED), layer_class=pl.lit(UNATTRIBUTED), kind=pl.lit(UNATTRIBUTED),
            depth=pl.lit(0, pl.Int32), first_ts=pl.lit(2**62), lid=pl.lit(nt, pl.UInt32))
        out = pl.concat([out, urow], how="diagonal_relaxed")
    del g, top, un  # (a row per kernel and op: freed once summed)
    zero = ["gpu_ns", "fwd_gpu_ns", "bwd_gpu_ns", "other_gpu_ns", "kernels", "self_gpu_ns", "self_kernels", "cpu_ns"]
    out = out.with_columns([pl.col(c).fill_null(0) for c in zero]).with_columns(
        flops=pl.when(pl.col("_hasf").fill_null(False)).then(pl.col("flops")),
        bytes=pl.when(pl.col("_hasf").fill_null(False)).then(pl.col("bytes")),
    ).drop("_hasf")
    secs = pl.col("gpu_ns").cast(pl.Float64) * 1e-9
    has = pl.col("gpu_ns") > 0
    out = out.with_columns(
        tflops=pl.when(has).then(pl.col("flops") / secs / 1e12),
        tbps=pl.when(has).then(pl.col("bytes") / secs / 1e12),
        intensity=pl.when(pl.col("bytes") > 0).then(pl.col("flops") / pl.col("bytes")),
        # achieved / peak = the roofline's ideal time over the measured GPU time
        peak_flops_pct=pl.when(has & (pl.col("_tf") > 0)).then(100 * pl.col("_tf") / secs),
        peak_bw_pct=pl.when(has & (pl.col("_tb") > 0)).then(100 * pl.col("_tb") / secs),
        peak_tflops=pl.when(pl.col("_tf") > 0).then(pl.col("flops") / pl.col("_tf") / 1e12),
    ).drop("_tf", "_tb")
    if sh is not None:
        out = out.join(sh.lazy(), on="lid", how="left")
    # findings inside each layer (a finding counts for its layer and the layers enclosing it)
    if findings is not None and findings.height and "layer" in findings.columns:
        code = "code" if "code" in findings.columns else None
        f = findings.select("layer", *([pl.col(code).cast(pl.String).alias("code")] if code else []))
        known = filled(f["layer"].is_in(members(tree["layer"])), False)
        fl = f.filter(known)
        fl = omit(fl, "layer").hstack([pl.Series("lid", [row[x] for x in fl["layer"].to_list()], pl.UInt32)])
        # per layer: the count and, per distinct code, its count, added up the tree
        codes = sorted(dropnull(fl["code"]).unique().to_list()) if code else []
        own = fl.group_by("lid").agg(pl.len().alias("findings"), *[(pl.col("code") == c).sum().alias(f"_c{k}")
                                                                   for k, c in enumerate(codes)])
        up = incl(own.with_columns(_n=pl.col("findings")), [c for c in own.columns if c != "lid"])
        fl = up.select(take(tree["layer"], up["lid"]), "findings")
        if code:
            has = np.stack([up[f"_c{k}"].to_numpy() > 0 for k in range(len(codes))], axis=1) if codes else \
                np.zeros((up.height, 0), bool)
            fl = fl.with_columns(finding_codes=pl.Series([[c for c, h in zip(codes, r, strict=True) if h] for r in has],
                                                         dtype=pl.List(pl.String)))
        fu = f.filter(~known).group_by("layer").agg(pl.len().alias("findings"),
                                                    *([pl.col("code").drop_nulls().unique().sort().alias("finding_codes")]
                                                      if code else []))
        fa = pl.concat([fl, fu], how="diagonal_relaxed").group_by("layer").agg(
            pl.col("findings").sum(), *([pl.col("finding_codes").list.explode().drop_nulls().unique().sort()] if code else []))
        out = out.join(fa.lazy(), on="layer", how="left").with_columns(pl.col("findings").fill_null(0))
    out = out.join(shape_signatures(trace).lazy(), on="layer", how="left")
    out = out.sort("first_ts", "depth", maintain_order=True).drop("first_ts").collect(**CHAIN)
    if depth is not None:  # (after the sort: its ties keep their order whatever the depth)
        out = out.filter((pl.col("depth") <= depth) | (pl.col("layer") == UNATTRIBUTED))
    return out, phase_ns


def repeats(table: pl.DataFrame, outlier: float = 0.2) -> pl.DataFrame:
    """Repeated layers of one kind (`Block_0..N`, `GPT2Block_0..11`; same class at the same place in
    the tree, computing on the same shapes: `shape_signatures`) compared by GPU time: [kind, layer_class,
    shapes, count, members, mean_ns, min_ns, max_ns, spread (max/min), cv, outliers (members more than
    `outlier` away from the median)]."""
    t = table.lazy().filter((pl.col("layer") != UNATTRIBUTED) & (pl.col("gpu_ns") > 0)).with_columns(
        [pl.lit(None, dt).alias(c) for c, dt in (("shape_sig", pl.UInt64), ("shapes", pl.String)) if c not in table.columns])
    med = pl.col("gpu_ns").median()
    return (t.group_by("kind", "shape_sig", maintain_order=True).agg(
        pl.col("layer_class").first(), pl.col("shapes").first(), pl.col("depth").first(), pl.len().alias("count"),
        pl.col("name").alias("members"), pl.col("gpu_ns").alias("gpu"),
        pl.col("gpu_ns").mean().alias("mean_ns"), pl.col("gpu_ns").min().alias("min_ns"),
        pl.col("gpu_ns").max().alias("max_ns"), (pl.col("gpu_ns").std() / pl.col("gpu_ns").mean()).alias("cv"),
        pl.col("name").filter(((pl.col("gpu_ns") - med).abs() / med) > outlier).alias("outliers"))
        .filter(pl.col("count") > 1)
        .with_columns(spread=pl.col("max_ns") / pl.col("min_ns"))
        .sort("depth", "mean_ns", descending=[False, True], maintain_order=True).collect(**CHAIN))

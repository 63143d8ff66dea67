/* traceview._replay: the replay simulator's kernel, a max-plus longest path over a DAG of events.
 *
 * longest(base, src, dst, off, out) -> int
 *     n events, m edges (int64 buffers; base/out of length n, src/dst/off of length m).
 *     out[v] = max(base[v], max over edges e with dst[e] == v of out[src[e]] + off[e]),
 *     with base[v] == INT64_MIN meaning "no floor". Events are visited in topological order
 *     (Kahn's algorithm over the edges' CSR); returns how many events were reached (n when the
 *     graph is acyclic). An event on a cycle keeps the values its visited predecessors gave it.
 *     The GIL is released while it runs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

/* Kahn's algorithm over the edges' CSR, with index type T; -1 when out of memory. */
#define KAHN(NAME, T)                                                                                   \
    static Py_ssize_t NAME(Py_ssize_t n, Py_ssize_t m, const int64_t *base, const int64_t *src,          \
                           const int64_t *dst, const int64_t *off, int64_t *out) {                        \
        T *start = calloc((size_t)n + 1, sizeof(T)), *adj = malloc((size_t)(m ? m : 1) * sizeof(T)),      \
          *indeg = calloc((size_t)n + 1, sizeof(T)), *queue = malloc((size_t)(n ? n : 1) * sizeof(T)),    \
          *fill = malloc((size_t)(n ? n : 1) * sizeof(T));                                                \
        Py_ssize_t reached = -1;                                                                        \
        if (!start || !adj || !indeg || !queue || !fill) goto out;                                      \
        Py_BEGIN_ALLOW_THREADS                                                                          \
        for (Py_ssize_t e = 0; e < m; e++) { start[src[e] + 1]++; indeg[dst[e]]++; }                    \
        for (Py_ssize_t v = 0; v < n; v++) start[v + 1] += start[v];                                    \
        for (Py_ssize_t v = 0; v < n; v++) fill[v] = start[v];                                          \
        for (Py_ssize_t e = 0; e < m; e++) adj[fill[src[e]]++] = (T)e;                                  \
        Py_ssize_t head = 0, tail = 0;                                                                  \
        for (Py_ssize_t v = 0; v < n; v++) {                                                            \
            out[v] = base[v];                                                                           \
            if (indeg[v] == 0) queue[tail++] = (T)v;                                                    \
        }                                                                                               \
        while (head < tail) {                                                                           \
            T v = queue[head++];                                                                        \
            int64_t val = out[v];                                                                       \
            for (T k = start[v]; k < start[v + 1]; k++) {                                               \
                T e = adj[k];                                                                           \
                int64_t w = dst[e];                                                                     \
                if (val != INT64_MIN && val + off[e] > out[w]) out[w] = val + off[e];                   \
                if (--indeg[w] == 0) queue[tail++] = (T)w;                                              \
            }                                                                                           \
        }                                                                                               \
        reached = tail;                                                                                 \
        Py_END_ALLOW_THREADS                                                                            \
    out:                                                                                                \
        free(start); free(adj); free(indeg); free(queue); free(fill);                                   \
        return reached;                                                                                 \
    }
KAHN(kahn32, int32_t)
KAHN(kahn64, int64_t)

static PyObject *longest(PyObject *self, PyObject *args) {
    Py_buffer b, s, d, o, r;
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*", &b, &s, &d, &o, &r)) return NULL;
    Py_ssize_t n = b.len / 8, m = s.len / 8;
    PyObject *res = NULL;
    if (r.len / 8 != n || d.len / 8 != m || o.len / 8 != m) {
        PyErr_SetString(PyExc_ValueError, "longest: buffer lengths differ");
        goto done;
    }
    const int64_t *base = b.buf, *src = s.buf, *dst = d.buf, *off = o.buf;
    int64_t *out = r.buf;
    for (Py_ssize_t e = 0; e < m; e++)
        if (src[e] < 0 || src[e] >= n || dst[e] < 0 || dst[e] >= n) {
            PyErr_SetString(PyExc_ValueError, "longest: edge endpoint out of range");
            goto done;
        }
    /* the CSR and the queue hold event and edge numbers: 4 bytes each while they fit (half the memory) */
    Py_ssize_t reached = (n < INT32_MAX && m < INT32_MAX) ? kahn32(n, m, base, src, dst, off, out)
                                                         : kahn64(n, m, base, src, dst, off, out);
    if (reached < 0) {
        PyErr_NoMemory();
        goto done;
    }
    res = PyLong_FromSsize_t(reached);
done:
    PyBuffer_Release(&b); PyBuffer_Release(&s); PyBuffer_Release(&d); PyBuffer_Release(&o); PyBuffer_Release(&r);
    return res;
}


/* pull(base, a_join, a_prev, a_overlap, keep_wait, a_wait, d_prev, d_launch, d_x,
 *      jwake, gap, own, a_wake, d_gap, d_lat, d_xgap, dur, out[, consts]) -> int
 *     The same longest path as `longest`, over the replay graph's own arrays instead of an edge list (no
 *     src/dst/offset arrays, no CSR: a third of the memory). Events as in replay.simulate: S(anchor j) = 2j,
 *     E(j) = 2j+1, S(activity k) = 2 n_a + 2k, E(k) = S(k) + 1; each event's value is pulled from its
 *     predecessors (at most three) once they are known, depth first with an explicit stack. a_overlap and
 *     keep_wait are uint8; the six index arrays (a_join, a_prev, a_wait, d_prev, d_launch, d_x) all int32 or all
 *     int64 (the module's INDEX_WIDTHS; the replay graph holds them as int32 while its events fit); each of the
 *     eight offset arrays (jwake .. dur) int32 or int64 on its own (OFFSET_WIDTHS; the graph holds an offset as
 *     int32 while every value fits), its width read from its length; base/out int64 (a_* of n_a, d_* of n_d,
 *     base/out of 2 (n_a + n_d)). `out` may be `base` itself: an event's base is read once, just before its
 *     time is written. Returns 0, or -1 when the graph has a cycle (the caller then runs `longest`, which says
 *     so). An optional 19th argument, a bit mask over the arguments (bit i: argument i, base and out excepted),
 *     marks those that hold one value for every row (the graph stores such an array as a stride-0 view): its
 *     buffer is that one element, of its width (CONSTANTS). */
typedef struct {
    Py_ssize_t na, nd;
    const void *ix[6];  /* a_join, a_prev, a_wait, d_prev, d_launch, d_x */
    Py_ssize_t ixs[6];  /* that index array's step: 1, or 0 when it holds one value for every row */
    int w4;             /* the index arrays are int32 */
    const uint8_t *a_overlap, *keep_wait;
    Py_ssize_t ovs, kws;  /* their steps */
    const void *off[8];  /* jwake, gap, own, a_wake, d_gap, d_lat, d_xgap, dur */
    int off4[8];         /* that offset array is int32 */
    Py_ssize_t offs[8];  /* its step */
} RGraph;

enum { I_AJOIN, I_APREV, I_AWAIT, I_DPREV, I_DLAUNCH, I_DX };
#define IX(g, k, i) ((g)->w4 ? (int64_t)((const int32_t *)(g)->ix[k])[(i) * (g)->ixs[k]] \
                             : ((const int64_t *)(g)->ix[k])[(i) * (g)->ixs[k]])
enum { O_JWAKE, O_GAP, O_OWN, O_AWAKE, O_DGAP, O_DLAT, O_DXGAP, O_DUR };
#define OF(g, k, i) ((g)->off4[k] ? (int64_t)((const int32_t *)(g)->off[k])[(i) * (g)->offs[k]] \
                                  : ((const int64_t *)(g)->off[k])[(i) * (g)->offs[k]])

static int preds(const RGraph *g, int64_t v, int64_t *u, int64_t *o) {
    int c = 0;
    const int64_t A = 2 * (int64_t)g->na;
    if (v < A) {
        int64_t j = v >> 1;
        if ((v & 1) == 0) {
            int64_t x = IX(g, I_AJOIN, j), p = IX(g, I_APREV, j);
            if (x >= 0) { u[c] = 2 * x + 1; o[c++] = OF(g, O_JWAKE, j); }
            if (p >= 0) { u[c] = 2 * p + 1 - g->a_overlap[j * g->ovs]; o[c++] = OF(g, O_GAP, j); }
        } else {
            u[c] = 2 * j; o[c++] = OF(g, O_OWN, j);
            int64_t w = g->keep_wait[j * g->kws] ? IX(g, I_AWAIT, j) : -1;
            if (w >= 0) { u[c] = A + 2 * w + 1; o[c++] = OF(g, O_AWAKE, j); }
        }
    } else {
        int64_t k = (v - A) >> 1;
        if (((v - A) & 1) == 0) {
            int64_t p = IX(g, I_DPREV, k), l = IX(g, I_DLAUNCH, k), x = IX(g, I_DX, k);
            if (p >= 0) { u[c] = A + 2 * p + 1; o[c++] = OF(g, O_DGAP, k); }
            if (l >= 0) { u[c] = 2 * l; o[c++] = OF(g, O_DLAT, k); }
            if (x >= 0) { u[c] = A + 2 * x + 1; o[c++] = OF(g, O_DXGAP, k); }
        } else {
            u[c] = v - 1; o[c++] = OF(g, O_DUR, k);
        }
    }
    return c;
}

static PyObject *pull(PyObject *self, PyObject *args) {
    Py_buffer b[18];
    int got = 0;
    PyObject *res = NULL;
    PyObject *objs[18];
    unsigned long long consts = 0;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOOOOOOO|K", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5],
                          &objs[6], &objs[7], &objs[8], &objs[9], &objs[10], &objs[11], &objs[12], &objs[13],
                          &objs[14], &objs[15], &objs[16], &objs[17], &consts))
        return NULL;
    for (; got < 18; got++)
        if (PyObject_GetBuffer(objs[got], &b[got], got == 17 ? PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS : PyBUF_C_CONTIGUOUS) < 0)
            goto done;
#define ONE(i) (((consts >> (i)) & 1) != 0)  /* argument i holds one value, every row's (CONSTANTS) */
    if (ONE(0) || ONE(17)) { PyErr_SetString(PyExc_ValueError, "pull: base and out hold every event"); goto done; }
    /* n events; na from a_overlap (a byte per anchor, or keep_wait's); the index width from the index arrays' bytes */
    Py_ssize_t n = b[0].len / 8, na = ONE(3) ? (ONE(4) ? -1 : b[4].len) : b[3].len, nd = n / 2 - na;
    if (na < 0) { PyErr_SetString(PyExc_ValueError, "pull: a_overlap or keep_wait must hold every anchor"); goto done; }
    if (n % 2 || nd < 0) { PyErr_SetString(PyExc_ValueError, "pull: event count differs"); goto done; }
    Py_ssize_t w = ONE(2) ? b[2].len : na ? b[2].len / na : ONE(6) ? b[6].len : nd ? b[6].len / nd : 8;
    if (w != 4 && w != 8) { PyErr_SetString(PyExc_ValueError, "pull: index arrays are neither int32 nor int64"); goto done; }
    /* sizes: base/out n; a_* na (a_overlap, keep_wait: bytes; indices w); d_* nd; offsets by their side, 4 or 8
     * bytes each (an empty side: either); an argument of one value: one element of its width */
    Py_ssize_t want[18] = {n * 8, na * w, na * w, na, na, na * w, nd * w, nd * w, nd * w,
                           na * 8, na * 8, na * 8, na * 8, nd * 8, nd * 8, nd * 8, nd * 8, n * 8};
    Py_ssize_t rows[18] = {n, na, na, na, na, na, nd, nd, nd, na, na, na, na, nd, nd, nd, nd, n};
    int off4[8];
    for (int i = 0; i < 18; i++) {
        int is_off = i >= 9 && i < 17;
        if (ONE(i)) {
            Py_ssize_t size = is_off ? (b[i].len == 4 ? 4 : 8) : (i == 3 || i == 4) ? 1 : w;
            if (b[i].len != size || rows[i] == 0) {
                PyErr_Format(PyExc_ValueError, "pull: buffer %d is not one value", i); goto done;
            }
            if (is_off) off4[i - 9] = size == 4;
            continue;
        }
        if (is_off && b[i].len * 2 == want[i]) { off4[i - 9] = 1; continue; }
        if (is_off) off4[i - 9] = 0;
        if (b[i].len != want[i]) { PyErr_Format(PyExc_ValueError, "pull: buffer %d has the wrong length", i); goto done; }
    }
#define STEP(i) (ONE(i) ? 0 : 1)
    RGraph g = {na, nd, {b[1].buf, b[2].buf, b[5].buf, b[6].buf, b[7].buf, b[8].buf},
                {STEP(1), STEP(2), STEP(5), STEP(6), STEP(7), STEP(8)}, w == 4, b[3].buf, b[4].buf, STEP(3), STEP(4),
                {b[9].buf, b[10].buf, b[11].buf, b[12].buf, b[13].buf, b[14].buf, b[15].buf, b[16].buf},
                {off4[0], off4[1], off4[2], off4[3], off4[4], off4[5], off4[6], off4[7]},
                {STEP(9), STEP(10), STEP(11), STEP(12), STEP(13), STEP(14), STEP(15), STEP(16)}};
#undef STEP
#undef ONE
    for (Py_ssize_t j = 0; j < na; j++)  /* indices in range, once, before any is followed */
        if (IX(&g, I_AJOIN, j) >= na || IX(&g, I_APREV, j) >= na || (g.keep_wait[j * g.kws] && IX(&g, I_AWAIT, j) >= nd)) {
            PyErr_SetString(PyExc_ValueError, "pull: anchor index out of range"); goto done;
        }
    for (Py_ssize_t k = 0; k < nd; k++)
        if (IX(&g, I_DPREV, k) >= nd || IX(&g, I_DLAUNCH, k) >= na || IX(&g, I_DX, k) >= nd) {
            PyErr_SetString(PyExc_ValueError, "pull: activity index out of range"); goto done;
        }
    const int64_t *base = b[0].buf;
    int64_t *out = b[17].buf;
    /* the stack holds event numbers: 4 bytes each while they fit (half its memory) */
    int s4 = n < INT32_MAX;
    uint8_t *state = calloc((size_t)(n ? n : 1), 1);
    void *stack = malloc((size_t)(n ? n : 1) * (s4 ? 4 : 8));
    if (!state || !stack) { free(state); free(stack); PyErr_NoMemory(); goto done; }
#define SGET(i) (s4 ? (int64_t)((int32_t *)stack)[i] : ((int64_t *)stack)[i])
#define SPUSH(x) do { if (s4) ((int32_t *)stack)[top++] = (int32_t)(x); else ((int64_t *)stack)[top++] = (x); } while (0)
    int cycle = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t root = 0; root < n && !cycle; root++) {
        if (state[root]) continue;
        Py_ssize_t top = 0;
        SPUSH(root);
        state[root] = 1;
        while (top > 0) {
            int64_t v = SGET(top - 1), u[3], o[3];
            int c = preds(&g, v, u, o), pending = 0;
            for (int i = 0; i < c; i++) {
                if (state[u[i]] == 0) { state[u[i]] = 1; SPUSH(u[i]); pending = 1; break; }
                if (state[u[i]] == 1) { cycle = 1; break; }
            }
            if (cycle) break;
            if (pending) continue;
            int64_t val = base[v];
            for (int i = 0; i < c; i++) {
                int64_t p = out[u[i]];
                if (p != INT64_MIN && p + o[i] > val) val = p + o[i];
            }
            out[v] = val;
            state[v] = 2;
            top--;
        }
    }
    Py_END_ALLOW_THREADS
    free(state); free(stack);
    res = PyLong_FromLong(cycle ? -1 : 0);
done:
    for (int i = 0; i < got; i++) PyBuffer_Release(&b[i]);
    return res;
}

static PyMethodDef methods[] = {
    {"longest", longest, METH_VARARGS, "max-plus longest path over a DAG of events (see the module comment)"},
    {"pull", pull, METH_VARARGS, "the same longest path over the replay graph's own arrays (see pull's comment)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_replay", "replay simulator kernel", -1, methods};

PyMODINIT_FUNC PyInit__replay(void) {
    PyObject *m = PyModule_Create(&module);
    /* the index widths `pull` reads (a build before int32 indices lacks it: the caller then passes int64) */
    if (m && PyModule_AddObject(m, "INDEX_WIDTHS", Py_BuildValue("(ii)", 4, 8)) < 0) { Py_DECREF(m); return NULL; }
    /* the offset widths `pull` reads, array by array (a build before int32 offsets lacks it: int64 then) */
    if (m && PyModule_AddObject(m, "OFFSET_WIDTHS", Py_BuildValue("(ii)", 4, 8)) < 0) { Py_DECREF(m); return NULL; }
    /* `pull` reads an argument of one value for every row (bit i of its optional 19th argument: argument i; a
     * build before it lacks this, and the caller then passes every row) */
    if (m && PyModule_AddIntConstant(m, "CONSTANTS", 1) < 0) { Py_DECREF(m); return NULL; }
    return m;
}

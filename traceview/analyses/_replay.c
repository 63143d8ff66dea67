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

static PyMethodDef methods[] = {
    {"longest", longest, METH_VARARGS, "max-plus longest path over a DAG of events (see the module comment)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_replay", "replay simulator kernel", -1, methods};

PyMODINIT_FUNC PyInit__replay(void) { return PyModule_Create(&module); }

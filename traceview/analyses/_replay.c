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
    int64_t *start = calloc((size_t)n + 1, 8), *adj = malloc((size_t)(m ? m : 1) * 8),
            *indeg = calloc((size_t)n + 1, 8), *queue = malloc((size_t)(n ? n : 1) * 8),
            *fill = malloc((size_t)(n ? n : 1) * 8);
    if (!start || !adj || !indeg || !queue || !fill) {
        free(start); free(adj); free(indeg); free(queue); free(fill);
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t reached = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t e = 0; e < m; e++) { start[src[e] + 1]++; indeg[dst[e]]++; }
    for (Py_ssize_t v = 0; v < n; v++) start[v + 1] += start[v];
    for (Py_ssize_t v = 0; v < n; v++) fill[v] = start[v];
    for (Py_ssize_t e = 0; e < m; e++) adj[fill[src[e]]++] = e;
    Py_ssize_t head = 0, tail = 0;
    for (Py_ssize_t v = 0; v < n; v++) {
        out[v] = base[v];
        if (indeg[v] == 0) queue[tail++] = v;
    }
    while (head < tail) {
        int64_t v = queue[head++];
        int64_t val = out[v];
        for (int64_t k = start[v]; k < start[v + 1]; k++) {
            int64_t e = adj[k], w = dst[e];
            if (val != INT64_MIN && val + off[e] > out[w]) out[w] = val + off[e];
            if (--indeg[w] == 0) queue[tail++] = w;
        }
    }
    reached = tail;
    Py_END_ALLOW_THREADS
    free(start); free(adj); free(indeg); free(queue); free(fill);
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

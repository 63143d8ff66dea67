/* traceview.ingest._scan: one-pass columnar scanner for Kineto chrome-trace JSON.
 *
 * Scanner(keep=None, structs=(), tables=(), threads=1, slice=4 MiB): .feed(chunk) ... .finish() -> dict | None
 *     Walks the top-level object once, fed in chunks of any size (a member or event cut by the
 *     end of a chunk is carried over and parsed whole with the next one), with the GIL released
 *     while it parses. The `traceEvents` array is turned into columns (dictionary-encoded
 *     ph/cat/name, int64 pid/tid/id, float64 ts/dur, uint32 nargs: the args object's length). The
 *     `args` object of an event is parsed as it is scanned into the args tables that
 *     `keep(ph, cat, name)` names (asked once per distinct triple; it answers a bit mask of tables):
 *     each table reads some fields of one struct (`structs`: the JSON key, the JSON types msgspec
 *     accepts and whether it is a [x, y, z] triple, of each field) into columns (see MODE_*), handed
 *     over as Arrow arrays. An object whose values the scanner cannot vouch for (see parse_row) gets
 *     placeholders, and its text is kept ("odd") for msgspec to decode. Every other top-level member's
 *     `"key": value` text is returned, ','-joined, for the caller to decode. The whole document is
 *     never held. With threads > 1 the events are parsed in batches of `slice` bytes a thread, each cut into
 *     byte ranges parsed by worker threads and joined in order (see "workers" below): the same result.
 *
 * Contract: finish() returns None whenever the input is anything but plain, valid JSON of the
 * shape the msgspec decoder (traceview/ingest/decode.py) accepts without repairs; the caller then falls
 * back to msgspec. The scanner is at least as strict as msgspec: accepting less is always safe.
 * Every read is bounds-checked against the buffer end.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <pthread.h>
#ifdef __linux__
#include <sys/mman.h>
#endif
#ifdef __GLIBC__
#include <locale.h>
/* glibc's strtod is correctly rounded, as float() is; strtod_l in the "C" locale needs no GIL */
static locale_t c_locale;
#endif

#define MAX_DEPTH 64

typedef const unsigned char *P;

/* ------------------------------------------------------------------ lexing helpers */

static const unsigned char WS[256] = {[' '] = 1, ['\n'] = 1, ['\r'] = 1, ['\t'] = 1};

static inline P skip_ws(P p, P end) {
    while (p < end && WS[*p]) {
        p++;
        /* indentation: 8 spaces at a time */
        while (end - p >= 8) {
            uint64_t v;
            memcpy(&v, p, 8);
            if (v != 0x2020202020202020ULL) break;
            p += 8;
        }
    }
    return p;
}

static inline int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int read_hex4(P p, P end, unsigned *out) {
    if (end - p < 4) return 0;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0) return 0;
        v = (v << 4) | (unsigned)h;
    }
    *out = v;
    return 1;
}

/* Validate one UTF-8 sequence starting at p (p[0] >= 0x80); return its length or 0. */
static int utf8_seq(P p, P end) {
    unsigned char c = p[0];
    Py_ssize_t left = end - p;
    if (c >= 0xC2 && c <= 0xDF) {
        if (left < 2 || (p[1] & 0xC0) != 0x80) return 0;
        return 2;
    }
    if (c >= 0xE0 && c <= 0xEF) {
        if (left < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && p[1] < 0xA0) return 0;  /* overlong */
        if (c == 0xED && p[1] >= 0xA0) return 0; /* surrogates */
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (left < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return 0;
        if (c == 0xF0 && p[1] < 0x90) return 0;
        if (c == 0xF4 && p[1] >= 0x90) return 0;
        return 4;
    }
    return 0;
}

/* p points at the opening quote. Returns the pointer just past the closing quote, or NULL.
 * *esc is set when the string holds a backslash escape. */
static P scan_string(P p, P end, int *esc) {
    p++;
    *esc = 0;
    for (;;) {
        /* 8 bytes at a time while none is '"', '\\', a control byte or non-ASCII */
        while (end - p >= 8) {
            uint64_t v;
            memcpy(&v, p, 8);
            const uint64_t ones = 0x0101010101010101ULL, high = 0x8080808080808080ULL;
            uint64_t q = v ^ (ones * '"'), b = v ^ (ones * '\\');
            uint64_t hit = (((q - ones) & ~q) | ((b - ones) & ~b) | (v - ones * 0x20) | v) & high;
            if (hit) { /* the lowest flagged byte is the first special one (a borrow only flags bytes above it) */
                p += __builtin_ctzll(hit) >> 3;
                break;
            }
            p += 8;
        }
        while (p < end && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\') p++;
        if (p >= end) return NULL;
        unsigned char c = *p;
        if (c == '"') return p + 1;
        if (c < 0x20) return NULL;
        if (c == '\\') {
            *esc = 1;
            if (p + 1 >= end) return NULL;
            unsigned char e = p[1];
            if (e == 'u') {
                unsigned u;
                if (!read_hex4(p + 2, end, &u)) return NULL;
                p += 6;
                if (u >= 0xDC00 && u <= 0xDFFF) return NULL; /* lone low surrogate */
                if (u >= 0xD800 && u <= 0xDBFF) {
                    unsigned lo;
                    if (end - p < 2 || p[0] != '\\' || p[1] != 'u' || !read_hex4(p + 2, end, &lo)) return NULL;
                    if (lo < 0xDC00 || lo > 0xDFFF) return NULL;
                    p += 6;
                }
            } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' ||
                       e == 't') {
                p += 2;
            } else {
                return NULL;
            }
            continue;
        }
        /* c >= 0x80 */
        int n = utf8_seq(p, end);
        if (!n) return NULL;
        p += n;
    }
}

/* Python str of the string body [s, e) (between the quotes; already validated). */
static PyObject *make_str(P s, P e, int esc) {
    if (!esc) return PyUnicode_DecodeUTF8((const char *)s, e - s, "strict");
    char stackbuf[256];
    char *buf = (e - s) <= (Py_ssize_t)sizeof(stackbuf) ? stackbuf : PyMem_Malloc(e - s);
    if (!buf) return PyErr_NoMemory();
    char *o = buf;
    P p = s;
    while (p < e) {
        if (*p != '\\') { *o++ = (char)*p++; continue; }
        unsigned char c = p[1];
        switch (c) {
        case '"': *o++ = '"'; p += 2; break;
        case '\\': *o++ = '\\'; p += 2; break;
        case '/': *o++ = '/'; p += 2; break;
        case 'b': *o++ = '\b'; p += 2; break;
        case 'f': *o++ = '\f'; p += 2; break;
        case 'n': *o++ = '\n'; p += 2; break;
        case 'r': *o++ = '\r'; p += 2; break;
        case 't': *o++ = '\t'; p += 2; break;
        default: { /* 'u', validated by scan_string */
            unsigned u = 0, lo = 0;
            read_hex4(p + 2, e, &u);
            p += 6;
            if (u >= 0xD800 && u <= 0xDBFF) {
                read_hex4(p + 2, e, &lo);
                p += 6;
                u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            }
            /* UTF-8 output is never longer than the escape text it replaces */
            if (u < 0x80) *o++ = (char)u;
            else if (u < 0x800) { *o++ = (char)(0xC0 | (u >> 6)); *o++ = (char)(0x80 | (u & 0x3F)); }
            else if (u < 0x10000) {
                *o++ = (char)(0xE0 | (u >> 12)); *o++ = (char)(0x80 | ((u >> 6) & 0x3F));
                *o++ = (char)(0x80 | (u & 0x3F));
            } else {
                *o++ = (char)(0xF0 | (u >> 18)); *o++ = (char)(0x80 | ((u >> 12) & 0x3F));
                *o++ = (char)(0x80 | ((u >> 6) & 0x3F)); *o++ = (char)(0x80 | (u & 0x3F));
            }
        }
        }
    }
    PyObject *r = PyUnicode_DecodeUTF8(buf, o - buf, "strict");
    if (buf != stackbuf) PyMem_Free(buf);
    return r;
}

/* JSON number grammar. Returns the end pointer or NULL; *is_int: no fraction, no exponent. */
static P scan_number(P p, P end, int *is_int) {
    *is_int = 1;
    if (p < end && *p == '-') p++;
    if (p >= end) return NULL;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < end && *p >= '0' && *p <= '9') p++;
    } else {
        return NULL;
    }
    if (p < end && *p == '.') {
        *is_int = 0;
        p++;
        if (p >= end || *p < '0' || *p > '9') return NULL;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        *is_int = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || *p < '0' || *p > '9') return NULL;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    return p;
}

/* int64 of a validated integer literal [s, e); 0 on overflow */
static int parse_int64(P s, P e, int64_t *out) {
    int neg = 0;
    if (*s == '-') { neg = 1; s++; }
    uint64_t v = 0;
    for (; s < e; s++) {
        unsigned d = *s - '0';
        if (v > (UINT64_MAX - d) / 10) return 0;
        v = v * 10 + d;
    }
    if (neg) {
        if (v > (uint64_t)INT64_MAX + 1) return 0;
        *out = (int64_t)(0 - v);
    } else {
        if (v > (uint64_t)INT64_MAX) return 0;
        *out = (int64_t)v;
    }
    return 1;
}

static const double POW10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                               1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* double of a validated number literal [s, e) by Clinger's fast path: 1 done, -1 needs parse_double
 * (CPython's strtod where glibc's is not at hand: then the GIL must be held) */
static int parse_double_fast(P s, P e, double *out) {
    P p = s;
    int neg = 0;
    if (*p == '-') { neg = 1; p++; }
    uint64_t m = 0;
    int digits = 0, frac = 0;
    for (; p < e && *p >= '0' && *p <= '9'; p++) {
        if (++digits > 19) return -1;
        m = m * 10 + (*p - '0');
    }
    if (p < e && *p == '.') {
        for (p++; p < e && *p >= '0' && *p <= '9'; p++) {
            if (++digits > 19) return -1;
            m = m * 10 + (*p - '0');
            frac++;
        }
    }
    if (p != e || m > (1ULL << 53) || frac > 22) return -1;
    double d = (double)m;
    if (frac) d /= POW10[frac];
    *out = neg ? -d : d;
    return 1;
}

/* double of a validated number literal [s, e), correctly rounded like float(); 0 if not finite */
static int parse_double(P s, P e, double *out) {
    /* Clinger's fast path: exact mantissa < 2^53 and a power of ten <= 1e22 give one rounding */
    P p = s;
    int neg = 0;
    if (*p == '-') { neg = 1; p++; }
    uint64_t m = 0;
    int digits = 0, frac = 0, ok = 1;
    for (; p < e && *p >= '0' && *p <= '9'; p++) {
        if (++digits > 19) { ok = 0; break; }
        m = m * 10 + (*p - '0');
    }
    if (ok && p < e && *p == '.') {
        for (p++; p < e && *p >= '0' && *p <= '9'; p++) {
            if (++digits > 19) { ok = 0; break; }
            m = m * 10 + (*p - '0');
            frac++;
        }
    }
    if (ok && p == e && m <= (1ULL << 53) && frac <= 22) {
        double d = (double)m;
        if (frac) d /= POW10[frac];
        *out = neg ? -d : d;
        return 1;
    }
    /* general case: a correctly rounded strtod (glibc's in the "C" locale, else CPython's: GIL held) */
    char stackbuf[128];
    Py_ssize_t n = e - s;
#ifdef __GLIBC__
    char *buf = n < (Py_ssize_t)sizeof(stackbuf) ? stackbuf : malloc(n + 1);
#else
    char *buf = n < (Py_ssize_t)sizeof(stackbuf) ? stackbuf : PyMem_Malloc(n + 1);
#endif
    if (!buf) return 0;
    memcpy(buf, s, n);
    buf[n] = 0;
    char *endp = NULL;
#ifdef __GLIBC__
    double d = strtod_l(buf, &endp, c_locale);
    int good = endp == buf + n && isfinite(d);
    if (buf != stackbuf) free(buf);
#else
    double d = PyOS_string_to_double(buf, &endp, NULL);
    int good = !(d == -1.0 && PyErr_Occurred()) && endp == buf + n && isfinite(d);
    if (buf != stackbuf) PyMem_Free(buf);
    if (PyErr_Occurred()) PyErr_Clear();
#endif
    if (!good) return 0;
    *out = d;
    return 1;
}

static P skip_value(P p, P end, int depth);

static P skip_container(P p, P end, int depth) {
    if (depth > MAX_DEPTH) return NULL;
    int obj = *p == '{';
    unsigned char close = obj ? '}' : ']';
    p = skip_ws(p + 1, end);
    if (p < end && *p == close) return p + 1;
    for (;;) {
        if (obj) {
            int esc;
            if (p >= end || *p != '"') return NULL;
            p = scan_string(p, end, &esc);
            if (!p) return NULL;
            p = skip_ws(p, end);
            if (p >= end || *p != ':') return NULL;
            p = skip_ws(p + 1, end);
        }
        p = skip_value(p, end, depth + 1);
        if (!p) return NULL;
        p = skip_ws(p, end);
        if (p >= end) return NULL;
        if (*p == ',') { p = skip_ws(p + 1, end); continue; }
        if (*p == close) return p + 1;
        return NULL;
    }
}

static P skip_literal(P p, P end, const char *lit, size_t n) {
    if ((size_t)(end - p) < n || memcmp(p, lit, n) != 0) return NULL;
    return p + n;
}

/* p at the first byte of a value (no leading whitespace). */
static P skip_value(P p, P end, int depth) {
    if (p >= end) return NULL;
    int x;
    switch (*p) {
    case '"': return scan_string(p, end, &x);
    case '{': case '[': return skip_container(p, end, depth);
    case 't': return skip_literal(p, end, "true", 4);
    case 'f': return skip_literal(p, end, "false", 5);
    case 'n': return skip_literal(p, end, "null", 4);
    default: return scan_number(p, end, &x);
    }
}
/* ------------------------------------------------------------------ growable buffers */

/* Memory of the buffers: not PyMem (the scanner grows them with the GIL released). A block of 1 MiB or more
 * is a mapping of its own that grows by mremap: no copy, no heap block left behind at each doubling (which
 * the heap keeps as resident memory), and freed back to the system at once. A header before the data says
 * which. */
#define MEM_HDR 64
#define MEM_MMAP (1 << 20)
typedef struct { size_t total; int mapped; } MemHdr;

/* data (NULL: new) resized to hold `need` bytes; NULL when out of memory (data unchanged) */
static char *mem_resize(char *data, size_t need) {
    MemHdr *h = data ? (MemHdr *)(data - MEM_HDR) : NULL;
    size_t total = need + MEM_HDR;
#ifdef __linux__
    if (total >= MEM_MMAP || (h && h->mapped)) {
        void *m;
        total = (total + 4095) & ~(size_t)4095;
        if (h && h->mapped) {
            m = mremap(h, h->total, total, MREMAP_MAYMOVE);
        } else {
            m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (m != MAP_FAILED && h) {
                size_t old = h->total - MEM_HDR;
                memcpy((char *)m + MEM_HDR, data, old < need ? old : need);
                free(h);
            }
        }
        if (m == MAP_FAILED) return NULL;
        h = m;
        h->total = total;
        h->mapped = 1;
        return (char *)h + MEM_HDR;
    }
#endif
    h = realloc(h, total);
    if (!h) return NULL;
    h->total = total;
    h->mapped = 0;
    return (char *)h + MEM_HDR;
}

static void mem_free(void *data) {
    if (!data) return;
    MemHdr *h = (MemHdr *)((char *)data - MEM_HDR);
#ifdef __linux__
    if (h->mapped) { munmap(h, h->total); return; }
#endif
    free(h);
}

typedef struct { char *data; Py_ssize_t len, cap; } Buf;

static int buf_reserve(Buf *b, Py_ssize_t extra) {
    if (b->len + extra <= b->cap) return 1;
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) cap *= 2;
    char *d = mem_resize(b->data, cap);
    if (!d) return 0;
    b->data = d;
    b->cap = cap;
    return 1;
}

static inline int buf_put(Buf *b, const void *src, Py_ssize_t n) {
    if (!buf_reserve(b, n)) return 0;
    memcpy(b->data + b->len, src, n);
    b->len += n;
    return 1;
}

static PyObject *buf_bytes(Buf *b) { return PyBytes_FromStringAndSize(b->data ? b->data : "", b->len); }
static void buf_free(Buf *b) { mem_free(b->data); b->data = NULL; b->len = b->cap = 0; }

/* Block: a read-only buffer object that owns a Buf's memory, so that columns reach numpy without a copy */
typedef struct { PyObject_HEAD char *data; Py_ssize_t len; } Block;

static void block_dealloc(Block *b) {
    mem_free(b->data);
    Py_TYPE(b)->tp_free((PyObject *)b);
}

static int block_getbuffer(Block *b, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)b, b->data ? b->data : (char *)"", b->len, 1, flags);
}

static PyBufferProcs block_as_buffer = {(getbufferproc)block_getbuffer, NULL};

static PyTypeObject BlockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "traceview.ingest._scan.Block",
    .tp_basicsize = sizeof(Block),
    .tp_dealloc = (destructor)block_dealloc,
    .tp_as_buffer = &block_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "read-only bytes owned by the scanner",
};

/* hand the Buf's memory over to a new Block (trimmed to its length); the Buf is left empty */
static PyObject *buf_block(Buf *b) {
    Block *o = PyObject_New(Block, &BlockType);
    if (!o) return NULL;
    if (b->data && b->len < b->cap) {
        char *d = mem_resize(b->data, b->len ? b->len : 1);
        if (d) b->data = d;
    }
    o->data = b->data;
    o->len = b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    return (PyObject *)o;
}

/* ------------------------------------------------------------------ Arrow columns */

/* The Arrow C data interface (arrow.apache.org/docs/format/CDataInterface.html): polars imports a column
 * through `__arrow_c_array__` and takes over its buffers (no copy for fixed-width types) */
struct ArrowSchema {
    const char *format, *name, *metadata;
    int64_t flags, n_children;
    struct ArrowSchema **children, *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};
struct ArrowArray {
    int64_t length, null_count, offset, n_buffers, n_children;
    const void **buffers;
    struct ArrowArray **children, *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};
#define ARROW_FLAG_NULLABLE 2

/* one column, exported at most once: "l" int64 / "I" uint32 (validity, values), "Z" large binary
 * (validity, int64 offsets, data); a NULL validity: no nulls */
typedef struct {
    PyObject_HEAD const char *format;
    int64_t length, null_count;
    int nbuf;
    void *buf[3];
} ArrowCol;

static void acol_dealloc(ArrowCol *a) {
    for (int i = 0; i < a->nbuf; i++) mem_free(a->buf[i]);
    Py_TYPE(a)->tp_free((PyObject *)a);
}

static void schema_release(struct ArrowSchema *s) { s->release = NULL; }

static void array_release(struct ArrowArray *a) {
    void **bufs = a->private_data;
    for (int64_t i = 0; i < a->n_buffers; i++) mem_free(bufs[i]);
    free(bufs);
    a->release = NULL;
}

static void schema_capsule_free(PyObject *cap) {
    struct ArrowSchema *s = PyCapsule_GetPointer(cap, "arrow_schema");
    if (!s) { PyErr_Clear(); return; }
    if (s->release) s->release(s);
    free(s);
}

static void array_capsule_free(PyObject *cap) {
    struct ArrowArray *a = PyCapsule_GetPointer(cap, "arrow_array");
    if (!a) { PyErr_Clear(); return; }
    if (a->release) a->release(a);
    free(a);
}

static PyObject *acol_export(ArrowCol *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"requested_schema", NULL};
    PyObject *req = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O", kwlist, &req)) return NULL;
    if (!self->format) { PyErr_SetString(PyExc_ValueError, "column already exported"); return NULL; }
    struct ArrowSchema *s = calloc(1, sizeof(*s));
    struct ArrowArray *a = calloc(1, sizeof(*a));
    void **bufs = malloc(3 * sizeof(void *));
    if (!s || !a || !bufs) { free(s); free(a); free(bufs); return PyErr_NoMemory(); }
    s->format = self->format;
    s->name = "";
    s->flags = ARROW_FLAG_NULLABLE;
    s->release = schema_release;
    for (int i = 0; i < self->nbuf; i++) { bufs[i] = self->buf[i]; self->buf[i] = NULL; }
    a->length = self->length;
    a->null_count = self->null_count;
    a->n_buffers = self->nbuf;
    a->buffers = (const void **)bufs;
    a->private_data = bufs;
    a->release = array_release;
    self->format = NULL;
    self->nbuf = 0;
    PyObject *cs = PyCapsule_New(s, "arrow_schema", schema_capsule_free);
    if (!cs) { schema_release(s); free(s); array_release(a); free(a); return NULL; }
    PyObject *ca = PyCapsule_New(a, "arrow_array", array_capsule_free);
    if (!ca) { Py_DECREF(cs); array_release(a); free(a); return NULL; }
    PyObject *t = PyTuple_Pack(2, cs, ca);
    Py_DECREF(cs);
    Py_DECREF(ca);
    return t;
}

static PyObject *acol_len(ArrowCol *self, void *closure) { return PyLong_FromLongLong(self->length); }

static PyMethodDef acol_methods[] = {
    {"__arrow_c_array__", (PyCFunction)(void (*)(void))acol_export, METH_VARARGS | METH_KEYWORDS,
     "the column as Arrow C data interface capsules (once: its buffers go with them)"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef acol_getset[] = {{"length", (getter)acol_len, NULL, "rows", NULL}, {NULL}};

static PyTypeObject ArrowColType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "traceview.ingest._scan.ArrowCol",
    .tp_basicsize = sizeof(ArrowCol),
    .tp_dealloc = (destructor)acol_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "one scanned column, handed to polars through the Arrow PyCapsule interface",
    .tp_methods = acol_methods,
    .tp_getset = acol_getset,
};

/* a column from Bufs (taken over: left empty); a validity bitmap without nulls is dropped */
static PyObject *acol_new(const char *format, int64_t length, int64_t null_count, int nbuf, Buf **b) {
    ArrowCol *o = PyObject_New(ArrowCol, &ArrowColType);
    if (!o) return NULL;
    o->format = format;
    o->length = length;
    o->null_count = null_count;
    o->nbuf = nbuf;
    for (int i = 0; i < nbuf; i++) {
        o->buf[i] = NULL;
        if (!b[i] || (i == 0 && !null_count)) { if (b[i]) buf_free(b[i]); continue; }
        if (!b[i]->data && !buf_reserve(b[i], 8)) { for (int j = 0; j < i; j++) mem_free(o->buf[j]); o->nbuf = 0; Py_DECREF(o); return PyErr_NoMemory(); }
        o->buf[i] = b[i]->data;
        b[i]->data = NULL;
        b[i]->len = b[i]->cap = 0;
    }
    return (PyObject *)o;
}

/* ------------------------------------------------------------------ args tables */

/* JSON type bits of a struct field (what msgspec accepts there) */
enum { T_NULL = 1, T_INT = 2, T_FLOAT = 4, T_STR = 8, T_ARR_INT = 16, T_ARR = 32, T_OBJ = 64, T_BOOL = 128 };
/* how a table column holds a field: MODE_INT int64 column; MODE_RAW the value's JSON text (binary, "" when
 * absent); MODE_DIM3 three int64 columns; MODE_OBJ a number column (int64, or float64 for a field that
 * takes floats: what msgspec makes of an int or float there) plus the JSON text of the other values (one
 * array, for msgspec to decode) and their rows */
enum { MODE_INT = 1, MODE_RAW = 2, MODE_DIM3 = 3, MODE_OBJ = 4 };
#define MAX_FIELDS 64
#define MAX_TABLES 32

typedef struct { char *key; Py_ssize_t klen; int types, dim3, num; } SField; /* num: 0, 1 int64, 2 float64 */
typedef struct { int head[64], next[MAX_FIELDS]; } Lookup;
typedef struct { SField *f; int nf; Lookup lk; } Struct;

/* a field's value in the args object at hand */
typedef struct { unsigned char type, ok[3], slow; P s, e; int64_t iv[3]; double dv; } SVal; /* valid: `seen` */

/* Columns are written only where a row has a value: the rows between are filled in (nulls, "") when the
 * next value comes, or at the end; a column without any value is no buffer at all. */
typedef struct {
    int field, mode;
    Buf v[3], m[3];   /* MODE_INT / MODE_DIM3 / MODE_OBJ's numbers: int64 or float64 values, validity bitmaps */
    int64_t nvalid[3];
    Buf off, data;    /* MODE_RAW: int64 offsets, text; MODE_OBJ: int64 rows of the text's values, text */
    int64_t nonnull;  /* MODE_RAW / MODE_OBJ: rows with the field */
} TCol;

typedef struct {
    int st, ncols;
    uint64_t fmask;              /* the struct fields the table reads */
    signed char colof[MAX_FIELDS]; /* field -> column */
    TCol *cols;
    Buf rows; /* uint32 event index of each row */
    Buf bad;  /* int64 row positions the scanner does not vouch for (msgspec decodes those) */
    int64_t n;
} Table;

static inline unsigned key_bucket(const unsigned char *k, Py_ssize_t n) {
    return (unsigned)(n * 7 + k[0] * 3 + k[n - 1]) & 63;
}

static void lookup_init(Struct *st) {
    for (int i = 0; i < 64; i++) st->lk.head[i] = -1;
    for (int i = st->nf - 1; i >= 0; i--) {
        unsigned b = key_bucket((const unsigned char *)st->f[i].key, st->f[i].klen);
        st->lk.next[i] = st->lk.head[b];
        st->lk.head[b] = i;
    }
}

static inline int find_field(const Struct *st, P ks, Py_ssize_t kl) {
    if (kl <= 0) return -1;
    for (int i = st->lk.head[key_bucket(ks, kl)]; i >= 0; i = st->lk.next[i])
        if (st->f[i].klen == kl && memcmp(st->f[i].key, ks, kl) == 0) return i;
    return -1;
}

/* JSON type of the value at p (its end in *after, NULL if invalid); an array is T_ARR_INT | T_ARR when
 * asked for and it holds int64 literals only */
static int value_type(P p, P end, P *after, int depth, int want_arr_int) {
    int is_int;
    switch (*p) {
    case '"': { int esc; *after = scan_string(p, end, &esc); return T_STR; }
    case '{': *after = skip_container(p, end, depth); return T_OBJ;
    case '[': {
        *after = skip_container(p, end, depth);
        if (!*after || !want_arr_int) return T_ARR;
        P q = skip_ws(p + 1, end);
        if (*q == ']') return T_ARR_INT | T_ARR;
        for (;;) {
            int64_t iv;
            P r = scan_number(q, end, &is_int);
            if (!r || !is_int || !parse_int64(q, r, &iv)) return T_ARR;
            q = skip_ws(r, end);
            if (*q == ']') return T_ARR_INT | T_ARR;
            if (*q != ',') return T_ARR;
            q = skip_ws(q + 1, end);
        }
    }
    case 't': *after = skip_literal(p, end, "true", 4); return T_BOOL;
    case 'f': *after = skip_literal(p, end, "false", 5); return T_BOOL;
    case 'n': *after = skip_literal(p, end, "null", 4); return T_NULL;
    default:
        *after = scan_number(p, end, &is_int);
        return is_int ? T_INT : T_FLOAT;
    }
}

#define BAD_IF(c) do { if (c) return 1; } while (0)

/* [x, y, z] of int | null (msgspec's array-like Dim3, trailing ones may be absent): 0 ok, 1 not */
static int parse_dim3(P p, P end, int64_t v[3], unsigned char m[3]) {
    v[0] = v[1] = v[2] = 0;
    m[0] = m[1] = m[2] = 0;
    p = skip_ws(p + 1, end);
    if (p < end && *p == ']') return 0;
    for (int i = 0;; i++) {
        BAD_IF(i >= 3 || p >= end);
        if (*p == 'n') {
            BAD_IF(!skip_literal(p, end, "null", 4));
            p += 4;
        } else {
            int is_int;
            P q = scan_number(p, end, &is_int);
            BAD_IF(!q || !is_int || !parse_int64(p, q, &v[i]));
            m[i] = 1;
            p = q;
        }
        p = skip_ws(p, end);
        BAD_IF(p >= end);
        if (*p == ']') return 0;
        BAD_IF(*p != ',');
        p = skip_ws(p + 1, end);
    }
}

/* One (already validated) args object against a struct: 0 when msgspec would decode it to exactly the
 * values found (in sc), 1 when the scanner cannot vouch for that (msgspec decodes it). Stricter than
 * msgspec is safe: every int is int64, every float finite. `need_gil`: set when a float needs CPython. */
static int parse_row(const Struct *st, P p, P end, SVal *sc, int *slow_float, P *after, uint64_t *seen_out) {
    uint64_t seen = 0;
    *seen_out = 0;
    p = skip_ws(p + 1, end);
    BAD_IF(p >= end);
    if (*p == '}') { *after = p + 1; return 0; }
    for (;;) {
        int esc;
        BAD_IF(p >= end || *p != '"');
        P ks = p + 1;
        P q = scan_string(p, end, &esc);
        BAD_IF(!q);
        Py_ssize_t kl = (q - 1) - ks;
        p = skip_ws(q, end);
        BAD_IF(p >= end || *p != ':');
        p = skip_ws(p + 1, end);
        BAD_IF(p >= end || esc); /* an escaped key may name a field: msgspec's business */
        int k = find_field(st, ks, kl);
        P ve;
        if (k < 0) {
            ve = skip_value(p, end, 2);
            BAD_IF(!ve);
        } else {
            const SField *fd = &st->f[k];
            SVal *sv = &sc[k];
            BAD_IF(seen & (1ULL << k)); /* a duplicate key */
            seen |= 1ULL << k;
            int t = value_type(p, end, &ve, 2, (fd->types & T_ARR_INT) && !(fd->types & T_ARR));
            BAD_IF(!ve || !(t & fd->types));
            if (t == T_INT) BAD_IF(!parse_int64(p, ve, &sv->iv[0]));
            sv->slow = 0;
            if (t == T_FLOAT || (t == T_INT && fd->num == 2)) {
                if (parse_double_fast(p, ve, &sv->dv) < 0) sv->slow = 1, *slow_float = 1; /* with the GIL */
            }
            if (fd->dim3) {
                BAD_IF(t == T_NULL);
                BAD_IF(parse_dim3(p, ve, sv->iv, sv->ok));
            }
            sv->type = (unsigned char)t;
            sv->s = p;
            sv->e = ve;
        }
        p = skip_ws(ve, end);
        BAD_IF(p >= end);
        if (*p == ',') { p = skip_ws(p + 1, end); continue; }
        if (*p == '}') { *after = p + 1; *seen_out = seen; return 0; }
        return 1;
    }
}

/* the floats parse_double_fast left, by CPython's strtod (GIL held): 0 all finite, 1 not */
static int check_floats(const Struct *st, SVal *sc, uint64_t seen) {
    for (int i = 0; i < st->nf; i++)
        if ((seen >> i & 1) && sc[i].slow && !parse_double(sc[i].s, sc[i].e, &sc[i].dv)) return 1;
    return 0;
}

/* zero bytes appended up to `len` */
static int zero_to(Buf *b, Py_ssize_t len) {
    if (b->len >= len) return 1;
    if (!buf_reserve(b, len - b->len)) return 0;
    memset(b->data + b->len, 0, len - b->len);
    b->len = len;
    return 1;
}

/* a number at row r of a values / validity pair (the rows before it without one are nulls) */
static inline int num_put(Buf *v, Buf *m, int64_t *nvalid, int64_t r, const void *x) {
    if (!zero_to(v, r * 8) || !buf_put(v, x, 8) || !zero_to(m, (r >> 3) + 1)) return 0;
    m->data[r >> 3] |= (char)(1 << (r & 7));
    (*nvalid)++;
    return 1;
}

/* binary offsets 0..r: rows before r complete (those without a value: "") */
static int off_to(TCol *c, int64_t r) {
    int64_t o = c->data.len;
    if (c->off.len == 0 && !buf_put(&c->off, &o, 8)) return 0;
    while (c->off.len / 8 <= r)
        if (!buf_put(&c->off, &o, 8)) return 0;
    return 1;
}

/* append the row (event `ev`) to a table: only its fields with a value are written; `bad`: none (msgspec
 * fills the row in later). 0 / -1 */
static int table_put(Table *t, const Struct *st, const SVal *sc, uint64_t seen, int bad, uint32_t ev) {
    int64_t r = t->n;
    if (!buf_put(&t->rows, &ev, 4)) return -1;
    if (bad && !buf_put(&t->bad, &r, 8)) return -1;
    t->n++;
    if (bad) return 0;
    for (uint64_t m = seen & t->fmask; m; m &= m - 1) {
        int k = __builtin_ctzll(m);
        const SVal *v = &sc[k];
        TCol *c = &t->cols[t->colof[k]];
        if (c->mode == MODE_RAW) { /* null too: its text */
            if (!off_to(c, r) || !buf_put(&c->data, v->s, v->e - v->s)) return -1;
            int64_t o = c->data.len;
            if (!buf_put(&c->off, &o, 8)) return -1;
            c->nonnull++;
            continue;
        }
        if (v->type == T_NULL) continue;
        switch (c->mode) {
        case MODE_INT:
            if (!num_put(&c->v[0], &c->m[0], &c->nvalid[0], r, &v->iv[0])) return -1;
            break;
        case MODE_DIM3:
            for (int j = 0; j < 3; j++)
                if (v->ok[j] && !num_put(&c->v[j], &c->m[j], &c->nvalid[j], r, &v->iv[j])) return -1;
            break;
        case MODE_OBJ: {
            int num = st->f[k].num;
            c->nonnull++;
            if (v->type == T_INT && num == 1) {
                if (!num_put(&c->v[0], &c->m[0], &c->nvalid[0], r, &v->iv[0])) return -1;
            } else if ((v->type == T_INT || v->type == T_FLOAT) && num == 2) {
                if (!num_put(&c->v[0], &c->m[0], &c->nvalid[0], r, &v->dv)) return -1;
            } else if (!buf_put(&c->data, c->off.len ? "," : "[", 1) || !buf_put(&c->data, v->s, v->e - v->s) ||
                       !buf_put(&c->off, &r, 8)) {
                return -1;
            }
            break;
        }
        }
    }
    return 0;
}

static void table_free(Table *t) {
    for (int i = 0; i < t->ncols; i++) {
        TCol *c = &t->cols[i];
        for (int j = 0; j < 3; j++) { buf_free(&c->v[j]); buf_free(&c->m[j]); }
        buf_free(&c->off);
        buf_free(&c->data);
    }
    free(t->cols);
    t->cols = NULL;
    t->ncols = 0;
    buf_free(&t->rows);
    buf_free(&t->bad);
}

/* a number column of n rows ("l" int64 / "g" float64), None when no row has a value */
static PyObject *num_col(TCol *c, int j, int64_t n, const char *format) {
    if (!c->nvalid[j]) Py_RETURN_NONE;
    if (!zero_to(&c->v[j], n * 8) || !zero_to(&c->m[j], (n + 7) >> 3)) return PyErr_NoMemory();
    Buf *b[2] = {&c->m[j], &c->v[j]};
    return acol_new(format, n, n - c->nvalid[j], 2, b);
}

/* MODE_OBJ: (number column or None, rows with a value, the other values' JSON array, their rows) */
static PyObject *obj_col(TCol *c, int num, int64_t n) {
    if (!buf_put(&c->data, c->off.len ? "]" : "[]", c->off.len ? 1 : 2)) return PyErr_NoMemory();
    PyObject *col = num_col(c, 0, n, num == 2 ? "g" : "l");
    return Py_BuildValue("(NLNN)", col, (long long)c->nonnull, buf_block(&c->data), buf_block(&c->off));
}

/* (rows, [column per field], bad positions) of a table; its buffers go with them */
static PyObject *table_result(Table *t, const Struct *st) {
    Buf *rb[2] = {NULL, &t->rows};
    PyObject *rows = acol_new("I", t->n, 0, 2, rb);
    PyObject *cols = PyList_New(t->ncols);
    PyObject *bad = buf_block(&t->bad);
    if (!rows || !cols || !bad) goto fail;
    for (int i = 0; i < t->ncols; i++) {
        TCol *c = &t->cols[i];
        PyObject *o = NULL;
        switch (c->mode) {
        case MODE_INT: o = num_col(c, 0, t->n, "l"); break;
        case MODE_DIM3: {
            PyObject *x = num_col(c, 0, t->n, "l"), *y = num_col(c, 1, t->n, "l"), *z = num_col(c, 2, t->n, "l");
            if (x && y && z) o = PyTuple_Pack(3, x, y, z);
            Py_XDECREF(x); Py_XDECREF(y); Py_XDECREF(z);
            break;
        }
        case MODE_RAW: {
            if (!c->nonnull) { o = Py_None; Py_INCREF(o); break; }
            if (!off_to(c, t->n)) { PyErr_NoMemory(); goto fail; }
            Buf *b[3] = {NULL, &c->off, &c->data};
            o = acol_new("Z", t->n, 0, 3, b);
            break;
        }
        case MODE_OBJ: o = obj_col(c, st->f[c->field].num, t->n); break;
        }
        if (!o) goto fail;
        PyList_SET_ITEM(cols, i, o);
    }
    PyObject *r = PyTuple_Pack(3, rows, cols, bad);
    Py_DECREF(rows); Py_DECREF(cols); Py_DECREF(bad);
    return r;
fail:
    Py_XDECREF(rows); Py_XDECREF(cols); Py_XDECREF(bad);
    return NULL;
}

/* ------------------------------------------------------------------ string dictionary */

/* keys are owned copies: the bytes they came from are gone once the next chunk arrives */
typedef struct { uint64_t h; char *key; Py_ssize_t len; uint32_t code; int used; } Slot;
/* a worker's own string (one not in the shared dictionary): its key, in the order of first use */
typedef struct { const char *key; Py_ssize_t len; uint64_t h; int esc; } LKey;
/* `uniques`: the Python strings, by code (the scanner's own dictionary); a worker's has none: `loc` */
typedef struct { Slot *slots; size_t cap, count; PyObject *uniques; Buf loc; } Intern;

static uint64_t hash_bytes(P s, Py_ssize_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
        s += 8; n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ULL;
    return h ^ (h >> 29);
}

static int intern_init(Intern *t) {
    t->cap = 1024;
    t->count = 0;
    t->slots = calloc(t->cap, sizeof(Slot));
    t->uniques = PyList_New(0);
    if (!t->slots || !t->uniques) { PyErr_NoMemory(); return 0; }
    return 1;
}

static int intern_grow(Intern *t);

static void intern_free(Intern *t) {
    if (t->slots)
        for (size_t i = 0; i < t->cap; i++) free(t->slots[i].key);
    free(t->slots);
    t->slots = NULL;
    buf_free(&t->loc);
    Py_CLEAR(t->uniques);
}

/* the code of key [s, s+n) with hash h, -1 if absent (no GIL needed: only reads) */
static inline int64_t intern_find(const Intern *t, uint64_t h, P s, Py_ssize_t n) {
    size_t j = h & (t->cap - 1);
    while (t->slots[j].used) {
        const Slot *sl = &t->slots[j];
        if (sl->h == h && sl->len == n && memcmp(sl->key, s, n) == 0) return sl->code;
        j = (j + 1) & (t->cap - 1);
    }
    return -1;
}

/* a new key (not present) with the next code; NULL when out of memory, else its owned copy */
static char *intern_add(Intern *t, uint64_t h, P s, Py_ssize_t n) {
    size_t j = h & (t->cap - 1);
    while (t->slots[j].used) j = (j + 1) & (t->cap - 1);
    char *key = malloc(n ? n : 1);
    if (!key) return NULL;
    memcpy(key, s, n);
    Slot *sl = &t->slots[j];
    sl->h = h; sl->key = key; sl->len = n; sl->code = (uint32_t)t->count; sl->used = 1;
    t->count++;
    if (t->count * 2 > t->cap && !intern_grow(t)) return NULL;
    return key;
}

static int intern_grow(Intern *t) {
    size_t cap = t->cap * 2;
    Slot *s = calloc(cap, sizeof(Slot));
    if (!s) return 0;
    for (size_t i = 0; i < t->cap; i++) {
        if (!t->slots[i].used) continue;
        size_t j = t->slots[i].h & (cap - 1);
        while (s[j].used) j = (j + 1) & (cap - 1);
        s[j] = t->slots[i];
    }
    free(t->slots);
    t->slots = s;
    t->cap = cap;
    return 1;
}

/* ------------------------------------------------------------------ scanner state */

enum { K_PH, K_CAT, K_NAME, K_PID, K_TID, K_TS, K_DUR, K_ID, K_ARGS, K_N };

static int which_key(P s, Py_ssize_t n) {
    switch (n) {
    case 2:
        if (s[0] == 'p' && s[1] == 'h') return K_PH;
        if (s[0] == 't' && s[1] == 's') return K_TS;
        if (s[0] == 'i' && s[1] == 'd') return K_ID;
        return -1;
    case 3:
        if (s[1] == 'i' && s[2] == 'd') return s[0] == 'p' ? K_PID : (s[0] == 't' ? K_TID : -1);
        if (s[0] == 'c' && s[1] == 'a' && s[2] == 't') return K_CAT;
        if (s[0] == 'd' && s[1] == 'u' && s[2] == 'r') return K_DUR;
        return -1;
    case 4:
        if (memcmp(s, "name", 4) == 0) return K_NAME;
        if (memcmp(s, "args", 4) == 0) return K_ARGS;
        return -1;
    default:
        return -1;
    }
}

/* (ph, cat, name) codes -> the args tables (a bit each) that read the event's args object, 0: none (the
 * caller's `keep` answers once per triple) */
typedef struct { uint32_t a, b, c, keep; unsigned char used; } TSlot;
typedef struct { TSlot *s; size_t cap, count; } Triples;

typedef struct Cols {
    Intern ph, cat, name;
    Buf c_ph, c_cat, c_name, pid, tid, ts, dur, nargs;
    Buf id_rows, id_vals; /* the int ids (flows' only): rows and values */
    Buf tsm, durm; /* validity of ts / dur (absent: null) */
    int64_t ts_valid, dur_valid;
    PyObject *pid_strs, *tid_strs, *id_strs;
    PyObject *keep; /* callable(ph, cat, name) -> table bits, or None: no args read */
    Triples trip;
    Struct *structs;
    int nstructs, ntables;
    Table *tables;
    SVal *scratch;
    Buf odd_ev, odd_off, odd; /* args objects the scanner does not vouch for: event, offsets, text */
    Py_ssize_t n;
    PyThreadState *saved; /* non-NULL while this scan runs with the GIL released */
    /* a worker (one byte range of the events, in a thread of its own): `glob` is the scanner's Cols, read
     * only while the workers run (its dictionaries and triples); the worker's new strings are keys only
     * (`Intern.loc`, codes with LOCAL set) and its string pid / tid / id values are kept as text (`strs`):
     * the merge (cols_merge) makes the Python objects, in event order */
    struct Cols *glob;
    int held;               /* a worker holds the GIL (PyGILState_Ensure) */
    PyGILState_STATE gs;
    Buf strs, strtext;      /* PStr records and their text */
} Cols;

#define LOCAL 0x80000000u
typedef struct { int64_t row, off, len; int kind, esc; } PStr; /* kind: 0 pid, 1 tid, 2 id */

/* The scan runs without the GIL; whatever calls into CPython (a new string, a string id, a slow float,
 * the keep callback) takes it back first. A worker thread has no Python thread state of its own until
 * it needs one (rarely: a keep() call, a float glibc cannot parse). */
static inline void gil_take(Cols *c) {
    if (c->glob) {
        if (!c->held) { c->gs = PyGILState_Ensure(); c->held = 1; }
        return;
    }
    if (c->saved) { PyEval_RestoreThread(c->saved); c->saved = NULL; }
}

static inline void gil_drop(Cols *c) {
    if (c->glob) {
        if (c->held) { c->held = 0; PyGILState_Release(c->gs); }
        return;
    }
    if (!c->saved) c->saved = PyEval_SaveThread();
}

/* code of the string body [s, e): -1 on error, -2 on invalid text. `g`: a worker's shared dictionary
 * (its codes first; the worker's own ones have LOCAL set) */
static int64_t intern_code(Cols *c, Intern *t, const Intern *g, P s, P e, int esc) {
    Py_ssize_t n = e - s;
    uint64_t h = hash_bytes(s, n);
    if (g) {
        int64_t k = intern_find(g, h, s, n);
        if (k >= 0) return k;
        k = intern_find(t, h, s, n);
        if (k >= 0) return k | LOCAL;
        k = (int64_t)t->count;
        char *key = intern_add(t, h, s, n);
        LKey lk = {key, n, h, esc};
        if (!key || !buf_put(&t->loc, &lk, sizeof lk)) return -1;
        return k | LOCAL;
    }
    size_t j = h & (t->cap - 1);
    while (t->slots[j].used) {
        Slot *sl = &t->slots[j];
        if (sl->h == h && sl->len == n && memcmp(sl->key, s, n) == 0) return sl->code;
        j = (j + 1) & (t->cap - 1);
    }
    gil_take(c);
    PyObject *str = make_str(s, e, esc);
    if (!str) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) { PyErr_Clear(); return -2; }
        return -1;
    }
    int rc = PyList_Append(t->uniques, str);
    Py_DECREF(str);
    if (rc < 0) return -1;
    char *key = malloc(n ? n : 1);
    if (!key) return -1;
    memcpy(key, s, n);
    Slot *sl = &t->slots[j];
    sl->h = h; sl->key = key; sl->len = n; sl->code = (uint32_t)t->count; sl->used = 1;
    t->count++;
    if (t->count * 2 > t->cap && !intern_grow(t)) return -1;
    return (int64_t)(t->count - 1);
}

static inline size_t triple_hash(uint32_t a, uint32_t b, uint32_t c) {
    uint64_t h = ((uint64_t)a * 0x9E3779B97F4A7C15ULL) ^ ((uint64_t)b * 0xC2B2AE3D27D4EB4FULL) ^
                 ((uint64_t)c * 0x165667B19E3779F9ULL);
    return (size_t)(h ^ (h >> 31));
}

/* the answer cached for a triple, -1 if none */
static int64_t trip_find(const Triples *t, uint32_t a, uint32_t b, uint32_t d) {
    size_t j = triple_hash(a, b, d) & (t->cap - 1);
    while (t->s[j].used) {
        const TSlot *sl = &t->s[j];
        if (sl->a == a && sl->b == b && sl->c == d) return sl->keep;
        j = (j + 1) & (t->cap - 1);
    }
    return -1;
}

static int trip_put(Triples *t, uint32_t a, uint32_t b, uint32_t d, uint32_t k);

/* a worker's string of code `code` of dictionary `i` (0 ph, 1 cat, 2 name), a new reference; GIL held */
static PyObject *worker_str(Cols *c, int i, uint32_t code) {
    Intern *g = i == 0 ? &c->glob->ph : i == 1 ? &c->glob->cat : &c->glob->name;
    Intern *t = i == 0 ? &c->ph : i == 1 ? &c->cat : &c->name;
    if (!(code & LOCAL)) {
        PyObject *o = PyList_GET_ITEM(g->uniques, code);
        Py_INCREF(o);
        return o;
    }
    const LKey *k = &((const LKey *)t->loc.data)[code & ~LOCAL];
    return make_str((P)k->key, (P)k->key + k->len, k->esc);
}

/* the table bits (0: none), -1 error */
static int64_t keep_args(Cols *c, uint32_t a, uint32_t b, uint32_t d) {
    if (c->keep == Py_None) return 0;
    if (c->glob && !((a | b | d) & LOCAL)) {
        int64_t k = trip_find(&c->glob->trip, a, b, d);
        if (k >= 0) return k;
    }
    int64_t known = trip_find(&c->trip, a, b, d);
    if (known >= 0) return known;
    gil_take(c);
    PyObject *r;
    if (c->glob) {
        PyObject *x = worker_str(c, 0, a), *y = worker_str(c, 1, b), *z = worker_str(c, 2, d);
        r = x && y && z ? PyObject_CallFunctionObjArgs(c->keep, x, y, z, NULL) : NULL;
        Py_XDECREF(x); Py_XDECREF(y); Py_XDECREF(z);
    } else {
        r = PyObject_CallFunctionObjArgs(c->keep, PyList_GET_ITEM(c->ph.uniques, a),
                                         PyList_GET_ITEM(c->cat.uniques, b), PyList_GET_ITEM(c->name.uniques, d),
                                         NULL);
    }
    if (!r) return -1;
    long k = PyLong_AsLong(r);
    Py_DECREF(r);
    if (k == -1 && PyErr_Occurred()) return -1;
    if (k < 0 || (c->ntables < 32 && (k >> c->ntables))) {
        PyErr_SetString(PyExc_ValueError, "keep() must return a bit mask of the args tables");
        return -1;
    }
    if (trip_put(&c->trip, a, b, d, (uint32_t)k)) return -1;
    return k;
}

/* a triple not in `t` yet: 0 / -1 (out of memory) */
static int trip_put(Triples *t, uint32_t a, uint32_t b, uint32_t d, uint32_t k) {
    size_t j = triple_hash(a, b, d) & (t->cap - 1);
    while (t->s[j].used) j = (j + 1) & (t->cap - 1);
    TSlot *sl = &t->s[j];
    sl->a = a; sl->b = b; sl->c = d; sl->used = 1; sl->keep = k;
    if (++t->count * 2 > t->cap) {
        size_t cap = t->cap * 2;
        TSlot *s = calloc(cap, sizeof(TSlot));
        if (!s) return -1;
        for (size_t i = 0; i < t->cap; i++) {
            if (!t->s[i].used) continue;
            size_t q = triple_hash(t->s[i].a, t->s[i].b, t->s[i].c) & (cap - 1);
            while (s[q].used) q = (q + 1) & (cap - 1);
            s[q] = t->s[i];
        }
        free(t->s);
        t->s = s;
        t->cap = cap;
    }
    return 0;
}

/* 0 ok, 1 invalid input, -1 error (a Python exception, or out of memory when none is set) */
#define FAIL_IF(c) do { if (c) return 1; } while (0)

static const unsigned char EMPTY[1] = {0};

/* pid / tid / id: int64, or a string recorded in `strs` by row */
static int int_or_str(Cols *c, P p, P end, P *after, int64_t *out, PyObject *strs, int allow_null,
                      unsigned char *present, int kind) {
    *present = 1;
    *out = 0;
    if (*p == '"') {
        int esc;
        P q = scan_string(p, end, &esc);
        FAIL_IF(!q);
        if (c->glob) { /* a worker: the text, for the merge */
            PStr ps = {c->n, c->strtext.len, (q - 1) - (p + 1), kind, esc};
            if (!buf_put(&c->strs, &ps, sizeof ps) || !buf_put(&c->strtext, p + 1, ps.len)) return -1;
            *present = 0;
            *after = q;
            return 0;
        }
        gil_take(c);
        PyObject *s = make_str(p + 1, q - 1, esc);
        if (!s) {
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) { PyErr_Clear(); return 1; }
            return -1;
        }
        PyObject *key = PyLong_FromSsize_t(c->n);
        int rc = key ? PyDict_SetItem(strs, key, s) : -1;
        Py_XDECREF(key);
        Py_DECREF(s);
        if (rc < 0) return -1;
        *present = 0;
        *after = q;
        return 0;
    }
    if (allow_null && *p == 'n') {
        P q = skip_literal(p, end, "null", 4);
        FAIL_IF(!q);
        *present = 0;
        *after = q;
        return 0;
    }
    int is_int;
    P q = scan_number(p, end, &is_int);
    FAIL_IF(!q || !is_int || !parse_int64(p, q, out));
    *after = q;
    return 0;
}

/* the struct the tables of `mask` read (-1 error: they must all read the same one) */
static int mask_struct(Cols *c, uint32_t mask) {
    int first = __builtin_ctz(mask);
    for (int t = first + 1; t < c->ntables; t++)
        if ((mask & (1u << t)) && c->tables[t].st != c->tables[first].st) {
            gil_take(c);
            PyErr_SetString(PyExc_ValueError, "keep(): the tables of one event must read the same struct");
            return -1;
        }
    return c->tables[first].st;
}

/* parse the args object at p into the scratch row: *after its end (NULL: not valid JSON); *bad: the scanner
 * does not vouch for it. 0 / -1 */
static int parse_args(Cols *c, int st, P p, P end, P *after, int *bad, uint64_t *seen) {
    int slow = 0;
    *after = NULL;
    *bad = parse_row(&c->structs[st], p, end, c->scratch, &slow, after, seen);
    if (*bad) {
        *after = skip_container(p, end, 1); /* why: invalid JSON, or only a value msgspec takes otherwise */
    } else if (slow) {
#ifndef __GLIBC__
        gil_take(c);
#endif
        *bad = check_floats(&c->structs[st], c->scratch, *seen);
    }
    return 0;
}

/* the parsed args object [as, ae) of the event being added, into the tables of `mask`: 0, 1 invalid,
 * -1 error */
static int put_args(Cols *c, uint32_t mask, int st, int bad, uint64_t seen, P as, P ae) {
    if (c->n >= (Py_ssize_t)UINT32_MAX) return 1; /* row numbers are uint32 */
    for (int t = 0; t < c->ntables; t++)
        if ((mask & (1u << t)) && table_put(&c->tables[t], &c->structs[st], c->scratch, seen, bad, (uint32_t)c->n))
            return -1;
    if (bad) {
        int64_t ev = c->n, o;
        if (c->odd_off.len == 0 && !buf_put(&c->odd_off, &c->odd.len, 8)) return -1;
        if (!buf_put(&c->odd, as, ae - as)) return -1;
        o = c->odd.len;
        if (!buf_put(&c->odd_ev, &ev, 8) || !buf_put(&c->odd_off, &o, 8)) return -1;
    }
    return 0;
}

/* ph, cat, name codes of the event (absent: "") */
static int event_codes(Cols *c, P *str_s, P *str_e, int *str_esc, uint32_t *code) {
    Intern *tabs[3] = {&c->ph, &c->cat, &c->name};
    Intern *g[3] = {NULL, NULL, NULL};
    if (c->glob) { g[0] = &c->glob->ph; g[1] = &c->glob->cat; g[2] = &c->glob->name; }
    for (int i = 0; i < 3; i++) {
        int64_t k = intern_code(c, tabs[i], g[i], str_s[i], str_e[i], str_esc[i]);
        if (k == -1) return -1;
        if (k == -2) return 1;
        code[i] = (uint32_t)k;
    }
    return 0;
}

static int parse_event(Cols *c, P p, P end, P *after) {
    /* p at '{' */
    unsigned seen = 0;
    P str_s[3] = {EMPTY, EMPTY, EMPTY}, str_e[3] = {EMPTY, EMPTY, EMPTY};
    int str_esc[3] = {0, 0, 0};
    int64_t pid = 0, tid = 0, id = 0;
    P as = NULL, ae = NULL;
    double ts = NAN, dur = NAN; /* absent: NaN, read as null (JSON numbers are finite) */
    unsigned char idp = 0, dummy;
    int rc, have_codes = 0, parsed = 0, st = 0, bad = 0;
    int64_t mask = -2; /* the args tables: not asked yet */
    uint64_t seen_args = 0;
    uint32_t code[3];
    p = skip_ws(p + 1, end);
    FAIL_IF(p >= end);
    if (*p != '}') {
        for (;;) {
            int esc;
            FAIL_IF(p >= end || *p != '"');
            P ks = p + 1;
            P q = scan_string(p, end, &esc);
            FAIL_IF(!q);
            P ke = q - 1;
            p = skip_ws(q, end);
            FAIL_IF(p >= end || *p != ':');
            p = skip_ws(p + 1, end);
            FAIL_IF(p >= end);
            int k = esc ? -2 : which_key(ks, ke - ks);
            FAIL_IF(k == -2); /* escaped keys: leave to msgspec */
            if (k >= 0) {
                FAIL_IF(seen & (1u << k)); /* duplicate field */
                seen |= 1u << k;
            }
            switch (k) {
            case K_PH: case K_CAT: case K_NAME: {
                FAIL_IF(*p != '"');
                P qe = scan_string(p, end, &str_esc[k]);
                FAIL_IF(!qe);
                str_s[k] = p + 1;
                str_e[k] = qe - 1;
                p = qe;
                break;
            }
            case K_PID:
                rc = int_or_str(c, p, end, &p, &pid, c->pid_strs, 0, &dummy, 0);
                if (rc) return rc;
                break;
            case K_TID:
                rc = int_or_str(c, p, end, &p, &tid, c->tid_strs, 0, &dummy, 1);
                if (rc) return rc;
                break;
            case K_ID:
                rc = int_or_str(c, p, end, &p, &id, c->id_strs, 1, &idp, 2);
                if (rc) return rc;
                break;
            case K_TS: case K_DUR: {
                int is_int;
                P qe = scan_number(p, end, &is_int);
                FAIL_IF(!qe);
                double *dst = k == K_TS ? &ts : &dur;
                if (parse_double_fast(p, qe, dst) < 0) {
#ifndef __GLIBC__
                    gil_take(c);
#endif
                    FAIL_IF(!parse_double(p, qe, dst));
                }
                p = qe;
                break;
            }
            case K_ARGS: {
                FAIL_IF(*p != '{');
                P qe = NULL;
                if ((seen & 7) == 7 && c->ntables) { /* ph, cat and name known: parse the args in one walk */
                    if ((rc = event_codes(c, str_s, str_e, str_esc, code))) return rc;
                    have_codes = 1;
                    mask = keep_args(c, code[0], code[1], code[2]);
                    if (mask < 0) return -1;
                    if (mask) {
                        if ((st = mask_struct(c, (uint32_t)mask)) < 0) return -1;
                        if (parse_args(c, st, p, end, &qe, &bad, &seen_args)) return -1;
                        FAIL_IF(!qe);
                        parsed = 1;
                    }
                }
                if (!parsed) {
                    qe = skip_container(p, end, 1);
                    FAIL_IF(!qe);
                }
                as = p;
                ae = qe;
                p = qe;
                break;
            }
            default:
                p = skip_value(p, end, 1);
                FAIL_IF(!p);
            }
            p = skip_ws(p, end);
            FAIL_IF(p >= end);
            if (*p == ',') { p = skip_ws(p + 1, end); continue; }
            if (*p == '}') break;
            return 1;
        }
    }
    *after = p + 1;
    if (!have_codes && (rc = event_codes(c, str_s, str_e, str_esc, code))) return rc;
    if (!buf_put(&c->c_ph, &code[0], 4) || !buf_put(&c->c_cat, &code[1], 4) || !buf_put(&c->c_name, &code[2], 4))
        return -1;
    /* args: parsed into the tables that read them; nargs: the object's length (0: none) */
    uint32_t nargs = 0;
    if (as) {
        nargs = ae - as > (Py_ssize_t)UINT32_MAX ? UINT32_MAX : (uint32_t)(ae - as);
        if (mask == -2) { /* ph, cat or name came after the args */
            mask = keep_args(c, code[0], code[1], code[2]);
            if (mask < 0) return -1;
            if (mask) {
                P qe;
                if ((st = mask_struct(c, (uint32_t)mask)) < 0 || parse_args(c, st, as, ae, &qe, &bad, &seen_args))
                    return -1;
            }
        }
        if (mask > 0 && (rc = put_args(c, (uint32_t)mask, st, bad, seen_args, as, ae))) return rc;
    }
    int64_t row = c->n;
    if (idp && (!buf_put(&c->id_rows, &row, 8) || !buf_put(&c->id_vals, &id, 8))) return -1;
    if (!buf_put(&c->pid, &pid, 8) || !buf_put(&c->tid, &tid, 8) ||
        (isnan(ts) ? !buf_put(&c->ts, &ts, 8) : !num_put(&c->ts, &c->tsm, &c->ts_valid, c->n, &ts)) ||
        (isnan(dur) ? !buf_put(&c->dur, &dur, 8) : !num_put(&c->dur, &c->durm, &c->dur_valid, c->n, &dur)) ||
        !buf_put(&c->nargs, &nargs, 4))
        return -1;
    c->n++;
    return 0;
}

/* a float64 column of n rows with `valid` values (the others null) */
static PyObject *float_col(Buf *v, Buf *m, int64_t valid, int64_t n) {
    if (!zero_to(m, (n + 7) >> 3)) return PyErr_NoMemory();
    Buf *b[2] = {m, v};
    return acol_new("g", n, n - valid, 2, b);
}

static int set_item(PyObject *d, const char *k, PyObject *v) {
    if (!v) return 0;
    int rc = PyDict_SetItemString(d, k, v);
    Py_DECREF(v);
    return rc == 0;
}

static void cols_free(Cols *c) {
    if (c->glob) { c->structs = NULL; c->nstructs = 0; } /* a worker's are the scanner's */
    buf_free(&c->strs); buf_free(&c->strtext);
    intern_free(&c->ph); intern_free(&c->cat); intern_free(&c->name);
    Buf *bufs[] = {&c->c_ph, &c->c_cat, &c->c_name, &c->pid, &c->tid, &c->ts, &c->dur, &c->tsm, &c->durm,
                   &c->id_rows, &c->id_vals, &c->nargs, &c->odd_ev, &c->odd_off, &c->odd};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) buf_free(bufs[i]);
    for (int t = 0; t < c->ntables; t++) table_free(&c->tables[t]);
    free(c->tables);
    c->tables = NULL;
    c->ntables = 0;
    for (int i = 0; i < c->nstructs; i++) {
        for (int j = 0; j < c->structs[i].nf; j++) free(c->structs[i].f[j].key);
        free(c->structs[i].f);
    }
    free(c->structs);
    c->structs = NULL;
    c->nstructs = 0;
    free(c->scratch);
    c->scratch = NULL;
    free(c->trip.s);
    c->trip.s = NULL;
    Py_CLEAR(c->pid_strs); Py_CLEAR(c->tid_strs); Py_CLEAR(c->id_strs); Py_CLEAR(c->keep);
}

/* structs: [[(key, type bits, dim3)...]...], tables: [(struct, [(field, mode)...])...]: 0 ok, -1 error */
static int cols_specs(Cols *c, PyObject *structs, PyObject *tables) {
    PyObject *ss = PySequence_Fast(structs, "structs must be a sequence"), *ts = NULL;
    if (!ss) return -1;
    Py_ssize_t ns = PySequence_Fast_GET_SIZE(ss), nt;
    int rc = -1, nf_max = 1;
    c->structs = calloc(ns ? ns : 1, sizeof(Struct));
    if (!c->structs) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t i = 0; i < ns; i++) {
        PyObject *fs = PySequence_Fast(PySequence_Fast_GET_ITEM(ss, i), "a struct must be a sequence");
        if (!fs) goto done;
        Py_ssize_t nf = PySequence_Fast_GET_SIZE(fs);
        Struct *st = &c->structs[i];
        c->nstructs = (int)i + 1;
        st->f = calloc(nf ? nf : 1, sizeof(SField));
        if (nf > MAX_FIELDS || !st->f) {
            Py_DECREF(fs);
            if (st->f) PyErr_SetString(PyExc_ValueError, "too many fields"); else PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t j = 0; j < nf; j++) {
            const char *k;
            Py_ssize_t kl;
            int types, dim3;
            if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fs, j), "y#ii", &k, &kl, &types, &dim3) || !kl ||
                !(st->f[j].key = malloc(kl))) {
                Py_DECREF(fs);
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "bad field");
                goto done;
            }
            memcpy(st->f[j].key, k, kl);
            st->f[j].klen = kl;
            st->f[j].types = types;
            st->f[j].dim3 = dim3;
            st->f[j].num = (types & T_FLOAT) ? 2 : (types & T_INT) ? 1 : 0;
            st->nf = (int)j + 1;
        }
        Py_DECREF(fs);
        lookup_init(st);
        if (st->nf > nf_max) nf_max = st->nf;
    }
    if (!(ts = PySequence_Fast(tables, "tables must be a sequence"))) goto done;
    nt = PySequence_Fast_GET_SIZE(ts);
    if (nt > MAX_TABLES) { PyErr_SetString(PyExc_ValueError, "too many tables"); goto done; }
    c->tables = calloc(nt ? nt : 1, sizeof(Table));
    c->scratch = calloc(nf_max, sizeof(SVal));
    if (!c->tables || !c->scratch) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t i = 0; i < nt; i++) {
        Table *t = &c->tables[i];
        PyObject *cols;
        c->ntables = (int)i + 1;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(ts, i), "iO", &t->st, &cols)) goto done;
        PyObject *cs = PySequence_Fast(cols, "table columns must be a sequence");
        if (!cs) goto done;
        Py_ssize_t nc = PySequence_Fast_GET_SIZE(cs);
        t->cols = calloc(nc ? nc : 1, sizeof(TCol));
        if (!t->cols) { Py_DECREF(cs); PyErr_NoMemory(); goto done; }
        t->ncols = (int)nc;
        for (Py_ssize_t j = 0; j < nc; j++) {
            TCol *col = &t->cols[j];
            if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(cs, j), "ii", &col->field, &col->mode)) {
                Py_DECREF(cs);
                goto done;
            }
        }
        Py_DECREF(cs);
        if (t->st < 0 || t->st >= ns) { PyErr_SetString(PyExc_ValueError, "bad struct"); goto done; }
        for (int j = 0; j < t->ncols; j++) {
            TCol *col = &t->cols[j];
            if (col->field < 0 || col->field >= c->structs[t->st].nf || col->mode < MODE_INT || col->mode > MODE_OBJ ||
                (col->mode == MODE_DIM3) != c->structs[t->st].f[col->field].dim3 || (t->fmask >> col->field & 1)) {
                PyErr_SetString(PyExc_ValueError, "bad table column");
                goto done;
            }
            t->fmask |= 1ULL << col->field;
            t->colof[col->field] = (signed char)j;
        }
    }
    rc = 0;
done:
    Py_DECREF(ss);
    Py_XDECREF(ts);
    return rc;
}

/* ------------------------------------------------------------------ Scanner: the document in chunks */

/* where the scan stands between chunks: each state resumes at a unit (a top-level member, an event) or
 * a separator; a unit cut by the end of a chunk is parsed again, whole, once more bytes arrived */
enum { S_START, S_KEY_FIRST, S_KEY, S_TOP_SEP, S_EV_FIRST, S_EV, S_EV_SEP, S_END };

/* ------------------------------------------------------------------ workers: byte ranges of the events in threads */

/* A batch of the `traceEvents` array is cut at candidate event starts (a '{' after '}' ',': a cheap search,
 * not a parse) into one byte range per thread; each range is parsed by a worker into columns of its own,
 * without the GIL. The ranges are then joined in order: a range is taken only when the parse of the one
 * before ended exactly at its start (then the candidate was an event start, and the worker parsed what a
 * single pass would have); else, or when its worker failed, the range is parsed again, in this thread.
 * So the columns, the dictionaries' order (first use) and every verdict are a single pass's. */

/* a worker's Cols for the scanner's `g` (GIL held): 0 / -1 (cols_free frees a partial one) */
static int cols_worker(Cols *w, Cols *g) {
    memset(w, 0, sizeof *w);
    w->glob = g;
    w->keep = g->keep;
    Py_INCREF(w->keep);
    w->structs = g->structs;
    w->nstructs = g->nstructs;
    int nf_max = 1;
    for (int i = 0; i < g->nstructs; i++)
        if (g->structs[i].nf > nf_max) nf_max = g->structs[i].nf;
    w->scratch = calloc(nf_max, sizeof(SVal));
    w->trip.cap = 256;
    w->trip.s = calloc(w->trip.cap, sizeof(TSlot));
    Intern *ts[3] = {&w->ph, &w->cat, &w->name};
    for (int i = 0; i < 3; i++) {
        ts[i]->cap = 1024;
        ts[i]->slots = calloc(ts[i]->cap, sizeof(Slot));
        if (!ts[i]->slots) return -1;
    }
    if (!w->scratch || !w->trip.s) return -1;
    if (g->ntables) {
        if (!(w->tables = calloc(g->ntables, sizeof(Table)))) return -1;
        w->ntables = g->ntables;
        for (int t = 0; t < g->ntables; t++) {
            Table *d = &w->tables[t], *s = &g->tables[t];
            d->st = s->st;
            d->fmask = s->fmask;
            memcpy(d->colof, s->colof, sizeof d->colof);
            if (!(d->cols = calloc(s->ncols ? s->ncols : 1, sizeof(TCol)))) return -1;
            d->ncols = s->ncols;
            for (int j = 0; j < s->ncols; j++) {
                d->cols[j].field = s->cols[j].field;
                d->cols[j].mode = s->cols[j].mode;
            }
        }
    }
    return 0;
}

static inline int buf_cat(Buf *d, const Buf *s) { return !s->len || buf_put(d, s->data, s->len); }

/* int64 entries of `s` from index `from` on, each plus `add`, appended to `d` */
static int put_add64(Buf *d, const Buf *s, Py_ssize_t from, int64_t add) {
    Py_ssize_t k = s->len / 8;
    if (k <= from) return 1;
    if (!buf_reserve(d, (k - from) * 8)) return 0;
    const int64_t *a = (const int64_t *)s->data;
    int64_t *o = (int64_t *)(d->data + d->len);
    for (Py_ssize_t i = from; i < k; i++) *o++ = a[i] + add;
    d->len += (k - from) * 8;
    return 1;
}

/* uint32 event indices of `s`, each plus `add` */
static int put_add32(Buf *d, const Buf *s, uint32_t add) {
    Py_ssize_t k = s->len / 4;
    if (!k) return 1;
    if (!buf_reserve(d, k * 4)) return 0;
    const uint32_t *a = (const uint32_t *)s->data;
    uint32_t *o = (uint32_t *)(d->data + d->len);
    for (Py_ssize_t i = 0; i < k; i++) o[i] = a[i] + add;
    d->len += k * 4;
    return 1;
}

/* a worker's dictionary codes, made the scanner's (`map`: its own strings' codes) */
static int put_codes(Buf *d, const Buf *s, const uint32_t *map) {
    Py_ssize_t k = s->len / 4;
    if (!k) return 1;
    if (!buf_reserve(d, k * 4)) return 0;
    const uint32_t *a = (const uint32_t *)s->data;
    uint32_t *o = (uint32_t *)(d->data + d->len);
    for (Py_ssize_t i = 0; i < k; i++) o[i] = (a[i] & LOCAL) ? map[a[i] & ~LOCAL] : a[i];
    d->len += k * 4;
    return 1;
}

/* the n bits of validity bitmap `s` appended after the first `at` bits of `d` (a bitmap's bits past the rows
 * it covers are 0, and so are those past its end) */
static int bits_cat(Buf *d, int64_t at, const Buf *s, int64_t n) {
    if (!zero_to(d, (at + n + 7) >> 3)) return 0;
    unsigned char *o = (unsigned char *)d->data + (at >> 3);
    const unsigned char *a = (const unsigned char *)s->data;
    Py_ssize_t k = s->len < ((n + 7) >> 3) ? s->len : ((n + 7) >> 3);
    int sh = (int)(at & 7);
    Py_ssize_t room = d->len - (at >> 3);
    for (Py_ssize_t i = 0; i < k; i++) {
        if (!a[i]) continue;
        o[i] |= (unsigned char)(a[i] << sh);
        if (sh && i + 1 < room) o[i + 1] |= (unsigned char)(a[i] >> (8 - sh));
    }
    return 1;
}

/* worker `w`'s rows appended to the scanner's columns `d` (GIL held): 0, 1 invalid, -1 error */
static int cols_merge(Cols *d, Cols *w) {
    int64_t n0 = d->n;
    int rc = -1;
    uint32_t *map[3] = {NULL, NULL, NULL};
    if (n0 + w->n >= (int64_t)UINT32_MAX) return 1; /* row numbers are uint32 */
    Intern *di[3] = {&d->ph, &d->cat, &d->name}, *wi[3] = {&w->ph, &w->cat, &w->name};
    for (int i = 0; i < 3; i++) { /* the worker's strings in the order of their first use: the dictionary's */
        size_t cnt = wi[i]->count;
        if (!(map[i] = malloc((cnt ? cnt : 1) * sizeof(uint32_t)))) goto done;
        const LKey *lk = (const LKey *)wi[i]->loc.data;
        for (size_t j = 0; j < cnt; j++) {
            int64_t k = intern_find(di[i], lk[j].h, (P)lk[j].key, lk[j].len);
            if (k < 0) {
                PyObject *str = make_str((P)lk[j].key, (P)lk[j].key + lk[j].len, lk[j].esc);
                if (!str) {
                    if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) { PyErr_Clear(); rc = 1; }
                    goto done;
                }
                int e = PyList_Append(di[i]->uniques, str);
                Py_DECREF(str);
                if (e < 0) goto done;
                k = (int64_t)di[i]->count;
                if (!intern_add(di[i], lk[j].h, (P)lk[j].key, lk[j].len)) goto done;
            }
            map[i][j] = (uint32_t)k;
        }
    }
    if (!put_codes(&d->c_ph, &w->c_ph, map[0]) || !put_codes(&d->c_cat, &w->c_cat, map[1]) ||
        !put_codes(&d->c_name, &w->c_name, map[2]))
        goto done;
    for (size_t j = 0; j < w->trip.cap; j++) { /* keep()'s answers, for the next batches */
        const TSlot *t = &w->trip.s[j];
        if (!t->used) continue;
        uint32_t a = (t->a & LOCAL) ? map[0][t->a & ~LOCAL] : t->a, b = (t->b & LOCAL) ? map[1][t->b & ~LOCAL] : t->b,
                 c = (t->c & LOCAL) ? map[2][t->c & ~LOCAL] : t->c;
        if (trip_find(&d->trip, a, b, c) < 0 && trip_put(&d->trip, a, b, c, t->keep)) goto done;
    }
    if (!buf_cat(&d->pid, &w->pid) || !buf_cat(&d->tid, &w->tid) || !buf_cat(&d->nargs, &w->nargs) ||
        !buf_cat(&d->ts, &w->ts) || !bits_cat(&d->tsm, n0, &w->tsm, w->n) || !buf_cat(&d->dur, &w->dur) ||
        !bits_cat(&d->durm, n0, &w->durm, w->n) || !put_add64(&d->id_rows, &w->id_rows, 0, n0) ||
        !buf_cat(&d->id_vals, &w->id_vals))
        goto done;
    d->ts_valid += w->ts_valid;
    d->dur_valid += w->dur_valid;
    const PStr *ps = (const PStr *)w->strs.data;
    for (Py_ssize_t j = 0; j < w->strs.len / (Py_ssize_t)sizeof(PStr); j++) {
        P t0 = w->strtext.data ? (P)w->strtext.data + ps[j].off : EMPTY;
        PyObject *str = make_str(t0, t0 + ps[j].len, ps[j].esc);
        if (!str) {
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) { PyErr_Clear(); rc = 1; }
            goto done;
        }
        PyObject *dict = ps[j].kind == 0 ? d->pid_strs : ps[j].kind == 1 ? d->tid_strs : d->id_strs;
        PyObject *key = PyLong_FromLongLong(ps[j].row + n0);
        int e = key ? PyDict_SetItem(dict, key, str) : -1;
        Py_XDECREF(key);
        Py_DECREF(str);
        if (e < 0) goto done;
    }
    for (int t = 0; t < d->ntables; t++) {
        Table *dt = &d->tables[t], *wt = &w->tables[t];
        int64_t r0 = dt->n;
        if (!wt->n) continue;
        if (!put_add32(&dt->rows, &wt->rows, (uint32_t)n0) || !put_add64(&dt->bad, &wt->bad, 0, r0)) goto done;
        for (int k = 0; k < dt->ncols; k++) {
            TCol *a = &dt->cols[k], *b = &wt->cols[k];
            int parts = a->mode == MODE_DIM3 ? 3 : a->mode == MODE_RAW ? 0 : 1;
            for (int j = 0; j < parts; j++) {
                if (!b->nvalid[j]) continue;
                if (!zero_to(&a->v[j], r0 * 8) || !buf_cat(&a->v[j], &b->v[j]) || !bits_cat(&a->m[j], r0, &b->m[j], wt->n))
                    goto done;
                a->nvalid[j] += b->nvalid[j];
            }
            if (a->mode == MODE_RAW && b->off.len) { /* offsets 0..r0 first (the rows before without one: "") */
                int64_t base = a->data.len;
                if (!off_to(a, r0) || !buf_cat(&a->data, &b->data) || !put_add64(&a->off, &b->off, 1, base)) goto done;
            } else if (a->mode == MODE_OBJ && b->off.len) { /* b's text: "[v,v..." */
                if (!buf_put(&a->data, a->off.len ? "," : "[", 1) || !buf_put(&a->data, b->data.data + 1, b->data.len - 1) ||
                    !put_add64(&a->off, &b->off, 0, r0))
                    goto done;
            }
            a->nonnull += b->nonnull;
        }
        dt->n += wt->n;
    }
    if (w->odd_ev.len) {
        if (d->odd_off.len == 0 && !buf_put(&d->odd_off, &d->odd.len, 8)) goto done;
        int64_t base = d->odd.len;
        if (!buf_cat(&d->odd, &w->odd) || !put_add64(&d->odd_ev, &w->odd_ev, 0, n0) ||
            !put_add64(&d->odd_off, &w->odd_off, 1, base))
            goto done;
    }
    d->n += w->n;
    rc = 0;
done:
    for (int i = 0; i < 3; i++) free(map[i]);
    return rc;
}

/* how a run of events stopped: at an event at or past its limit, out of bytes (`state` resumes), at an event
 * cut by the end of the bytes (parsed again, whole, later), or at the array's ']' */
enum { R_LIMIT, R_MORE, R_CUT, R_CLOSE };
typedef struct { int rc, how, state; P stop; } Out; /* rc: 0, 1 invalid, -1 error */

/* the events from p (an event, or the whitespace before it) until the first one that starts at or past
 * `limit`, the end of the array or of the bytes */
static Out run_events(Cols *c, P p, P end, P limit, int final) {
    Out o = {0, R_MORE, S_EV, NULL};
    for (;;) {
        p = skip_ws(p, end);
        o.stop = p;
        o.state = S_EV;
        if (p >= end) { o.how = R_MORE; return o; }
        if (p >= limit) { o.how = R_LIMIT; return o; }
        if (*p != '{') { o.rc = 1; return o; }
        gil_drop(c);
        P q;
        int rc = parse_event(c, p, end, &q);
        if (rc < 0) { o.rc = -1; return o; }
        if (rc > 0) {
            if (!final) { /* a whole, well-formed object refused: invalid for good; else it may be cut */
                P whole = skip_value(p, end, 1);
                if (!whole || whole >= end) { o.how = R_CUT; return o; }
            }
            o.rc = 1;
            return o;
        }
        p = skip_ws(q, end);
        o.stop = p;
        o.state = S_EV_SEP;
        if (p >= end) { o.how = R_MORE; return o; }
        if (*p == ']') { o.how = R_CLOSE; return o; }
        if (*p != ',') { o.rc = 1; return o; }
        p++;
    }
}

/* a candidate event start at or after `a` and before `lim`: a '{' after ',' after '}' (whitespace between),
 * NULL if none; `lo`: where the bytes begin */
static P next_split(P lo, P a, P lim) {
    while (a < lim) {
        P q = memchr(a, ',', lim - a);
        if (!q) return NULL;
        P b = q - 1;
        while (b > lo && WS[*b]) b--;
        if (b >= lo && *b == '}') {
            P f = q + 1;
            while (f < lim && WS[*f]) f++;
            if (f < lim && *f == '{') return f;
        }
        a = q + 1;
    }
    return NULL;
}

#define MAX_THREADS 256
typedef struct { Cols c; P start, end, limit; int final, started; Out o; pthread_t th; } Work;

/* wait for worker `w` (once); one that could not start counts as failed: its range is parsed by the join */
static void work_wait(Work *w) {
    if (w->started) {
        pthread_join(w->th, NULL);
        w->started = 0;
    } else if (w->started == 0 && !w->o.stop) {
        w->o.rc = -1;
    }
}

static void *work_main(void *arg) {
    Work *w = arg;
    w->o = run_events(&w->c, w->start, w->end, w->limit, w->final);
    if (w->o.rc && w->c.held) PyErr_Clear(); /* a failed range is parsed again by the join */
    gil_drop(&w->c);
    return NULL;
}

typedef struct {
    PyObject_HEAD
    Cols c;
    Buf pend;    /* bytes not parsed yet: the tail of the last chunk (a cut unit) */
    Buf members; /* `"key": value` texts of the top-level members other than traceEvents, ','-joined */
    int state, seen_events, invalid, finished;
    Py_ssize_t need; /* parse `pend` again once it holds this many bytes (a cut unit: twice its size) */
    int threads;       /* > 1: the events are parsed in batches of `slice` bytes per thread */
    Py_ssize_t slice;
    int64_t joined, redone; /* ranges a worker parsed and the join took / parsed again in this thread */
} Scanner;

/* the events of [p, lim) (a batch; the last may run on to `end`) in up to s->threads ranges (see above) */
static Out par_events(Scanner *s, P p, P end, P lim, int final) {
    Cols *d = &s->c;
    int n = s->threads, k = 1;
    P starts[MAX_THREADS + 1];
    starts[0] = p;
    for (int i = 1; i < n; i++) {
        P a = p + (lim - p) / n * i, q;
        if (a <= starts[k - 1] || !(q = next_split(p, a, lim))) continue;
        if (q > starts[k - 1]) starts[k++] = q;
    }
    starts[k] = lim;
    if (k == 1) return run_events(d, p, end, lim, final);
    Out o = {-1, R_MORE, S_EV, p};
    gil_take(d);
    Work *w = calloc(k, sizeof(Work));
    if (!w) { PyErr_NoMemory(); return o; }
    int ok = 1;
    for (int i = 0; i < k && ok; i++) {
        ok = cols_worker(&w[i].c, d) == 0;
        w[i].start = starts[i];
        w[i].limit = starts[i + 1];
        w[i].end = end;
        w[i].final = final;
    }
    if (ok) {
        gil_drop(d);
        for (int i = 1; i < k; i++) w[i].started = pthread_create(&w[i].th, NULL, work_main, &w[i]) == 0;
        work_main(&w[0]);
        gil_take(d);
        /* the join, in order (range i's columns are copied while the workers after it may still run): range
         * i is the worker's when the ranges before ended at its start, else it is parsed here */
        for (int i = 0; i < k; i++) {
            P from = i ? o.stop : p;
            if (i && (o.rc || o.how != R_LIMIT)) break;
            if (i) {
                gil_drop(d);
                work_wait(&w[i]);
            }
            if (from == starts[i] && w[i].o.rc == 0) {
                gil_take(d);
                int rc = cols_merge(d, &w[i].c);
                cols_free(&w[i].c); /* its memory back before the next one's is copied */
                if (rc) { o.rc = rc; break; }
                o = w[i].o;
                s->joined++;
            } else {
                o = run_events(d, from, end, starts[i + 1], final);
                s->redone++;
            }
        }
    } else {
        PyErr_NoMemory();
    }
    gil_drop(d); /* (a worker may wait for the GIL: a keep() call) */
    for (int i = 1; i < k; i++) work_wait(&w[i]); /* those the join did not reach */
    gil_take(d);
    for (int i = 0; i < k; i++) cols_free(&w[i].c);
    free(w);
    if (o.rc >= 0) gil_drop(d); /* an error keeps its exception (and the GIL) for the caller */
    return o;
}

/* 0: parsed up to *stop (the rest is a cut unit or nothing), 1 invalid, -1 error */
static int run(Scanner *s, P p, P end, int final, P *stop) {
    Cols *c = &s->c;
    P unit;
    for (;;) {
        switch (s->state) {
        case S_START:
            p = skip_ws(p, end);
            if (p >= end) goto more;
            if (*p != '{') return 1;
            p++;
            s->state = S_KEY_FIRST;
            break;
        case S_KEY_FIRST:
            p = skip_ws(p, end);
            if (p >= end) goto more;
            if (*p == '}') return 1; /* no traceEvents */
            s->state = S_KEY;
            break;
        case S_KEY: {
            int esc;
            p = skip_ws(p, end);
            if (p >= end) goto more;
            unit = p;
            if (*p != '"') return 1;
            P q = scan_string(p, end, &esc);
            if (!q) goto cut;
            if (esc) return 1;
            P v = skip_ws(q, end);
            if (v >= end) goto cut;
            if (*v != ':') return 1;
            v = skip_ws(v + 1, end);
            if (v >= end) goto cut;
            if (q - unit == 13 && memcmp(unit + 1, "traceEvents", 11) == 0) {
                if (s->seen_events || *v != '[') return 1;
                s->seen_events = 1;
                p = v + 1;
                s->state = S_EV_FIRST;
                break;
            }
            P ve = skip_value(v, end, 1);
            if (!ve || (ve >= end && !final)) goto cut; /* a number at the end may go on */
            if ((s->members.len && !buf_put(&s->members, ",", 1)) || !buf_put(&s->members, unit, ve - unit))
                return -1;
            p = ve;
            s->state = S_TOP_SEP;
            break;
        }
        case S_TOP_SEP:
            p = skip_ws(p, end);
            if (p >= end) goto more;
            if (*p == ',') { p++; s->state = S_KEY; break; }
            if (*p == '}') { p++; s->state = S_END; break; }
            return 1;
        case S_EV_FIRST:
            p = skip_ws(p, end);
            if (p >= end) goto more;
            if (*p == ']') { p++; s->state = S_TOP_SEP; break; }
            s->state = S_EV;
            break;
        case S_EV: {
            Out o;
            if (s->threads > 1) { /* in batches of s->slice bytes a thread */
                Py_ssize_t batch = s->slice * s->threads, left = end - p;
                if (!final && left < batch) { /* wait for a batch */
                    *stop = p;
                    s->need = batch;
                    return 0;
                }
                P lim = left > batch ? p + batch : end;
                o = lim - p >= s->slice / 4 ? par_events(s, p, end, lim, final) : run_events(c, p, end, end, final);
            } else {
                o = run_events(c, p, end, end, final);
            }
            if (o.rc) return o.rc;
            if (o.how == R_CUT) { unit = o.stop; goto cut; }
            p = o.stop;
            s->state = o.state;
            if (o.how == R_MORE) goto more;
            break; /* R_LIMIT: the next batch; R_CLOSE: S_EV_SEP takes the ']' */
        }
        case S_EV_SEP:
            p = skip_ws(p, end);
            if (p >= end) goto more;
            if (*p == ',') { p++; s->state = S_EV; break; }
            if (*p == ']') { p++; s->state = S_TOP_SEP; break; }
            return 1;
        case S_END:
            p = skip_ws(p, end);
            if (p < end) return 1;
            goto more;
        }
    }
more:
    if (final && s->state != S_END) return 1;
    *stop = p;
    s->need = 0;
    return 0;
cut:
    if (final) return 1;
    *stop = unit;
    s->need = 2 * (end - unit);
    return 0;
}

/* 0 ok, 1 invalid, -1 error (exception set) */
static int feed_bytes(Scanner *s, P data, Py_ssize_t n, int final) {
    P base, end, stop;
    if (s->pend.len == 0) {
        base = data;
    } else {
        if (!buf_put(&s->pend, data, n)) { PyErr_NoMemory(); return -1; }
        if (!final && s->pend.len < s->need) return 0;
        base = (P)s->pend.data;
        n = s->pend.len;
    }
    end = base + n;
    stop = end;
    gil_drop(&s->c);
    int rc = run(s, base, end, final, &stop);
    gil_take(&s->c);
    if (rc < 0 && !PyErr_Occurred()) PyErr_NoMemory();
    if (rc) return rc;
    Py_ssize_t rest = end - stop;
    if (base == (P)s->pend.data) {
        memmove(s->pend.data, stop, rest);
        s->pend.len = rest;
    } else if (rest && !buf_put(&s->pend, stop, rest)) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static PyObject *scanner_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"keep", "structs", "tables", "threads", "slice", NULL};
    PyObject *keep = Py_None, *structs = NULL, *tables = NULL;
    int threads = 1;
    Py_ssize_t slice = 4 << 20;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OOOin", kwlist, &keep, &structs, &tables, &threads, &slice))
        return NULL;
    if (threads < 1 || threads > MAX_THREADS || slice < 1024) {
        PyErr_SetString(PyExc_ValueError, "threads must be 1..256 and slice >= 1024");
        return NULL;
    }
    if (keep != Py_None && !PyCallable_Check(keep)) {
        PyErr_SetString(PyExc_TypeError, "keep must be callable or None");
        return NULL;
    }
    Scanner *s = (Scanner *)type->tp_alloc(type, 0);
    if (!s) return NULL;
    Cols *c = &s->c;
    s->threads = threads;
    s->slice = slice;
    Py_INCREF(keep);
    c->keep = keep;
    c->trip.cap = 256;
    c->trip.s = calloc(c->trip.cap, sizeof(TSlot));
    c->pid_strs = PyDict_New(); c->tid_strs = PyDict_New(); c->id_strs = PyDict_New();
    if (!c->trip.s || !c->pid_strs || !c->tid_strs || !c->id_strs || !intern_init(&c->ph) ||
        !intern_init(&c->cat) || !intern_init(&c->name) ||
        (structs && tables && cols_specs(c, structs, tables) < 0)) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        Py_DECREF(s);
        return NULL;
    }
    return (PyObject *)s;
}

static void scanner_dealloc(Scanner *s) {
    cols_free(&s->c);
    buf_free(&s->pend);
    buf_free(&s->members);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyObject *scanner_feed(Scanner *s, PyObject *arg) {
    if (s->finished) { PyErr_SetString(PyExc_ValueError, "scanner already finished"); return NULL; }
    if (s->invalid) Py_RETURN_FALSE;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    int rc = feed_bytes(s, view.buf, view.len, 0);
    PyBuffer_Release(&view);
    if (rc < 0) return NULL;
    if (rc > 0) {
        s->invalid = 1;
        buf_free(&s->pend); /* nothing more will be parsed */
        Py_RETURN_FALSE;
    }
    Py_RETURN_TRUE;
}

static PyObject *scanner_finish(Scanner *s, PyObject *noarg) {
    if (s->finished) { PyErr_SetString(PyExc_ValueError, "scanner already finished"); return NULL; }
    s->finished = 1;
    if (!s->invalid) {
        int rc = feed_bytes(s, EMPTY, 0, 1);
        if (rc < 0) return NULL;
        if (rc > 0) s->invalid = 1;
    }
    buf_free(&s->pend);
    if (s->invalid || !s->seen_events || s->state != S_END) Py_RETURN_NONE;
    Cols *c = &s->c;
    PyObject *result = PyDict_New();
    if (!result) return NULL;
    Py_INCREF(c->ph.uniques); Py_INCREF(c->cat.uniques); Py_INCREF(c->name.uniques);
    Py_INCREF(c->pid_strs); Py_INCREF(c->tid_strs); Py_INCREF(c->id_strs);
    if (!set_item(result, "n", PyLong_FromSsize_t(c->n)) || !set_item(result, "members", buf_bytes(&s->members)) ||
        !set_item(result, "ph_values", c->ph.uniques) || !set_item(result, "cat_values", c->cat.uniques) ||
        !set_item(result, "name_values", c->name.uniques) || !set_item(result, "ph", buf_block(&c->c_ph)) ||
        !set_item(result, "cat", buf_block(&c->c_cat)) || !set_item(result, "name", buf_block(&c->c_name)) ||
        !set_item(result, "pid", buf_block(&c->pid)) || !set_item(result, "tid", buf_block(&c->tid)) ||
        !set_item(result, "pid_strs", c->pid_strs) || !set_item(result, "tid_strs", c->tid_strs) ||
        !set_item(result, "ts", float_col(&c->ts, &c->tsm, c->ts_valid, c->n)) ||
        !set_item(result, "dur", float_col(&c->dur, &c->durm, c->dur_valid, c->n)) ||
        !set_item(result, "id_rows", buf_block(&c->id_rows)) || !set_item(result, "id_vals", buf_block(&c->id_vals)) ||
        !set_item(result, "id_strs", c->id_strs) || !set_item(result, "nargs", buf_block(&c->nargs))) {
        Py_DECREF(result);
        return NULL;
    }
    PyObject *tabs = PyList_New(c->ntables);
    if (!tabs) { Py_DECREF(result); return NULL; }
    for (int t = 0; t < c->ntables; t++) {
        PyObject *o = table_result(&c->tables[t], &c->structs[c->tables[t].st]);
        if (!o) { Py_DECREF(tabs); Py_DECREF(result); return NULL; }
        PyList_SET_ITEM(tabs, t, o);
    }
    if (!set_item(result, "tables", tabs) ||
        !set_item(result, "ranges", Py_BuildValue("(LL)", (long long)s->joined, (long long)s->redone))) {
        Py_DECREF(result);
        return NULL;
    }
    if (c->odd_off.len == 0 && !buf_put(&c->odd_off, &c->odd.len, 8)) { Py_DECREF(result); return PyErr_NoMemory(); }
    PyObject *odd = Py_BuildValue("(NNN)", buf_block(&c->odd_ev), buf_block(&c->odd_off), buf_block(&c->odd));
    if (!set_item(result, "odd", odd)) { Py_DECREF(result); return NULL; }
    return result;
}

static PyMethodDef scanner_methods[] = {
    {"feed", (PyCFunction)scanner_feed, METH_O,
     "feed(chunk) -> bool: scan the next bytes of the document; False once it is known to be refused"},
    {"finish", (PyCFunction)scanner_finish, METH_NOARGS,
     "finish() -> dict | None: the columns, or None when the document is refused"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "traceview.ingest._scan.Scanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_dealloc = (destructor)scanner_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Scanner(keep=None, structs=(), tables=(), threads=1, slice=4 MiB): scan a Kineto document fed in "
              "chunks (see the module docstring); threads > 1: the events in batches of `slice` bytes a thread",
    .tp_methods = scanner_methods,
    .tp_new = scanner_new,
};

static PyMethodDef methods[] = {
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scan", "Columnar Kineto trace scanner", -1, methods};

PyMODINIT_FUNC PyInit__scan(void) {
#ifdef __GLIBC__
    if (!c_locale && !(c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0))) return PyErr_NoMemory();
#endif
    if (PyType_Ready(&BlockType) < 0 || PyType_Ready(&ScannerType) < 0 || PyType_Ready(&ArrowColType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&ScannerType);
    if (PyModule_AddObject(m, "Scanner", (PyObject *)&ScannerType) < 0) {
        Py_DECREF(&ScannerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

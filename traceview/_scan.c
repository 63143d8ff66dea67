/* traceview._scan: one-pass columnar scanner for Kineto chrome-trace JSON.
 *
 * Scanner(keep=None): .feed(chunk) ... .finish() -> dict | None
 *     Walks the top-level object once, fed in chunks of any size (a member or event cut by the
 *     end of a chunk is carried over and parsed whole with the next one), with the GIL released
 *     while it parses. The `traceEvents` array is turned into columns (dictionary-encoded
 *     ph/cat/name, int64 pid/tid/id, float64 ts/dur); the `args` objects that `keep(ph, cat, name)`
 *     asks for (asked once per distinct triple, it answers a group: 0 drop, 1 or 2; None: all in
 *     group 1) are copied into their group's buffer, the others only measured; every other top-level member's `"key": value` text is returned, ','-joined,
 *     for the caller to decode. The whole document is never held.
 * args_columns(data, starts, lens, rows, fields) -> list | None
 *     Reads the top-level keys of the `args` objects of the given rows and returns one
 *     output per requested field (see MODE_*).
 *
 * Contract: both return None whenever the input is anything but plain, valid JSON of the
 * shape the msgspec decoder (traceview/decode.py) accepts without repairs, or whenever a
 * value has a type that decoder would treat differently; the caller then falls back to
 * msgspec. The scanner is at least as strict as msgspec: accepting less is always safe.
 * Every read is bounds-checked against the buffer end.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <math.h>

#define MAX_DEPTH 64

typedef const unsigned char *P;

/* ------------------------------------------------------------------ lexing helpers */

static inline P skip_ws(P p, P end) {
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
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
            uint64_t hit = ((q - ones) & ~q) | ((b - ones) & ~b) | (v - ones * 0x20) | v;
            if (hit & high) break;
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
 * (which calls into CPython: the GIL must be held) */
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
    /* general case: CPython's correctly rounded strtod */
    char stackbuf[128];
    Py_ssize_t n = e - s;
    char *buf = n < (Py_ssize_t)sizeof(stackbuf) ? stackbuf : PyMem_Malloc(n + 1);
    if (!buf) return 0;
    memcpy(buf, s, n);
    buf[n] = 0;
    char *endp = NULL;
    double d = PyOS_string_to_double(buf, &endp, NULL);
    int good = !(d == -1.0 && PyErr_Occurred()) && endp == buf + n && isfinite(d);
    if (buf != stackbuf) PyMem_Free(buf);
    if (PyErr_Occurred()) PyErr_Clear();
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

/* plain malloc, not PyMem: the scanner grows them with the GIL released (and big blocks grow by mremap) */
typedef struct { char *data; Py_ssize_t len, cap; } Buf;

static int buf_reserve(Buf *b, Py_ssize_t extra) {
    if (b->len + extra <= b->cap) return 1;
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) cap *= 2;
    char *d = realloc(b->data, cap);
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
static void buf_free(Buf *b) { free(b->data); b->data = NULL; b->len = b->cap = 0; }

/* Block: a read-only buffer object that owns a Buf's memory, so that columns reach numpy without a copy */
typedef struct { PyObject_HEAD char *data; Py_ssize_t len; } Block;

static void block_dealloc(Block *b) {
    free(b->data);
    Py_TYPE(b)->tp_free((PyObject *)b);
}

static int block_getbuffer(Block *b, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)b, b->data ? b->data : (char *)"", b->len, 1, flags);
}

static PyBufferProcs block_as_buffer = {(getbufferproc)block_getbuffer, NULL};

static PyTypeObject BlockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "traceview._scan.Block",
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
        char *d = realloc(b->data, b->len ? b->len : 1);
        if (d) b->data = d;
    }
    o->data = b->data;
    o->len = b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    return (PyObject *)o;
}

/* ------------------------------------------------------------------ string dictionary */

/* keys are owned copies: the bytes they came from are gone once the next chunk arrives */
typedef struct { uint64_t h; char *key; Py_ssize_t len; uint32_t code; int used; } Slot;
typedef struct { Slot *slots; size_t cap, count; PyObject *uniques; } Intern;

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

static void intern_free(Intern *t) {
    if (t->slots)
        for (size_t i = 0; i < t->cap; i++) free(t->slots[i].key);
    free(t->slots);
    t->slots = NULL;
    Py_CLEAR(t->uniques);
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

/* (ph, cat, name) codes -> the group whose buffer keeps the args object, 0: dropped (the caller's `keep`
 * answers once per triple; groups let the caller free the args of one group once it has read them) */
#define N_GROUPS 3
typedef struct { uint32_t a, b, c; unsigned char used, keep; } TSlot;
typedef struct { TSlot *s; size_t cap, count; } Triples;

typedef struct {
    Intern ph, cat, name;
    Buf c_ph, c_cat, c_name, pid, tid, ts, dur, id, idmask, astart, alen, agroup;
    Buf args[N_GROUPS]; /* kept args objects by group (index 0: unused, group 0 = dropped) */
    PyObject *pid_strs, *tid_strs, *id_strs;
    PyObject *keep; /* callable(ph, cat, name) -> bool, or None: keep every args object */
    Triples trip;
    Py_ssize_t n;
    PyThreadState *saved; /* non-NULL while this scan runs with the GIL released */
} Cols;

/* The scan runs without the GIL; whatever calls into CPython (a new string, a string id, a slow float,
 * the keep callback) takes it back first. */
static inline void gil_take(Cols *c) {
    if (c->saved) { PyEval_RestoreThread(c->saved); c->saved = NULL; }
}

static inline void gil_drop(Cols *c) {
    if (!c->saved) c->saved = PyEval_SaveThread();
}

/* code of the string body [s, e): -1 on error, -2 on invalid text */
static int64_t intern_code(Cols *c, Intern *t, P s, P e, int esc) {
    Py_ssize_t n = e - s;
    uint64_t h = hash_bytes(s, n);
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

/* the group (0: drop), -1 error */
static int keep_args(Cols *c, uint32_t a, uint32_t b, uint32_t d) {
    if (c->keep == Py_None) return 1;
    Triples *t = &c->trip;
    size_t j = triple_hash(a, b, d) & (t->cap - 1);
    while (t->s[j].used) {
        TSlot *sl = &t->s[j];
        if (sl->a == a && sl->b == b && sl->c == d) return sl->keep;
        j = (j + 1) & (t->cap - 1);
    }
    gil_take(c);
    PyObject *r = PyObject_CallFunctionObjArgs(c->keep, PyList_GET_ITEM(c->ph.uniques, a),
                                               PyList_GET_ITEM(c->cat.uniques, b),
                                               PyList_GET_ITEM(c->name.uniques, d), NULL);
    if (!r) return -1;
    long k = PyLong_AsLong(r);
    Py_DECREF(r);
    if (k == -1 && PyErr_Occurred()) return -1;
    if (k < 0 || k >= N_GROUPS) {
        PyErr_SetString(PyExc_ValueError, "keep() must return a group number: 0 (drop), 1 or 2");
        return -1;
    }
    TSlot *sl = &t->s[j];
    sl->a = a; sl->b = b; sl->c = d; sl->used = 1; sl->keep = (unsigned char)k;
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
    return k;
}

/* 0 ok, 1 invalid input, -1 error (a Python exception, or out of memory when none is set) */
#define FAIL_IF(c) do { if (c) return 1; } while (0)

static int put_code(Cols *c, Intern *t, Buf *b, P s, P e, int esc, uint32_t *code) {
    int64_t k = intern_code(c, t, s, e, esc);
    if (k == -1) return -1;
    if (k == -2) return 1;
    *code = (uint32_t)k;
    return buf_put(b, code, 4) ? 0 : -1;
}

static const unsigned char EMPTY[1] = {0};

/* pid / tid / id: int64, or a string recorded in `strs` by row */
static int int_or_str(Cols *c, P p, P end, P *after, int64_t *out, PyObject *strs, int allow_null,
                      unsigned char *present) {
    *present = 1;
    *out = 0;
    if (*p == '"') {
        int esc;
        P q = scan_string(p, end, &esc);
        FAIL_IF(!q);
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

static int parse_event(Cols *c, P p, P end, P *after) {
    /* p at '{' */
    unsigned seen = 0;
    P str_s[3] = {EMPTY, EMPTY, EMPTY}, str_e[3] = {EMPTY, EMPTY, EMPTY};
    int str_esc[3] = {0, 0, 0};
    int64_t pid = 0, tid = 0, id = 0;
    P as = NULL, ae = NULL;
    double ts = NAN, dur = NAN; /* absent: NaN, read as null (JSON numbers are finite) */
    unsigned char idp = 0, dummy;
    int rc;
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
                rc = int_or_str(c, p, end, &p, &pid, c->pid_strs, 0, &dummy);
                if (rc) return rc;
                break;
            case K_TID:
                rc = int_or_str(c, p, end, &p, &tid, c->tid_strs, 0, &dummy);
                if (rc) return rc;
                break;
            case K_ID:
                rc = int_or_str(c, p, end, &p, &id, c->id_strs, 1, &idp);
                if (rc) return rc;
                break;
            case K_TS: case K_DUR: {
                int is_int;
                P qe = scan_number(p, end, &is_int);
                FAIL_IF(!qe);
                double *dst = k == K_TS ? &ts : &dur;
                if (parse_double_fast(p, qe, dst) < 0) {
                    gil_take(c);
                    FAIL_IF(!parse_double(p, qe, dst));
                }
                p = qe;
                break;
            }
            case K_ARGS: {
                FAIL_IF(*p != '{');
                P qe = skip_container(p, end, 1);
                FAIL_IF(!qe);
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
    uint32_t code[3];
    if ((rc = put_code(c, &c->ph, &c->c_ph, str_s[0], str_e[0], str_esc[0], &code[0]))) return rc;
    if ((rc = put_code(c, &c->cat, &c->c_cat, str_s[1], str_e[1], str_esc[1], &code[1]))) return rc;
    if ((rc = put_code(c, &c->name, &c->c_name, str_s[2], str_e[2], str_esc[2], &code[2]))) return rc;
    /* args: kept (offset into the group's buffer) only when a later reader needs them; -1 = dropped,
     * 0 + 0 = none */
    int64_t astart = 0, alen = as ? ae - as : 0;
    unsigned char group = 0;
    if (as) {
        int k = keep_args(c, code[0], code[1], code[2]);
        if (k < 0) return -1;
        group = (unsigned char)k;
        astart = k ? c->args[k].len : -1;
        if (k && !buf_put(&c->args[k], as, alen)) return -1;
    }
    if (!buf_put(&c->pid, &pid, 8) || !buf_put(&c->tid, &tid, 8) || !buf_put(&c->ts, &ts, 8) ||
        !buf_put(&c->dur, &dur, 8) || !buf_put(&c->id, &id, 8) || !buf_put(&c->idmask, &idp, 1) ||
        !buf_put(&c->astart, &astart, 8) || !buf_put(&c->alen, &alen, 8) || !buf_put(&c->agroup, &group, 1))
        return -1;
    c->n++;
    return 0;
}

static int set_item(PyObject *d, const char *k, PyObject *v) {
    if (!v) return 0;
    int rc = PyDict_SetItemString(d, k, v);
    Py_DECREF(v);
    return rc == 0;
}

static void cols_free(Cols *c) {
    intern_free(&c->ph); intern_free(&c->cat); intern_free(&c->name);
    Buf *bufs[] = {&c->c_ph, &c->c_cat, &c->c_name, &c->pid, &c->tid, &c->ts, &c->dur, &c->id,
                   &c->idmask, &c->astart, &c->alen, &c->agroup};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) buf_free(bufs[i]);
    for (int g = 0; g < N_GROUPS; g++) buf_free(&c->args[g]);
    free(c->trip.s);
    c->trip.s = NULL;
    Py_CLEAR(c->pid_strs); Py_CLEAR(c->tid_strs); Py_CLEAR(c->id_strs); Py_CLEAR(c->keep);
}

/* ------------------------------------------------------------------ Scanner: the document in chunks */

/* where the scan stands between chunks: each state resumes at a unit (a top-level member, an event) or
 * a separator; a unit cut by the end of a chunk is parsed again, whole, once more bytes arrived */
enum { S_START, S_KEY_FIRST, S_KEY, S_TOP_SEP, S_EV_FIRST, S_EV, S_EV_SEP, S_END };

typedef struct {
    PyObject_HEAD
    Cols c;
    Buf pend;    /* bytes not parsed yet: the tail of the last chunk (a cut unit) */
    Buf members; /* `"key": value` texts of the top-level members other than traceEvents, ','-joined */
    int state, seen_events, invalid, finished;
    Py_ssize_t need; /* parse `pend` again once it holds this many bytes (a cut unit: twice its size) */
} Scanner;

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
            p = skip_ws(p, end);
            if (p >= end) goto more;
            if (*p != '{') return 1;
            unit = p;
            gil_drop(c);
            P q;
            int rc = parse_event(c, p, end, &q);
            if (rc < 0) return -1;
            if (rc > 0) {
                if (final) return 1;
                /* a whole, well-formed object refused: invalid for good; else it may be cut */
                P whole = skip_value(p, end, 1);
                if (whole && whole < end) return 1;
                goto cut;
            }
            p = q;
            s->state = S_EV_SEP;
            break;
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
    PyObject *keep = Py_None;
    if (!PyArg_ParseTuple(args, "|O", &keep)) return NULL;
    if (keep != Py_None && !PyCallable_Check(keep)) {
        PyErr_SetString(PyExc_TypeError, "keep must be callable or None");
        return NULL;
    }
    Scanner *s = (Scanner *)type->tp_alloc(type, 0);
    if (!s) return NULL;
    Cols *c = &s->c;
    Py_INCREF(keep);
    c->keep = keep;
    c->trip.cap = 256;
    c->trip.s = calloc(c->trip.cap, sizeof(TSlot));
    c->pid_strs = PyDict_New(); c->tid_strs = PyDict_New(); c->id_strs = PyDict_New();
    if (!c->trip.s || !c->pid_strs || !c->tid_strs || !c->id_strs || !intern_init(&c->ph) ||
        !intern_init(&c->cat) || !intern_init(&c->name)) {
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
        !set_item(result, "ts", buf_block(&c->ts)) || !set_item(result, "dur", buf_block(&c->dur)) ||
        !set_item(result, "id", buf_block(&c->id)) || !set_item(result, "id_present", buf_block(&c->idmask)) ||
        !set_item(result, "id_strs", c->id_strs) || !set_item(result, "args_start", buf_block(&c->astart)) ||
        !set_item(result, "args_len", buf_block(&c->alen)) || !set_item(result, "args_group", buf_block(&c->agroup))) {
        Py_DECREF(result);
        return NULL;
    }
    PyObject *groups = PyList_New(N_GROUPS);
    if (!groups) { Py_DECREF(result); return NULL; }
    for (int g = 0; g < N_GROUPS; g++) {
        PyObject *b = buf_block(&c->args[g]);
        if (!b) { Py_DECREF(groups); Py_DECREF(result); return NULL; }
        PyList_SET_ITEM(groups, g, b);
    }
    if (!set_item(result, "args", groups)) { Py_DECREF(result); return NULL; }
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
    .tp_name = "traceview._scan.Scanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_dealloc = (destructor)scanner_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Scanner(keep=None): scan a Kineto document fed in chunks (see the module docstring)",
    .tp_methods = scanner_methods,
    .tp_new = scanner_new,
};

/* ------------------------------------------------------------------ args_columns() */

/* JSON type bits for validation */
enum { T_NULL = 1, T_INT = 2, T_FLOAT = 4, T_STR = 8, T_ARR_INT = 16, T_ARR = 32, T_OBJ = 64, T_BOOL = 128 };
/* output modes */
enum { MODE_CHECK = 0, MODE_INT = 1, MODE_RAW = 2, MODE_DIM3 = 3, MODE_OBJ = 4 };

typedef struct {
    const char *key;
    Py_ssize_t klen;
    int types, mode;
    Buf v[3], m[3]; /* int / dim3 outputs */
    Buf raw;        /* MODE_RAW */
    PyObject *list; /* MODE_OBJ */
} Field;

static int value_type(P p, P end, P *after, int depth, int want_arr_int) {
    int is_int;
    switch (*p) {
    case '"': { int esc; *after = scan_string(p, end, &esc); return T_STR; }
    case '{': *after = skip_container(p, end, depth); return T_OBJ;
    case '[': {
        *after = skip_container(p, end, depth);
        if (!*after || !want_arr_int) return T_ARR;
        /* an array of integer literals only? */
        P q = skip_ws(p + 1, end);
        if (*q == ']') return T_ARR_INT | T_ARR;
        for (;;) {
            P r = scan_number(q, end, &is_int);
            if (!r || !is_int) return T_ARR;
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

/* [x, y, z] of int | null: 0 ok, 1 invalid */
static int parse_dim3(P p, P end, int64_t v[3], unsigned char m[3]) {
    v[0] = v[1] = v[2] = 0;
    m[0] = m[1] = m[2] = 0;
    p = skip_ws(p + 1, end);
    if (p < end && *p == ']') return 0;
    for (int i = 0;; i++) {
        FAIL_IF(i >= 3 || p >= end);
        if (*p == 'n') {
            FAIL_IF(!skip_literal(p, end, "null", 4));
            p += 4;
        } else {
            int is_int;
            P q = scan_number(p, end, &is_int);
            FAIL_IF(!q || !is_int || !parse_int64(p, q, &v[i]));
            m[i] = 1;
            p = q;
        }
        p = skip_ws(p, end);
        FAIL_IF(p >= end);
        if (*p == ']') return 0;
        FAIL_IF(*p != ',');
        p = skip_ws(p + 1, end);
    }
}

static int get_i64_buffer(PyObject *o, Py_buffer *v, const char *what) {
    if (PyObject_GetBuffer(o, v, PyBUF_SIMPLE) < 0) return 0;
    if (v->len % 8) {
        PyBuffer_Release(v);
        PyErr_Format(PyExc_ValueError, "%s: expected an int64 buffer", what);
        return 0;
    }
    return 1;
}

/* field lookup by key: a 64-bucket hash on (length, first byte, last byte) */
typedef struct { int head[64], next[64]; } Lookup;

static inline unsigned key_bucket(const unsigned char *k, Py_ssize_t n) {
    return (unsigned)(n * 7 + k[0] * 3 + k[n - 1]) & 63;
}

static void lookup_init(Lookup *lk, Field *f, Py_ssize_t nf) {
    for (int i = 0; i < 64; i++) lk->head[i] = -1;
    for (Py_ssize_t i = nf - 1; i >= 0; i--) {
        unsigned b = key_bucket((const unsigned char *)f[i].key, f[i].klen);
        lk->next[i] = lk->head[b];
        lk->head[b] = (int)i;
    }
}

static inline Py_ssize_t find_field(const Lookup *lk, Field *f, P ks, Py_ssize_t kl) {
    if (kl <= 0) return -1;
    for (int i = lk->head[key_bucket(ks, kl)]; i >= 0; i = lk->next[i])
        if (f[i].klen == kl && memcmp(f[i].key, ks, kl) == 0) return i;
    return -1;
}

/* one args object: 0 ok, 1 invalid, -1 error */
static int parse_args(P p, P end, Field *f, Py_ssize_t nf, const Lookup *lk) {
    uint64_t seen = 0;
    int64_t iv;
    unsigned char one = 1, zero = 0;
    FAIL_IF(p >= end || *p != '{');
    p = skip_ws(p + 1, end);
    FAIL_IF(p >= end);
    if (*p != '}') {
        for (;;) {
            int esc;
            FAIL_IF(p >= end || *p != '"');
            P ks = p + 1;
            P q = scan_string(p, end, &esc);
            FAIL_IF(!q);
            Py_ssize_t kl = (q - 1) - ks;
            p = skip_ws(q, end);
            FAIL_IF(p >= end || *p != ':');
            p = skip_ws(p + 1, end);
            FAIL_IF(p >= end);
            FAIL_IF(esc);
            Py_ssize_t k = find_field(lk, f, ks, kl);
            P ve;
            if (k < 0) {
                ve = skip_value(p, end, 2);
                FAIL_IF(!ve);
            } else {
                Field *fd = &f[k];
                FAIL_IF(seen & (1ULL << k));
                seen |= 1ULL << k;
                int t = value_type(p, end, &ve, 2, (fd->types & T_ARR_INT) && !(fd->types & T_ARR));
                FAIL_IF(!ve || !(t & fd->types));
                switch (fd->mode) {
                case MODE_INT:
                    if (t == T_NULL) {
                        iv = 0;
                        if (!buf_put(&fd->v[0], &iv, 8) || !buf_put(&fd->m[0], &zero, 1)) return -1;
                        break;
                    }
                    FAIL_IF(t != T_INT || !parse_int64(p, ve, &iv));
                    if (!buf_put(&fd->v[0], &iv, 8) || !buf_put(&fd->m[0], &one, 1)) return -1;
                    break;
                case MODE_CHECK:
                    if (t == T_INT) FAIL_IF(!parse_int64(p, ve, &iv));
                    break;
                case MODE_RAW:
                    if (!buf_put(&fd->raw, p, ve - p)) return -1;
                    break;
                case MODE_DIM3: {
                    int64_t v[3];
                    unsigned char m[3];
                    FAIL_IF(t == T_NULL);
                    FAIL_IF(parse_dim3(p, ve, v, m));
                    for (int i = 0; i < 3; i++)
                        if (!buf_put(&fd->v[i], &v[i], 8) || !buf_put(&fd->m[i], &m[i], 1)) return -1;
                    break;
                }
                case MODE_OBJ: {
                    PyObject *b = PyBytes_FromStringAndSize((const char *)p, ve - p);
                    if (!b) return -1;
                    Py_ssize_t last = PyList_GET_SIZE(fd->list) - 1;
                    PyList_SetItem(fd->list, last, b); /* steals; replaces the None placeholder */
                    break;
                }
                }
            }
            p = skip_ws(ve, end);
            FAIL_IF(p >= end);
            if (*p == ',') { p = skip_ws(p + 1, end); continue; }
            if (*p == '}') break;
            return 1;
        }
    }
    /* fields absent from this object */
    for (Py_ssize_t i = 0; i < nf; i++) {
        if (seen & (1ULL << i)) continue;
        int64_t z = 0;
        switch (f[i].mode) {
        case MODE_INT:
            if (!buf_put(&f[i].v[0], &z, 8) || !buf_put(&f[i].m[0], &zero, 1)) return -1;
            break;
        case MODE_DIM3:
            for (int j = 0; j < 3; j++)
                if (!buf_put(&f[i].v[j], &z, 8) || !buf_put(&f[i].m[j], &zero, 1)) return -1;
            break;
        default: break;
        }
    }
    return 0;
}

static PyObject *int_pair(Buf *v, Buf *m) {
    PyObject *a = buf_bytes(v), *b = buf_bytes(m);
    if (!a || !b) { Py_XDECREF(a); Py_XDECREF(b); return NULL; }
    PyObject *t = PyTuple_Pack(2, a, b);
    Py_DECREF(a); Py_DECREF(b);
    return t;
}

static PyObject *args_columns(PyObject *self, PyObject *args) {
    PyObject *data_o, *starts_o, *ends_o, *rows_o, *fields_o;
    if (!PyArg_ParseTuple(args, "OOOOO!", &data_o, &starts_o, &ends_o, &rows_o, &PyList_Type, &fields_o))
        return NULL;
    Py_buffer data, st, en, rw;
    int have_rows = rows_o != Py_None;
    if (PyObject_GetBuffer(data_o, &data, PyBUF_SIMPLE) < 0) return NULL;
    if (!get_i64_buffer(starts_o, &st, "starts")) { PyBuffer_Release(&data); return NULL; }
    if (!get_i64_buffer(ends_o, &en, "lens")) { PyBuffer_Release(&data); PyBuffer_Release(&st); return NULL; }
    if (have_rows && !get_i64_buffer(rows_o, &rw, "rows")) {
        PyBuffer_Release(&data); PyBuffer_Release(&st); PyBuffer_Release(&en);
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t nf = PyList_GET_SIZE(fields_o), nev = st.len / 8;
    Field *f = calloc(nf ? nf : 1, sizeof(Field));
    if (!f) { PyErr_NoMemory(); goto done; }
    if (nf > 64 || en.len != st.len) { PyErr_SetString(PyExc_ValueError, "bad fields or spans"); goto done; }
    for (Py_ssize_t i = 0; i < nf; i++) {
        PyObject *t = PyList_GET_ITEM(fields_o, i);
        if (!PyArg_ParseTuple(t, "y#ii", &f[i].key, &f[i].klen, &f[i].types, &f[i].mode)) goto done;
        if (f[i].klen == 0 || f[i].mode < 0 || f[i].mode > MODE_OBJ) {
            PyErr_SetString(PyExc_ValueError, "bad field");
            goto done;
        }
    }
    Lookup lk;
    lookup_init(&lk, f, nf);
    const int64_t *S = st.buf, *E = en.buf, *R = have_rows ? rw.buf : NULL;
    Py_ssize_t n = have_rows ? rw.len / 8 : nev;
    P base = data.buf, end = base + data.len;
    for (Py_ssize_t i = 0; i < nf; i++)
        if (f[i].mode == MODE_OBJ && !(f[i].list = PyList_New(0))) goto done;
    int invalid = 0;
    for (Py_ssize_t j = 0; j < n && !invalid; j++) {
        int64_t r = R ? R[j] : j;
        if (r < 0 || r >= nev) { PyErr_SetString(PyExc_IndexError, "row out of range"); goto done; }
        int64_t s = S[r], e = S[r] + E[r]; /* E: lengths */
        if (s < 0 || e > data.len) { PyErr_SetString(PyExc_ValueError, "args of this row were not kept"); goto done; }
        if (s >= e) { invalid = 1; break; } /* no args object: msgspec's business */
        for (Py_ssize_t i = 0; i < nf; i++) {
            if (f[i].mode == MODE_RAW && j && !buf_put(&f[i].raw, "\x1f", 1)) goto done;
            if (f[i].mode == MODE_OBJ && PyList_Append(f[i].list, Py_None) < 0) goto done;
        }
        int rc = parse_args(base + s, base + e, f, nf, &lk);
        if (rc < 0) goto done;
        if (rc > 0) invalid = 1;
        (void)end;
    }
    if (invalid) { result = Py_None; Py_INCREF(result); goto done; }
    result = PyList_New(nf);
    if (!result) goto done;
    for (Py_ssize_t i = 0; i < nf; i++) {
        PyObject *o = NULL;
        switch (f[i].mode) {
        case MODE_CHECK: o = Py_None; Py_INCREF(o); break;
        case MODE_INT: o = int_pair(&f[i].v[0], &f[i].m[0]); break;
        case MODE_RAW: o = buf_bytes(&f[i].raw); break;
        case MODE_DIM3: {
            PyObject *a = int_pair(&f[i].v[0], &f[i].m[0]), *b = int_pair(&f[i].v[1], &f[i].m[1]),
                     *c = int_pair(&f[i].v[2], &f[i].m[2]);
            if (a && b && c) o = PyTuple_Pack(3, a, b, c);
            Py_XDECREF(a); Py_XDECREF(b); Py_XDECREF(c);
            break;
        }
        case MODE_OBJ: o = f[i].list; Py_INCREF(o); break;
        }
        if (!o) { Py_CLEAR(result); goto done; }
        PyList_SET_ITEM(result, i, o);
    }
done:
    if (f) {
        for (Py_ssize_t i = 0; i < nf; i++) {
            for (int j = 0; j < 3; j++) { buf_free(&f[i].v[j]); buf_free(&f[i].m[j]); }
            buf_free(&f[i].raw);
            Py_XDECREF(f[i].list);
        }
        free(f);
    }
    PyBuffer_Release(&data); PyBuffer_Release(&st); PyBuffer_Release(&en);
    if (have_rows) PyBuffer_Release(&rw);
    if (!result && !PyErr_Occurred()) PyErr_NoMemory();
    return result;
}

static PyMethodDef methods[] = {
    {"args_columns", args_columns, METH_VARARGS,
     "args_columns(data, starts, lens, rows, fields) -> list | None: top-level args fields as columns"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scan", "Columnar Kineto trace scanner", -1, methods};

PyMODINIT_FUNC PyInit__scan(void) {
    if (PyType_Ready(&BlockType) < 0 || PyType_Ready(&ScannerType) < 0) return NULL;
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

/* traceview._scan: one-pass columnar scanner for Kineto chrome-trace JSON.
 *
 * scan(data) -> dict | None
 *     Walks the top-level object once. The `traceEvents` array is turned into columns
 *     (dictionary-encoded ph/cat/name, int64 pid/tid/id, float64 ts/dur, int64 args spans);
 *     every other top-level member is returned as a (start, end) byte span of its
 *     `"key": value` text for the caller to decode.
 * args_columns(data, starts, ends, rows, fields) -> list | None
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

typedef struct { char *data; Py_ssize_t len, cap; } Buf;

static int buf_reserve(Buf *b, Py_ssize_t extra) {
    if (b->len + extra <= b->cap) return 1;
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) cap *= 2;
    char *d = PyMem_Realloc(b->data, cap);
    if (!d) { PyErr_NoMemory(); return 0; }
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
static void buf_free(Buf *b) { PyMem_Free(b->data); b->data = NULL; b->len = b->cap = 0; }

/* ------------------------------------------------------------------ string dictionary */

typedef struct { uint64_t h; P key; Py_ssize_t len; uint32_t code; int used; } Slot;
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
    t->slots = PyMem_Calloc(t->cap, sizeof(Slot));
    t->uniques = PyList_New(0);
    if (!t->slots || !t->uniques) { PyErr_NoMemory(); return 0; }
    return 1;
}

static void intern_free(Intern *t) {
    PyMem_Free(t->slots);
    t->slots = NULL;
    Py_CLEAR(t->uniques);
}

static int intern_grow(Intern *t) {
    size_t cap = t->cap * 2;
    Slot *s = PyMem_Calloc(cap, sizeof(Slot));
    if (!s) { PyErr_NoMemory(); return 0; }
    for (size_t i = 0; i < t->cap; i++) {
        if (!t->slots[i].used) continue;
        size_t j = t->slots[i].h & (cap - 1);
        while (s[j].used) j = (j + 1) & (cap - 1);
        s[j] = t->slots[i];
    }
    PyMem_Free(t->slots);
    t->slots = s;
    t->cap = cap;
    return 1;
}

/* code of the string body [s, e): -1 on error (exception set), -2 on invalid text */
static int64_t intern_code(Intern *t, P s, P e, int esc) {
    Py_ssize_t n = e - s;
    uint64_t h = hash_bytes(s, n);
    size_t j = h & (t->cap - 1);
    while (t->slots[j].used) {
        Slot *sl = &t->slots[j];
        if (sl->h == h && sl->len == n && memcmp(sl->key, s, n) == 0) return sl->code;
        j = (j + 1) & (t->cap - 1);
    }
    PyObject *str = make_str(s, e, esc);
    if (!str) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) { PyErr_Clear(); return -2; }
        return -1;
    }
    int rc = PyList_Append(t->uniques, str);
    Py_DECREF(str);
    if (rc < 0) return -1;
    Slot *sl = &t->slots[j];
    sl->h = h; sl->key = s; sl->len = n; sl->code = (uint32_t)t->count; sl->used = 1;
    t->count++;
    if (t->count * 2 > t->cap && !intern_grow(t)) return -1;
    return (int64_t)(t->count - 1);
}

/* ------------------------------------------------------------------ scan() */

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

typedef struct {
    P base;
    Intern ph, cat, name;
    Buf c_ph, c_cat, c_name, pid, tid, ts, dur, id, idmask, astart, aend;
    PyObject *pid_strs, *tid_strs, *id_strs;
    Py_ssize_t n;
} Cols;

/* 0 ok, 1 invalid input, -1 Python error */
#define FAIL_IF(c) do { if (c) return 1; } while (0)

static int put_code(Intern *t, Buf *b, P s, P e, int esc) {
    int64_t c = intern_code(t, s, e, esc);
    if (c == -1) return -1;
    if (c == -2) return 1;
    uint32_t u = (uint32_t)c;
    return buf_put(b, &u, 4) ? 0 : -1;
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
    int64_t pid = 0, tid = 0, id = 0, as = 0, ae = 0;
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
                FAIL_IF(!parse_double(p, qe, k == K_TS ? &ts : &dur));
                p = qe;
                break;
            }
            case K_ARGS: {
                FAIL_IF(*p != '{');
                P qe = skip_container(p, end, 1);
                FAIL_IF(!qe);
                as = p - c->base;
                ae = qe - c->base;
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
    if ((rc = put_code(&c->ph, &c->c_ph, str_s[0], str_e[0], str_esc[0]))) return rc;
    if ((rc = put_code(&c->cat, &c->c_cat, str_s[1], str_e[1], str_esc[1]))) return rc;
    if ((rc = put_code(&c->name, &c->c_name, str_s[2], str_e[2], str_esc[2]))) return rc;
    if (!buf_put(&c->pid, &pid, 8) || !buf_put(&c->tid, &tid, 8) || !buf_put(&c->ts, &ts, 8) ||
        !buf_put(&c->dur, &dur, 8) || !buf_put(&c->id, &id, 8) || !buf_put(&c->idmask, &idp, 1) ||
        !buf_put(&c->astart, &as, 8) || !buf_put(&c->aend, &ae, 8))
        return -1;
    c->n++;
    return 0;
}

static int parse_events(Cols *c, P p, P end, P *after) {
    /* p at '[' */
    p = skip_ws(p + 1, end);
    FAIL_IF(p >= end);
    if (*p == ']') { *after = p + 1; return 0; }
    for (;;) {
        FAIL_IF(p >= end || *p != '{');
        int rc = parse_event(c, p, end, &p);
        if (rc) return rc;
        p = skip_ws(p, end);
        FAIL_IF(p >= end);
        if (*p == ',') { p = skip_ws(p + 1, end); continue; }
        if (*p == ']') { *after = p + 1; return 0; }
        return 1;
    }
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
                   &c->idmask, &c->astart, &c->aend};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) buf_free(bufs[i]);
    Py_CLEAR(c->pid_strs); Py_CLEAR(c->tid_strs); Py_CLEAR(c->id_strs);
}

static PyObject *scan(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    P base = view.buf, end = base + view.len, p;
    Cols c;
    memset(&c, 0, sizeof(c));
    c.base = base;
    PyObject *members = NULL, *result = NULL;
    int rc = 1, seen_events = 0;
    if (!intern_init(&c.ph) || !intern_init(&c.cat) || !intern_init(&c.name)) goto error;
    c.pid_strs = PyDict_New(); c.tid_strs = PyDict_New(); c.id_strs = PyDict_New();
    members = PyList_New(0);
    if (!c.pid_strs || !c.tid_strs || !c.id_strs || !members) goto error;

    Py_ssize_t guess = view.len / 250 + 16;
    if (!buf_reserve(&c.pid, guess * 8) || !buf_reserve(&c.tid, guess * 8) || !buf_reserve(&c.ts, guess * 8) ||
        !buf_reserve(&c.dur, guess * 8) || !buf_reserve(&c.id, guess * 8) || !buf_reserve(&c.idmask, guess) ||
        !buf_reserve(&c.astart, guess * 8) || !buf_reserve(&c.aend, guess * 8) ||
        !buf_reserve(&c.c_ph, guess * 4) || !buf_reserve(&c.c_cat, guess * 4) || !buf_reserve(&c.c_name, guess * 4))
        goto error;

    p = skip_ws(base, end);
    if (p >= end || *p != '{') goto invalid;
    p = skip_ws(p + 1, end);
    if (p < end && *p == '}') goto invalid; /* no traceEvents */
    for (;;) {
        int esc;
        if (p >= end || *p != '"') goto invalid;
        P ks = p;
        P q = scan_string(p, end, &esc);
        if (!q || esc) goto invalid;
        p = skip_ws(q, end);
        if (p >= end || *p != ':') goto invalid;
        p = skip_ws(p + 1, end);
        if (p >= end) goto invalid;
        if (q - ks == 13 && memcmp(ks + 1, "traceEvents", 11) == 0) {
            if (seen_events || *p != '[') goto invalid;
            seen_events = 1;
            rc = parse_events(&c, p, end, &p);
            if (rc < 0) goto error;
            if (rc > 0) goto invalid;
        } else {
            P ve = skip_value(p, end, 1);
            if (!ve) goto invalid;
            PyObject *span = Py_BuildValue("(nn)", (Py_ssize_t)(ks - base), (Py_ssize_t)(ve - base));
            if (!span) goto error;
            int r = PyList_Append(members, span);
            Py_DECREF(span);
            if (r < 0) goto error;
            p = ve;
        }
        p = skip_ws(p, end);
        if (p >= end) goto invalid;
        if (*p == ',') { p = skip_ws(p + 1, end); continue; }
        if (*p == '}') { p++; break; }
        goto invalid;
    }
    if (skip_ws(p, end) != end || !seen_events) goto invalid;

    result = PyDict_New();
    if (!result) goto error;
    if (!set_item(result, "n", PyLong_FromSsize_t(c.n))) goto error;
    Py_INCREF(members);
    if (!set_item(result, "members", members)) goto error;
    Py_INCREF(c.ph.uniques); Py_INCREF(c.cat.uniques); Py_INCREF(c.name.uniques);
    Py_INCREF(c.pid_strs); Py_INCREF(c.tid_strs); Py_INCREF(c.id_strs);
    if (!set_item(result, "ph_values", c.ph.uniques) || !set_item(result, "cat_values", c.cat.uniques) ||
        !set_item(result, "name_values", c.name.uniques) || !set_item(result, "ph", buf_bytes(&c.c_ph)) ||
        !set_item(result, "cat", buf_bytes(&c.c_cat)) || !set_item(result, "name", buf_bytes(&c.c_name)) ||
        !set_item(result, "pid", buf_bytes(&c.pid)) || !set_item(result, "tid", buf_bytes(&c.tid)) ||
        !set_item(result, "pid_strs", c.pid_strs) || !set_item(result, "tid_strs", c.tid_strs) ||
        !set_item(result, "ts", buf_bytes(&c.ts)) || !set_item(result, "dur", buf_bytes(&c.dur)) ||
        !set_item(result, "id", buf_bytes(&c.id)) || !set_item(result, "id_present", buf_bytes(&c.idmask)) ||
        !set_item(result, "id_strs", c.id_strs) || !set_item(result, "args_start", buf_bytes(&c.astart)) ||
        !set_item(result, "args_end", buf_bytes(&c.aend)))
        goto error;
    cols_free(&c);
    Py_DECREF(members);
    PyBuffer_Release(&view);
    return result;

invalid:
    cols_free(&c);
    Py_XDECREF(members);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
error:
    cols_free(&c);
    Py_XDECREF(members);
    Py_XDECREF(result);
    PyBuffer_Release(&view);
    return NULL;
}

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
    if (!get_i64_buffer(ends_o, &en, "ends")) { PyBuffer_Release(&data); PyBuffer_Release(&st); return NULL; }
    if (have_rows && !get_i64_buffer(rows_o, &rw, "rows")) {
        PyBuffer_Release(&data); PyBuffer_Release(&st); PyBuffer_Release(&en);
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t nf = PyList_GET_SIZE(fields_o), nev = st.len / 8;
    Field *f = PyMem_Calloc(nf ? nf : 1, sizeof(Field));
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
        int64_t s = S[r], e = E[r];
        if (s >= e || s < 0 || e > data.len) { invalid = 1; break; } /* no args object: msgspec's business */
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
        PyMem_Free(f);
    }
    PyBuffer_Release(&data); PyBuffer_Release(&st); PyBuffer_Release(&en);
    if (have_rows) PyBuffer_Release(&rw);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_O, "scan(data) -> dict | None: columns of a Kineto trace's traceEvents"},
    {"args_columns", args_columns, METH_VARARGS,
     "args_columns(data, starts, ends, rows, fields) -> list | None: top-level args fields as columns"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scan", "Columnar Kineto trace scanner", -1, methods};

PyMODINIT_FUNC PyInit__scan(void) { return PyModule_Create(&module); }

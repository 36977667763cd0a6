/* The file load's typing of the bulk tx kinds, a block at a time, in C (indexer.load.typed.native explains when and why).
 *
 * type_block(block, first_line, resume_after, sid, fallback) walks the block's lines. A line it can take (one of
 * the configured kinds, every field present with its plain JSON type and in range, nothing else on the line) becomes
 * its COPY row in that kind's buffer, and the kind's batch facts (scopes, highest slot and key range per escrow,
 * whether a key repeats) are kept here too, so such a line costs no Python object of its own. Any other line is
 * passed to fallback(number, raw), the Python paths, which decide everything about it and return whether it counted
 * (False for a blank line), or, for a row of one of these kinds, (kind, copy_line, key, slot): that row goes into the
 * kind's buffer here, in line order, with its facts. Declining is always safe: the rules below only ever take a line the Python paths would
 * render the same (tests/load/test_typer.py holds them to it).
 *
 * Taken only: no backslash on the line (so no string needs COPY escaping), only ASCII bytes (string lengths are byte
 * counts), no control byte inside a string, integers as plain JSON integers without sign tricks (no "-0", no
 * fraction or exponent, at most 19 digits), no null, no nested value, no repeated key, no decimal string for a
 * number (the Python paths take those), and for a kind with a refusal check, no 0/0 Finish with a payload. A key the
 * kind does not know (a newer protocol's scalar: a v5+ Finish carries served_hash) is kept as the Python paths keep
 * it, in `extra`: the JSON object of the unknown members in line order, as orjson writes them. Taken for a string,
 * true, false or an integer within the signed 64-bit range (orjson writes each back exactly as the line spells it,
 * given no backslash and ASCII only); any other unknown value is declined.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum { T_ID = 1, T_U64, T_I64, T_U32, T_BOOL, T_STR, T_HEX };
enum { V_STR = 1, V_NUM, V_TRUE, V_FALSE };

#define MAX_FIELDS 24
#define MAX_KINDS 8
#define MAX_MEMBERS 32
#define MAX_I63 UINT64_C(9223372036854775807)
#define MAX_I31 UINT64_C(2147483647)

typedef struct {
    char name[64];
    Py_ssize_t name_len;
    int type;
    int required;
    Py_ssize_t max_len;    /* a string's bound in bytes as written (0: none); past it the line is declined */
} FieldSpec;

typedef struct {
    char name[32];
    Py_ssize_t name_len;
    int n_fields;
    FieldSpec fields[MAX_FIELDS];
    int scope_at;          /* field holding the escrow id (the scope) */
    int range_at;          /* second key field (an integer): its range per escrow is kept */
    int third_key_at;      /* third key field or -1 */
    int slot_at;           /* slot field or -1 */
    int refusal_in, refusal_out, refusal_payload;  /* finish: a 0/0 with a payload is declined; -1 if none */
} KindSpec;

static KindSpec kinds[MAX_KINDS];
static int n_kinds = 0;

typedef struct {
    const char *key; Py_ssize_t key_len;
    int vtype;
    const char *val; Py_ssize_t val_len;   /* string contents, or the number's text with its sign */
    uint64_t mag; int neg;
} Member;

/* ---- growable buffer ---- */
typedef struct { char *p; Py_ssize_t len, cap; } Buf;

static int buf_reserve(Buf *b, Py_ssize_t extra) {
    if (b->len + extra <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 1 << 16;
    while (cap < b->len + extra) cap *= 2;
    char *p = PyMem_Realloc(b->p, cap);
    if (!p) { PyErr_NoMemory(); return -1; }
    b->p = p; b->cap = cap;
    return 0;
}

/* Append n bytes (room reserved by the caller). */
static inline void put(Buf *b, const char *s, Py_ssize_t n) {
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

/* ---- a set of 64-bit key hashes (open addressing); 0 marks an empty slot ---- */
typedef struct { uint64_t *slots; Py_ssize_t cap, used; } HashSet;

static uint64_t mix64(uint64_t x) {  /* splitmix64's finaliser */
    x ^= x >> 30; x *= UINT64_C(0xbf58476d1ce4e5b9);
    x ^= x >> 27; x *= UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

/* 1: added, 0: present already, -1: error */
static int hs_add(HashSet *s, uint64_t h) {
    if (h == 0) h = 1;
    if ((s->used + 1) * 2 > s->cap) {
        Py_ssize_t cap = s->cap ? s->cap * 2 : 1 << 12;
        uint64_t *slots = PyMem_Calloc(cap, sizeof(uint64_t));
        if (!slots) { PyErr_NoMemory(); return -1; }
        for (Py_ssize_t i = 0; i < s->cap; i++) {
            uint64_t v = s->slots[i];
            if (!v) continue;
            Py_ssize_t j = (Py_ssize_t)(v & (uint64_t)(cap - 1));
            while (slots[j]) j = (j + 1) & (cap - 1);
            slots[j] = v;
        }
        PyMem_Free(s->slots);
        s->slots = slots; s->cap = cap;
    }
    Py_ssize_t j = (Py_ssize_t)(h & (uint64_t)(s->cap - 1));
    while (s->slots[j]) {
        if (s->slots[j] == h) return 0;
        j = (j + 1) & (s->cap - 1);
    }
    s->slots[j] = h; s->used++;
    return 1;
}

/* ---- one kind's batch ---- */
typedef struct {
    Buf copy;
    Py_ssize_t count;
    PyObject *scopes, *slot_max, *ranges;  /* set, dict, dict */
    HashSet keys;
    int repeated;
    /* the current run of one escrow: flushed into the dicts when the escrow changes */
    const char *run_esc; Py_ssize_t run_len;
    uint64_t run_lo, run_hi; int64_t run_slot;  /* run_slot -1: no slot seen */
} KindBatch;

static int flush_run(KindBatch *kb) {
    if (!kb->run_esc) return 0;
    PyObject *esc = PyUnicode_DecodeUTF8(kb->run_esc, kb->run_len, NULL);
    if (!esc) return -1;
    int rc = -1;
    if (PySet_Add(kb->scopes, esc) < 0) goto done;
    PyObject *was = PyDict_GetItemWithError(kb->ranges, esc);  /* borrowed */
    if (!was && PyErr_Occurred()) goto done;
    uint64_t lo = kb->run_lo, hi = kb->run_hi;
    if (was) {
        uint64_t a = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(was, 0));
        uint64_t b = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(was, 1));
        if (PyErr_Occurred()) goto done;
        if (a < lo) lo = a;
        if (b > hi) hi = b;
    }
    PyObject *range = Py_BuildValue("(KK)", (unsigned long long)lo, (unsigned long long)hi);
    if (!range) goto done;
    int set = PyDict_SetItem(kb->ranges, esc, range);
    Py_DECREF(range);
    if (set < 0) goto done;
    if (kb->run_slot >= 0) {
        PyObject *top = PyDict_GetItemWithError(kb->slot_max, esc);
        if (!top && PyErr_Occurred()) goto done;
        long long slot = kb->run_slot;
        if (top) {
            long long t = PyLong_AsLongLong(top);
            if (t == -1 && PyErr_Occurred()) goto done;
            if (t > slot) slot = t;
        }
        PyObject *v = PyLong_FromLongLong(slot);
        if (!v) goto done;
        set = PyDict_SetItem(kb->slot_max, esc, v);
        Py_DECREF(v);
        if (set < 0) goto done;
    }
    rc = 0;
done:
    Py_DECREF(esc);
    kb->run_esc = NULL;
    return rc;
}

/* ---- byte tests a word at a time (the lines are hundreds of bytes; a byte loop per test cost ~1 µs a line) ---- */
#define ONES UINT64_C(0x0101010101010101)
#define HIGHS UINT64_C(0x8080808080808080)

static inline uint64_t load8(const char *p) { uint64_t x; memcpy(&x, p, 8); return x; }

/* Some byte is >= 0x80. */
static int any_high(const char *p, Py_ssize_t n) {
    uint64_t acc = 0;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) acc |= load8(p + i);
    for (; i < n; i++) acc |= (unsigned char)p[i];
    return (acc & HIGHS) != 0;
}

/* Some byte is < 0x20 (the bytes are all < 0x80: any_high was false). */
static int any_control(const char *p, Py_ssize_t n) {
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8)
        if ((load8(p + i) - 0x20 * ONES) & HIGHS) return 1;
    for (; i < n; i++)
        if ((unsigned char)p[i] < 0x20) return 1;
    return 0;
}

/* The closing quote of a string whose contents start at p (no backslash on the line), or NULL; a control byte
 * inside it (not JSON) also gives NULL. */
static inline const char *string_end(const char *p, const char *end) {
    const char *q = memchr(p, '"', end - p);
    return q && !any_control(p, q - p) ? q : NULL;
}

static char HEX_LOWER[256];  /* a hex digit's lowercase form, 0 for any other byte */

static char *put_int(char *out, long long v) {
    char tmp[24];
    int n = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do { tmp[n++] = (char)('0' + u % 10); u /= 10; } while (u);
    if (v < 0) *out++ = '-';
    while (n) *out++ = tmp[--n];
    return out;
}

static int keep_facts(KindBatch *kb, const char *esc, Py_ssize_t esc_len, uint64_t second, int64_t third,
                      int64_t slot);

/* ---- the line scanner ---- */
static inline const char *skip_ws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

/* Members of a flat object, or -1 to decline. */
static int scan(const char *p, const char *end, Member *m) {
    int n = 0;
    p = skip_ws(p, end);
    if (p >= end || *p != '{') return -1;
    p = skip_ws(p + 1, end);
    if (p < end && *p == '}') return -1;  /* {} is no record of ours */
    for (;;) {
        if (n == MAX_MEMBERS || p >= end || *p != '"') return -1;
        const char *k = ++p;
        if (!(p = string_end(p, end))) return -1;
        m[n].key = k; m[n].key_len = p - k;
        p = skip_ws(p + 1, end);
        if (p >= end || *p != ':') return -1;
        p = skip_ws(p + 1, end);
        if (p >= end) return -1;
        char c = *p;
        if (c == '"') {
            const char *v = ++p;
            if (!(p = string_end(p, end))) return -1;
            m[n].vtype = V_STR; m[n].val = v; m[n].val_len = p - v;
            p++;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            const char *v = p;
            int neg = 0;
            if (c == '-') { neg = 1; p++; }
            const char *d = p;
            uint64_t mag = 0;
            while (p < end && *p >= '0' && *p <= '9') {
                if (p - d == 19) return -1;  /* beyond 19 digits: out of every range here */
                mag = mag * 10 + (uint64_t)(*p - '0');
                p++;
            }
            Py_ssize_t digits = p - d;
            if (digits == 0) return -1;
            if (digits > 1 && *d == '0') return -1;  /* a leading zero: not JSON */
            if (p < end && (*p == '.' || *p == 'e' || *p == 'E')) return -1;
            if (neg && mag == 0) return -1;  /* -0 */
            m[n].vtype = V_NUM; m[n].val = v; m[n].val_len = p - v; m[n].mag = mag; m[n].neg = neg;
        } else if (c == 't' && end - p >= 4 && memcmp(p, "true", 4) == 0) {
            m[n].vtype = V_TRUE; p += 4;
        } else if (c == 'f' && end - p >= 5 && memcmp(p, "false", 5) == 0) {
            m[n].vtype = V_FALSE; p += 5;
        } else {
            return -1;  /* null, an object, an array, or not JSON */
        }
        n++;
        p = skip_ws(p, end);
        if (p >= end) return -1;
        if (*p == ',') { p = skip_ws(p + 1, end); continue; }
        if (*p != '}') return -1;
        p = skip_ws(p + 1, end);
        return p == end ? n : -1;
    }
}

static int is_hex(const char *p, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++)
        if (!HEX_LOWER[(unsigned char)p[i]]) return 0;
    return 1;
}

static int type_ok(const FieldSpec *fs, const Member *v) {
    int type = fs->type;
    if (fs->max_len && v->vtype == V_STR && v->val_len > fs->max_len) return 0;
    switch (type) {
    case T_ID: return v->vtype == V_STR && v->val_len >= 1 && v->val_len <= 128;
    case T_U64: return v->vtype == V_NUM && !v->neg && v->mag <= MAX_I63;
    case T_I64: return v->vtype == V_NUM && v->mag <= MAX_I63;
    case T_U32: return v->vtype == V_NUM && !v->neg && v->mag <= MAX_I31;
    case T_BOOL: return v->vtype == V_TRUE || v->vtype == V_FALSE;
    case T_STR: return v->vtype == V_STR;
    case T_HEX: return v->vtype == V_STR && is_hex(v->val, v->val_len);
    }
    return 0;
}

/* Type and render one line into its kind's batch: 1 taken, 0 declined, -1 error. */
static int take_line(const char *p, Py_ssize_t len, long long number, const char *sid, Py_ssize_t sid_len,
                     KindBatch *batches) {
    if (memchr(p, '\\', len) || any_high(p, len)) return 0;
    Member m[MAX_MEMBERS];
    int n = scan(p, p + len, m);
    if (n < 0) return 0;
    int k = -1, kind_at = -1;
    for (int i = 0; i < n; i++) {
        if (m[i].key_len == 4 && memcmp(m[i].key, "kind", 4) == 0) {
            if (kind_at >= 0 || m[i].vtype != V_STR) return 0;
            kind_at = i;
        }
    }
    if (kind_at < 0) return 0;
    for (int j = 0; j < n_kinds; j++) {
        if (kinds[j].name_len == m[kind_at].val_len && memcmp(kinds[j].name, m[kind_at].val, m[kind_at].val_len) == 0) {
            k = j;
            break;
        }
    }
    if (k < 0) return 0;
    const KindSpec *ks = &kinds[k];
    const Member *at[MAX_FIELDS] = {0};
    const Member *unknown[MAX_MEMBERS];
    int hint = 0, n_unknown = 0;
    for (int i = 0; i < n; i++) {
        if (i == kind_at) continue;
        int f = -1;
        for (int t = 0; t < ks->n_fields; t++) {  /* from the field after the last one found: lines keep an order */
            int g = (hint + t) % ks->n_fields;
            if (ks->fields[g].name_len == m[i].key_len && memcmp(ks->fields[g].name, m[i].key, m[i].key_len) == 0) {
                f = g;
                break;
            }
        }
        if (f < 0) {  /* unknown: kept in extra if plain and not repeated */
            if (m[i].vtype == V_NUM && m[i].mag > MAX_I63) return 0;
            for (int u = 0; u < n_unknown; u++)
                if (unknown[u]->key_len == m[i].key_len && memcmp(unknown[u]->key, m[i].key, m[i].key_len) == 0)
                    return 0;
            unknown[n_unknown++] = &m[i];
            continue;
        }
        if (at[f]) return 0;  /* repeated */
        if (!type_ok(&ks->fields[f], &m[i])) return 0;
        at[f] = &m[i];
        hint = f + 1;
    }
    for (int f = 0; f < ks->n_fields; f++)
        if (ks->fields[f].required && !at[f]) return 0;
    if (ks->refusal_in >= 0 && at[ks->refusal_in]->mag == 0 && at[ks->refusal_out]->mag == 0
        && at[ks->refusal_payload] && at[ks->refusal_payload]->val_len > 0)
        return 0;  /* a refusal: its payload is parsed on the Python side */

    KindBatch *kb = &batches[k];
    Buf *b = &kb->copy;
    /* the known values and the unknown members are disjoint spans of the line: together at most len bytes */
    if (buf_reserve(b, len + 24 + 3 * ks->n_fields + sid_len + 8) < 0) return -1;
    b->len = put_int(b->p + b->len, number) - b->p;
    for (int f = 0; f < ks->n_fields; f++) {
        b->p[b->len++] = '\t';
        const Member *v = at[f];
        if (!v) { b->p[b->len++] = '\\'; b->p[b->len++] = 'N'; continue; }
        switch (v->vtype) {
        case V_TRUE: b->p[b->len++] = 't'; break;
        case V_FALSE: b->p[b->len++] = 'f'; break;
        default:
            if (ks->fields[f].type == T_HEX) {
                for (Py_ssize_t i = 0; i < v->val_len; i++) b->p[b->len++] = HEX_LOWER[(unsigned char)v->val[i]];
            } else {
                put(b, v->val, v->val_len);
            }
        }
    }
    if (!n_unknown) {
        put(b, "\t\\N\t", 4);  /* extra (nothing unknown on the line), then the source id */
    } else {  /* extra: the unknown members as one JSON object, in line order */
        for (int u = 0; u < n_unknown; u++) {
            const Member *v = unknown[u];
            put(b, u ? ",\"" : "\t{\"", u ? 2 : 3);
            put(b, v->key, v->key_len);
            put(b, "\":", 2);
            switch (v->vtype) {
            case V_TRUE: put(b, "true", 4); break;
            case V_FALSE: put(b, "false", 5); break;
            case V_STR: put(b, "\"", 1); put(b, v->val, v->val_len); put(b, "\"", 1); break;
            default: put(b, v->val, v->val_len);  /* a number, as the line spells it */
            }
        }
        put(b, "}\t", 2);
    }
    put(b, sid, sid_len);
    b->p[b->len++] = '\n';
    kb->count++;

    const Member *esc = at[ks->scope_at];
    return keep_facts(kb, esc->val, esc->val_len, at[ks->range_at]->mag,
                      ks->third_key_at >= 0 ? (int64_t)at[ks->third_key_at]->mag : -1,
                      ks->slot_at >= 0 ? (int64_t)at[ks->slot_at]->mag : -1) < 0 ? -1 : 1;
}

/* A row's key and slot into its kind's facts. `esc` must stay valid until the run is flushed. */
static int keep_facts(KindBatch *kb, const char *esc, Py_ssize_t esc_len, uint64_t second, int64_t third,
                      int64_t slot) {
    uint64_t h = UINT64_C(1469598103934665603);  /* FNV-1a over the escrow id, then the integer key fields */
    for (Py_ssize_t i = 0; i < esc_len; i++) h = (h ^ (unsigned char)esc[i]) * UINT64_C(1099511628211);
    h = mix64(h ^ mix64(second + 1));
    if (third >= 0) h = mix64(h ^ mix64((uint64_t)third + 0x9e37));
    int added = hs_add(&kb->keys, h);
    if (added < 0) return -1;
    if (added == 0) kb->repeated = 1;  /* a repeat, or (rarely) two keys with one hash: the slower path decides */
    if (!kb->run_esc || kb->run_len != esc_len || memcmp(kb->run_esc, esc, esc_len) != 0) {
        if (flush_run(kb) < 0) return -1;
        kb->run_esc = esc; kb->run_len = esc_len;
        kb->run_lo = kb->run_hi = second; kb->run_slot = -1;
    } else {
        if (second < kb->run_lo) kb->run_lo = second;
        if (second > kb->run_hi) kb->run_hi = second;
    }
    if (slot > kb->run_slot) kb->run_slot = slot;
    return 0;
}

/* A row the Python paths typed for one of our kinds: (kind, copy_line, key), key = (escrow_id, n[, slot]), slot
 * the kind's slot value or None. Appended in line order, its facts kept like ours. */
static int take_python_row(PyObject *got, KindBatch *batches) {
    const char *kind, *line;
    Py_ssize_t kind_len, line_len;
    PyObject *key, *slot_obj;
    if (!PyArg_ParseTuple(got, "s#s#O!O:fallback row", &kind, &kind_len, &line, &line_len, &PyTuple_Type, &key,
                          &slot_obj))
        return -1;
    int k = -1;
    for (int j = 0; j < n_kinds; j++)
        if (kinds[j].name_len == kind_len && memcmp(kinds[j].name, kind, kind_len) == 0) { k = j; break; }
    Py_ssize_t n_key = PyTuple_GET_SIZE(key);
    if (k < 0 || n_key != (kinds[k].third_key_at >= 0 ? 3 : 2)) {
        PyErr_SetString(PyExc_ValueError, "fallback row of an unknown kind or key");
        return -1;
    }
    KindBatch *kb = &batches[k];
    if (buf_reserve(&kb->copy, line_len) < 0) return -1;
    memcpy(kb->copy.p + kb->copy.len, line, line_len);
    kb->copy.len += line_len;
    kb->count++;
    Py_ssize_t esc_len;
    const char *esc = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(key, 0), &esc_len);  /* lives as long as `got` */
    if (!esc) return -1;
    uint64_t second = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(key, 1));
    int64_t third = n_key == 3 ? PyLong_AsLongLong(PyTuple_GET_ITEM(key, 2)) : -1;
    int64_t slot = slot_obj == Py_None ? -1 : PyLong_AsLongLong(slot_obj);
    if (PyErr_Occurred()) return -1;
    if (flush_run(kb) < 0) return -1;  /* its escrow string is not in the block: a run of its own */
    if (keep_facts(kb, esc, esc_len, second, third, slot) < 0) return -1;
    return flush_run(kb);
}

static int is_blank(const char *p, Py_ssize_t n) {  /* bytes.strip()'s whitespace */
    for (Py_ssize_t i = 0; i < n; i++) {
        char c = p[i];
        if (!(c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\x0b' || c == '\x0c')) return 0;
    }
    return 1;
}

static void free_batches(KindBatch *batches) {
    for (int k = 0; k < n_kinds; k++) {
        PyMem_Free(batches[k].copy.p);
        PyMem_Free(batches[k].keys.slots);
        Py_XDECREF(batches[k].scopes);
        Py_XDECREF(batches[k].slot_max);
        Py_XDECREF(batches[k].ranges);
    }
}

static PyObject *type_block(PyObject *self, PyObject *args) {
    Py_buffer block, sid;
    long long first_line, resume_after;
    PyObject *fallback;
    if (!PyArg_ParseTuple(args, "y*LLy*O:type_block", &block, &first_line, &resume_after, &sid, &fallback))
        return NULL;
    if (n_kinds == 0) {
        PyErr_SetString(PyExc_RuntimeError, "type_block before configure");
        PyBuffer_Release(&block); PyBuffer_Release(&sid);
        return NULL;
    }
    KindBatch batches[MAX_KINDS];
    memset(batches, 0, sizeof batches);
    PyObject *result = NULL;
    for (int k = 0; k < n_kinds; k++) {
        if (!(batches[k].scopes = PySet_New(NULL)) || !(batches[k].slot_max = PyDict_New())
            || !(batches[k].ranges = PyDict_New()))
            goto fail;
    }
    const char *p = block.buf, *end = p + block.len;
    long long number = first_line, count = 0, last = 0, skipped = 0;
    for (;;) {
        const char *nl = memchr(p, '\n', end - p);
        const char *stop = nl ? nl : end;
        Py_ssize_t len = stop - p;
        if (number <= resume_after) {
            if (!is_blank(p, len)) skipped++;
        } else if (len) {  /* an empty line is numbered, never counted */
            int taken = take_line(p, len, number, sid.buf, sid.len, batches);
            if (taken < 0) goto fail;
            if (taken) {
                count++; last = number;
            } else {
                PyObject *raw = PyBytes_FromStringAndSize(p, len);
                if (!raw) goto fail;
                PyObject *got = PyObject_CallFunction(fallback, "LN", number, raw);
                if (!got) goto fail;
                int counted;
                if (PyTuple_Check(got)) {  /* a row of one of our kinds, typed in Python: in line order here */
                    counted = take_python_row(got, batches) < 0 ? -1 : 1;
                } else {
                    counted = PyObject_IsTrue(got);
                }
                Py_DECREF(got);
                if (counted < 0) goto fail;
                if (counted) { count++; last = number; }
            }
        }
        if (!nl) break;
        p = nl + 1;
        number++;
    }
    PyObject *kinds_out = PyList_New(0);
    if (!kinds_out) goto fail;
    for (int k = 0; k < n_kinds; k++) {
        KindBatch *kb = &batches[k];
        if (!kb->count) continue;
        if (flush_run(kb) < 0) { Py_DECREF(kinds_out); goto fail; }
        PyObject *item = Py_BuildValue("(s#y#nOOOO)", kinds[k].name, kinds[k].name_len, kb->copy.p, kb->copy.len,
                                       kb->count, kb->scopes, kb->slot_max, kb->ranges,
                                       kb->repeated ? Py_False : Py_True);
        if (!item || PyList_Append(kinds_out, item) < 0) { Py_XDECREF(item); Py_DECREF(kinds_out); goto fail; }
        Py_DECREF(item);
    }
    result = Py_BuildValue("(LLLN)", count, last, skipped, kinds_out);
fail:
    free_batches(batches);
    PyBuffer_Release(&block);
    PyBuffer_Release(&sid);
    return result;
}

/* configure(((kind, ((field, type_code, required), ...), scope_at, range_at, third_key_at, slot_at,
 *             (refusal_in, refusal_out, refusal_payload)), ...)) */
static PyObject *configure(PyObject *self, PyObject *arg) {
    PyObject *seq = PySequence_Fast(arg, "configure takes a sequence of kind specs");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > MAX_KINDS) { Py_DECREF(seq); PyErr_SetString(PyExc_ValueError, "too many kinds"); return NULL; }
    KindSpec specs[MAX_KINDS];
    memset(specs, 0, sizeof specs);
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *name; Py_ssize_t name_len;
        PyObject *fields;
        KindSpec *ks = &specs[i];
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "s#Oiiii(iii)", &name, &name_len, &fields,
                              &ks->scope_at, &ks->range_at, &ks->third_key_at, &ks->slot_at,
                              &ks->refusal_in, &ks->refusal_out, &ks->refusal_payload)) {
            Py_DECREF(seq); return NULL;
        }
        if (name_len >= (Py_ssize_t)sizeof ks->name) { Py_DECREF(seq); PyErr_SetString(PyExc_ValueError, "kind name too long"); return NULL; }
        memcpy(ks->name, name, name_len); ks->name_len = name_len;
        PyObject *fseq = PySequence_Fast(fields, "fields must be a sequence");
        if (!fseq) { Py_DECREF(seq); return NULL; }
        Py_ssize_t nf = PySequence_Fast_GET_SIZE(fseq);
        if (nf > MAX_FIELDS) { Py_DECREF(fseq); Py_DECREF(seq); PyErr_SetString(PyExc_ValueError, "too many fields"); return NULL; }
        ks->n_fields = (int)nf;
        for (Py_ssize_t f = 0; f < nf; f++) {
            const char *fname; Py_ssize_t flen;
            FieldSpec *fs = &ks->fields[f];
            if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fseq, f), "s#ipn", &fname, &flen, &fs->type, &fs->required, &fs->max_len)
                || flen >= (Py_ssize_t)sizeof fs->name) {
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "field name too long");
                Py_DECREF(fseq); Py_DECREF(seq); return NULL;
            }
            memcpy(fs->name, fname, flen); fs->name_len = flen;
        }
        Py_DECREF(fseq);
        int idx[] = {ks->scope_at, ks->range_at};
        for (int j = 0; j < 2; j++)
            if (idx[j] < 0 || idx[j] >= ks->n_fields || !ks->fields[idx[j]].required) {
                Py_DECREF(seq); PyErr_SetString(PyExc_ValueError, "scope and range fields must be required fields"); return NULL;
            }
    }
    Py_DECREF(seq);
    memcpy(kinds, specs, sizeof specs);
    n_kinds = (int)n;
    Py_RETURN_NONE;
}

/* shift_rows(copy, offset, sid) -> bytes: COPY rows typed with the placeholder source and part-relative line
 * numbers ("line \t columns ... \t 0 \n", as type_block writes them with sid b"0") given their line numbers in the
 * source (+ offset) and its id (indexer.load.assemble). COPY text escapes newlines inside values, so every raw
 * newline ends a row. */
static PyObject *shift_rows(PyObject *self, PyObject *args) {
    Py_buffer copy, sid;
    long long offset;
    if (!PyArg_ParseTuple(args, "y*Ly*:shift_rows", &copy, &offset, &sid)) return NULL;
    Buf out = {0};
    PyObject *result = NULL;
    const char *p = copy.buf, *end = p + copy.len;
    while (p < end) {
        const char *nl = memchr(p, '\n', end - p);
        unsigned long long n = 0;
        const char *q = p;
        while (q < end && *q >= '0' && *q <= '9' && q - p < 18) n = n * 10 + (unsigned long long)(*q++ - '0');
        if (!nl || q == p || *q != '\t' || nl - q < 2 || nl[-1] != '0' || nl[-2] != '\t') {
            PyErr_Format(PyExc_ValueError, "shift_rows: not a placeholder row at byte %zd",
                         (Py_ssize_t)(p - (const char *)copy.buf));
            goto done;
        }
        char num[24];
        int num_len = snprintf(num, sizeof num, "%lld", (long long)n + offset);
        Py_ssize_t middle = (nl - 1) - q;  /* "\t columns ... \t", the placeholder left out */
        if (buf_reserve(&out, num_len + middle + sid.len + 1) < 0) goto done;
        memcpy(out.p + out.len, num, num_len);
        memcpy(out.p + out.len + num_len, q, middle);
        memcpy(out.p + out.len + num_len + middle, sid.buf, sid.len);
        out.len += num_len + middle + sid.len;
        out.p[out.len++] = '\n';
        p = nl + 1;
    }
    result = PyBytes_FromStringAndSize(out.p ? out.p : "", out.len);
done:
    PyMem_Free(out.p);
    PyBuffer_Release(&copy);
    PyBuffer_Release(&sid);
    return result;
}

static PyMethodDef methods[] = {
    {"type_block", type_block, METH_VARARGS,
     "type_block(block, first_line, resume_after, sid, fallback) -> (count, last, skipped, [(kind, copy, n, scopes, "
     "slot_max, ranges, distinct_keys)])"},
    {"configure", configure, METH_O, "configure(kind specs): the kinds type_block takes (indexer.load.typed.native)"},
    {"shift_rows", shift_rows, METH_VARARGS,
     "shift_rows(copy, offset, sid) -> placeholder rows renumbered by offset, with source id sid "
     "(indexer.load.assemble)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_typer", NULL, -1, methods};

PyMODINIT_FUNC PyInit__typer(void) {
    for (int c = 0; c < 256; c++)
        HEX_LOWER[c] = (char)((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ? c : (c >= 'A' && c <= 'F') ? c + 32 : 0);
    return PyModule_Create(&module);
}

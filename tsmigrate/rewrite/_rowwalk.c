/* The rewrite's per-row walks over PlainBuffer pages, compiled: the same bytes, digests and
 * errors as the pure-Python loops they replace (rekey.py's Rekey.page, rowbytes.py's
 * page_totals), which stay the fallback where this module is not built. A row is walked once;
 * cells are copied as bytes, values are never decoded. The digest is hashlib's blake2b, called
 * through the C API, so both paths hash with one implementation.
 *
 * Errors: ValueError for a truncated or malformed page (the callers raise PlainBufferError),
 * None from rekey_page for a row the fast path does not build (the caller's NotRekeyable),
 * TypeError for arguments no Rekey plan gives.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define DIGEST_BYTES 16
#define MAX_KEY_CELLS 4   /* Tablestore keys have 1 to 4 columns */
#define MAX_MOVED 4

static PyObject *blake2b;       /* hashlib.blake2b */
static PyObject *digest_kwnames; /* ("digest_size",) */
static PyObject *digest_size;    /* 16 */
static PyObject *digest_name;    /* "digest" */
static uint8_t crc8_table[256];

typedef struct {
    uint64_t limb[3]; /* the sum of 128-bit digests, unmasked: room for 2^64 of them */
} Sum;

typedef struct {
    Py_ssize_t start, end;
} Span;

static int malformed(const char *what, Py_ssize_t pos) {
    PyErr_Format(PyExc_ValueError, "%s at offset %zd", what, pos);
    return -1;
}

/* blake2b(data, digest_size=16) added to the sum, as the little-endian integer
 * int.from_bytes(digest, "little") of rowbytes.content_digest. */
static int add_digest(Sum *sum, const char *data, Py_ssize_t size) {
    PyObject *view = PyMemoryView_FromMemory((char *)data, size, PyBUF_READ);
    if (view == NULL)
        return -1;
    PyObject *args[2] = {view, digest_size};
    PyObject *hash = PyObject_Vectorcall(blake2b, args, 1, digest_kwnames);
    Py_DECREF(view);
    if (hash == NULL)
        return -1;
    PyObject *digest = PyObject_CallMethodNoArgs(hash, digest_name);
    Py_DECREF(hash);
    if (digest == NULL)
        return -1;
    if (!PyBytes_Check(digest) || PyBytes_GET_SIZE(digest) != DIGEST_BYTES) {
        Py_DECREF(digest);
        PyErr_SetString(PyExc_RuntimeError, "blake2b gave a digest of an unexpected size");
        return -1;
    }
    const uint8_t *d = (const uint8_t *)PyBytes_AS_STRING(digest);
    uint64_t low = 0, high = 0;
    for (int i = 7; i >= 0; i--) {
        low = (low << 8) | d[i];
        high = (high << 8) | d[i + 8];
    }
    Py_DECREF(digest);
    uint64_t before = sum->limb[0];
    sum->limb[0] += low;
    uint64_t carry = sum->limb[0] < before;
    before = sum->limb[1];
    sum->limb[1] += high + carry;
    carry = sum->limb[1] < before || (carry && sum->limb[1] == before);
    sum->limb[2] += carry;
    return 0;
}

static PyObject *sum_to_long(const Sum *sum) {
    PyObject *total = PyLong_FromUnsignedLongLong(sum->limb[2]);
    for (int i = 1; i >= 0 && total != NULL; i--) {
        PyObject *shift = PyLong_FromLong(64);
        PyObject *shifted = shift ? PyNumber_Lshift(total, shift) : NULL;
        Py_XDECREF(shift);
        Py_DECREF(total);
        PyObject *limb = shifted ? PyLong_FromUnsignedLongLong(sum->limb[i]) : NULL;
        total = limb ? PyNumber_Or(shifted, limb) : NULL;
        Py_XDECREF(shifted);
        Py_XDECREF(limb);
    }
    return total;
}

static int32_t read_i32(const uint8_t *p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

/* A cell's name length (its len32; names have 1 to 255 bytes). */
static Py_ssize_t name_length(const uint8_t *b, Py_ssize_t pos, Py_ssize_t n) {
    if (pos + 6 > n)
        return malformed("a cell is truncated", pos);
    int32_t size = read_i32(b + pos + 2);
    if (size < 0 || pos + 6 + size > n)
        return malformed("a cell name is truncated", pos);
    return size;
}

/* The end of a key cell starting at pos: 0x03 0x04 len32 name 0x05 len32 value 0x0A crc. */
static Py_ssize_t key_cell_end(const uint8_t *b, Py_ssize_t pos, Py_ssize_t n) {
    Py_ssize_t size = name_length(b, pos, n);
    if (size < 0)
        return -1;
    pos += 6 + size;
    if (pos + 5 > n)
        return malformed("a key cell is truncated", pos);
    int32_t value = read_i32(b + pos + 1);
    if (value < 0 || pos + 7 + (Py_ssize_t)value > n)
        return malformed("a key cell's value is truncated", pos);
    return pos + 7 + value;
}

/* The end of an attribute cell starting at pos, and where its value ends (value_end: the
 * name's end for a cell without a value). */
static Py_ssize_t attribute_cell_end(const uint8_t *b, Py_ssize_t pos, Py_ssize_t n,
                                     Py_ssize_t *value_end) {
    Py_ssize_t size = name_length(b, pos, n);
    if (size < 0)
        return -1;
    pos += 6 + size;
    if (pos < n && b[pos] == 0x05) {
        if (pos + 5 > n)
            return malformed("a cell value is truncated", pos);
        int32_t value = read_i32(b + pos + 1);
        if (value < 0 || pos + 5 + (Py_ssize_t)value > n)
            return malformed("a cell value is truncated", pos);
        pos += 5 + value;
    }
    *value_end = pos;
    if (pos < n && b[pos] == 0x07) {
        pos += 11; /* a timestamp, then the checksum: most cells */
    } else {
        if (pos < n && b[pos] == 0x06)
            pos += 2;
        if (pos < n && b[pos] == 0x07)
            pos += 9;
        pos += 2;
    }
    if (pos > n)
        return malformed("a cell is truncated", pos);
    return pos;
}

/* Where the next row starts for a row whose cells end at pos: [0x08] 0x09 crc. */
static Py_ssize_t row_end(const uint8_t *b, Py_ssize_t pos, Py_ssize_t n) {
    if (pos < n && b[pos] == 0x08)
        pos++;
    if (pos >= n || b[pos] != 0x09)
        return malformed("row checksum tag expected", pos);
    if (pos + 2 > n)
        return malformed("a row checksum is truncated", pos);
    return pos + 2;
}

/* Whether a page is empty (no rows) or starts with the PlainBuffer header. */
static int header_ok(const uint8_t *b, Py_ssize_t n) {
    if (n != 0 && (n < 4 || read_i32(b) != 0x75)) {
        PyErr_SetString(PyExc_ValueError, "a page must start with the PlainBuffer header");
        return 0;
    }
    return 1;
}

/* page_totals(buf) -> (rows, sum of digests): rowbytes.page_totals. */
static PyObject *page_totals(PyObject *module, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *b = view.buf;
    Py_ssize_t n = view.len, pos = 4, count = 0;
    Sum sum = {{0, 0, 0}};
    PyObject *result = NULL;
    char *joined = NULL;
    if (!header_ok(b, n))
        goto fail;
    while (pos < n) {
        pos++; /* TAG_ROW_PK */
        Py_ssize_t start = pos, value_end;
        while (pos < n && b[pos] == 0x03)
            if ((pos = key_cell_end(b, pos, n)) < 0)
                goto fail;
        if (pos >= n)
            goto truncated;
        if (b[pos] == 0x02) {
            pos++;
            while (pos < n && b[pos] == 0x03)
                if ((pos = attribute_cell_end(b, pos, n, &value_end)) < 0)
                    goto fail;
            if (add_digest(&sum, (const char *)b + start, pos - start) < 0)
                goto fail;
        } else { /* a key-only row hashes as if 0x02 ended it */
            joined = PyMem_Malloc(pos - start + 1);
            if (joined == NULL) {
                PyErr_NoMemory();
                goto fail;
            }
            memcpy(joined, b + start, pos - start);
            joined[pos - start] = 0x02;
            if (add_digest(&sum, joined, pos - start + 1) < 0)
                goto fail;
            PyMem_Free(joined);
            joined = NULL;
        }
        count++;
        if ((pos = row_end(b, pos, n)) < 0)
            goto fail;
    }
    PyObject *total = sum_to_long(&sum);
    if (total != NULL)
        result = Py_BuildValue("(nN)", count, total);
    goto fail;
truncated:
    malformed("a row is truncated", pos);
fail:
    PyMem_Free(joined);
    PyBuffer_Release(&view);
    return result;
}

typedef struct {
    /* parts[i] >= 0: the source key cell copied; -1: the moved attribute named names[i] */
    int count;
    int copy[MAX_KEY_CELLS];
    PyObject *name[MAX_KEY_CELLS]; /* borrowed bytes */
    long vtype[MAX_KEY_CELLS];
} Parts;

static int parse_parts(PyObject *seq, Parts *parts) {
    PyObject *fast = PySequence_Fast(seq, "parts must be a sequence");
    if (fast == NULL)
        return -1;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(fast);
    if (count < 1 || count > MAX_KEY_CELLS) {
        Py_DECREF(fast);
        PyErr_SetString(PyExc_TypeError, "a key has 1 to 4 columns");
        return -1;
    }
    parts->count = (int)count;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *part = PySequence_Fast_GET_ITEM(fast, i);
        parts->name[i] = NULL;
        if (PyLong_Check(part)) {
            long copy = PyLong_AsLong(part);
            if (copy < 0 || copy >= MAX_KEY_CELLS) {
                Py_DECREF(fast);
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_TypeError, "a copied key column's index is 0 to 3");
                return -1;
            }
            parts->copy[i] = (int)copy;
        } else if (PyTuple_Check(part) && PyTuple_GET_SIZE(part) == 2 &&
                   PyBytes_Check(PyTuple_GET_ITEM(part, 0))) {
            parts->copy[i] = -1;
            parts->name[i] = PyTuple_GET_ITEM(part, 0);
            parts->vtype[i] = PyLong_AsLong(PyTuple_GET_ITEM(part, 1));
        } else {
            Py_DECREF(fast);
            PyErr_SetString(PyExc_TypeError, "a part is an int or a (bytes, int) tuple");
            return -1;
        }
    }
    Py_DECREF(fast);
    return PyErr_Occurred() ? -1 : 0;
}

/* A growable list of byte spans of the source page: the attribute pieces a row keeps. */
typedef struct {
    Span *items;
    Py_ssize_t count, capacity;
} Spans;

static int spans_add(Spans *spans, Py_ssize_t start, Py_ssize_t end) {
    if (spans->count == spans->capacity) {
        Py_ssize_t capacity = spans->capacity ? spans->capacity * 2 : 16;
        Span *items = PyMem_Realloc(spans->items, capacity * sizeof(Span));
        if (items == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        spans->items = items;
        spans->capacity = capacity;
    }
    spans->items[spans->count++] = (Span){start, end};
    return 0;
}

/* A moved attribute's newest version with a value, as a key cell: its bytes up to the value's
 * end are the key cell's, followed by 0x0A and a checksum over the name and the value. */
typedef struct {
    Py_ssize_t start, end; /* in the page; start < 0: not found */
    uint8_t crc, vtype;
} Moved;

/* rekey_page(buf, parts, moved) -> (rows, sum of digests, bytes) or None: rekey.Rekey.page.
 * ``moved``: the names leaving the attributes. */
static PyObject *rekey_page(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "rekey_page takes 3 arguments");
        return NULL;
    }
    Parts parts;
    if (parse_parts(args[1], &parts) < 0)
        return NULL;
    PyObject *moved_fast = PySequence_Fast(args[2], "moved must be iterable");
    if (moved_fast == NULL)
        return NULL;
    Py_ssize_t moved_count = PySequence_Fast_GET_SIZE(moved_fast);
    if (moved_count > MAX_MOVED) {
        Py_DECREF(moved_fast);
        PyErr_SetString(PyExc_TypeError, "at most 4 attributes enter a key");
        return NULL;
    }
    const char *moved_name[MAX_MOVED];
    Py_ssize_t moved_size[MAX_MOVED];
    for (Py_ssize_t i = 0; i < moved_count; i++) {
        PyObject *name = PySequence_Fast_GET_ITEM(moved_fast, i);
        if (!PyBytes_Check(name)) {
            Py_DECREF(moved_fast);
            PyErr_SetString(PyExc_TypeError, "moved names are bytes");
            return NULL;
        }
        moved_name[i] = PyBytes_AS_STRING(name);
        moved_size[i] = PyBytes_GET_SIZE(name);
    }
    int part_moved[MAX_KEY_CELLS]; /* per moved part: the index of its name in moved */
    for (int i = 0; i < parts.count; i++) {
        part_moved[i] = -1;
        for (Py_ssize_t m = 0; parts.copy[i] < 0 && m < moved_count; m++)
            if (moved_size[m] == PyBytes_GET_SIZE(parts.name[i]) &&
                memcmp(moved_name[m], PyBytes_AS_STRING(parts.name[i]), moved_size[m]) == 0)
                part_moved[i] = (int)m;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        Py_DECREF(moved_fast);
        return NULL;
    }
    const uint8_t *b = view.buf;
    Py_ssize_t n = view.len, pos = 4, size_total = 0;
    Sum sum = {{0, 0, 0}};
    Spans pieces = {NULL, 0, 0};
    uint8_t *kept_crcs = NULL;
    Py_ssize_t kept_capacity = 0;
    PyObject *rows = PyList_New(0), *result = NULL;
    if (rows == NULL || !header_ok(b, n))
        goto fail;
    while (pos < n) {
        pos++; /* TAG_ROW_PK */
        Span key_cells[MAX_KEY_CELLS];
        int key_count = 0;
        while (pos < n && b[pos] == 0x03) {
            Py_ssize_t start = pos;
            if ((pos = key_cell_end(b, pos, n)) < 0)
                goto fail;
            if (key_count == MAX_KEY_CELLS)
                goto malformed_row;
            key_cells[key_count++] = (Span){start, pos};
        }
        if (pos >= n)
            goto malformed_row;
        Moved found[MAX_MOVED];
        for (Py_ssize_t i = 0; i < moved_count; i++)
            found[i].start = -1;
        pieces.count = 0;
        Py_ssize_t kept = 0, attributes_size = 0;
        if (b[pos] == 0x02) {
            pos++;
            Py_ssize_t piece = pos;
            while (pos < n && b[pos] == 0x03) {
                Py_ssize_t cell = pos, value_end;
                if ((pos = attribute_cell_end(b, pos, n, &value_end)) < 0)
                    goto fail;
                Py_ssize_t name_size = read_i32(b + cell + 2); /* checked by attribute_cell_end */
                Py_ssize_t which = -1;
                for (Py_ssize_t i = 0; i < moved_count; i++)
                    if (moved_size[i] == name_size && memcmp(moved_name[i], b + cell + 6, name_size) == 0) {
                        which = i;
                        break;
                    }
                if (which < 0) {
                    if (kept == kept_capacity) {
                        kept_capacity = kept_capacity ? kept_capacity * 2 : 64;
                        uint8_t *grown = PyMem_Realloc(kept_crcs, kept_capacity);
                        if (grown == NULL) {
                            PyErr_NoMemory();
                            goto fail;
                        }
                        kept_crcs = grown;
                    }
                    kept_crcs[kept++] = b[pos - 1];
                    continue;
                }
                /* a moved column's cell: the newest version with a value makes the key cell;
                 * no version stays among the attributes */
                Py_ssize_t value_start = cell + 6 + name_size;
                if (found[which].start < 0 && value_end > value_start) {
                    if (value_end == value_start + 5)
                        goto malformed_row; /* a value without its type */
                    uint8_t crc = 0;
                    for (Py_ssize_t i = cell + 6; i < value_start; i++)
                        crc = crc8_table[crc ^ b[i]];
                    for (Py_ssize_t i = value_start + 5; i < value_end; i++)
                        crc = crc8_table[crc ^ b[i]];
                    found[which] = (Moved){cell, value_end, crc, b[value_start + 5]};
                }
                if (piece < cell && spans_add(&pieces, piece, cell) < 0)
                    goto fail;
                piece = pos;
            }
            if (piece < pos && spans_add(&pieces, piece, pos) < 0)
                goto fail;
        }
        if ((pos = row_end(b, pos, n)) < 0)
            goto fail;
        for (Py_ssize_t i = 0; i < pieces.count; i++)
            attributes_size += pieces.items[i].end - pieces.items[i].start;
        /* the new key's cells, and the row checksum over theirs, then the kept cells' */
        Span cells[MAX_KEY_CELLS];
        uint8_t moved_crc[MAX_KEY_CELLS];
        Py_ssize_t key_size = 0;
        uint8_t crc = 0;
        for (int i = 0; i < parts.count; i++) {
            if (parts.copy[i] >= 0) {
                if (parts.copy[i] >= key_count)
                    goto malformed_row;
                cells[i] = key_cells[parts.copy[i]];
                crc = crc8_table[crc ^ b[cells[i].end - 1]];
                key_size += cells[i].end - cells[i].start;
                continue;
            }
            Moved *hit = part_moved[i] < 0 ? NULL : &found[part_moved[i]];
            if (hit == NULL || hit->start < 0 || hit->vtype != parts.vtype[i]) {
                Py_CLEAR(rows); /* not rekeyable: the general path takes the page */
                result = Py_NewRef(Py_None);
                goto fail;
            }
            cells[i] = (Span){hit->start, hit->end};
            moved_crc[i] = hit->crc;
            crc = crc8_table[crc ^ hit->crc];
            key_size += hit->end - hit->start + 2; /* 0x0A crc */
        }
        for (Py_ssize_t i = 0; i < kept; i++)
            crc = crc8_table[crc ^ kept_crcs[i]];
        crc = crc8_table[crc]; /* the delete marker's byte, 0 */
        Py_ssize_t size = 4 + 1 + key_size + (kept ? 1 + attributes_size : 0) + 2;
        PyObject *row = PyBytes_FromStringAndSize(NULL, size);
        if (row == NULL)
            goto fail;
        char *out = PyBytes_AS_STRING(row);
        memcpy(out, b, 4); /* HEADER */
        out[4] = 0x01;
        Py_ssize_t at = 5;
        for (int i = 0; i < parts.count; i++) {
            memcpy(out + at, b + cells[i].start, cells[i].end - cells[i].start);
            at += cells[i].end - cells[i].start;
            if (parts.copy[i] < 0) {
                out[at++] = 0x0A;
                out[at++] = (char)moved_crc[i];
            }
        }
        /* the digest covers the key cells, 0x02 and the attribute cells; the row is ours
         * alone until it is listed, so a key-only row's checksum tag stands in for 0x02 */
        out[at] = 0x02;
        if (kept) {
            at++;
            for (Py_ssize_t i = 0; i < pieces.count; i++) {
                memcpy(out + at, b + pieces.items[i].start, pieces.items[i].end - pieces.items[i].start);
                at += pieces.items[i].end - pieces.items[i].start;
            }
        }
        int hashed = add_digest(&sum, out + 5, kept ? at - 5 : at - 5 + 1);
        out[at] = 0x09;
        out[at + 1] = (char)crc;
        if (hashed < 0 || PyList_Append(rows, row) < 0) {
            Py_DECREF(row);
            goto fail;
        }
        Py_DECREF(row);
        size_total += size - 4;
    }
    PyObject *total = sum_to_long(&sum);
    if (total != NULL)
        result = Py_BuildValue("(ONn)", rows, total, size_total);
    goto fail;
malformed_row:
    malformed("a row is truncated or malformed", pos);
fail:
    Py_XDECREF(rows);
    PyMem_Free(pieces.items);
    PyMem_Free(kept_crcs);
    PyBuffer_Release(&view);
    Py_DECREF(moved_fast);
    return result;
}

static PyMethodDef methods[] = {
    {"page_totals", (PyCFunction)page_totals, METH_O,
     "page_totals(buf) -> (rows, sum of digests): rowbytes.page_totals, compiled."},
    {"rekey_page", (PyCFunction)(void (*)(void))rekey_page, METH_FASTCALL,
     "rekey_page(buf, parts, moved) -> (rows, sum of digests, bytes) or None "
     "for a row the fast path does not build: rekey.Rekey.page, compiled."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_rowwalk", "Compiled row walks of the rewrite (see rekey.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__rowwalk(void) {
    for (int i = 0; i < 256; i++) { /* CRC-8, polynomial 0x07, as the PlainBuffer codec */
        uint8_t crc = (uint8_t)i;
        for (int bit = 0; bit < 8; bit++)
            crc = (uint8_t)(crc & 0x80 ? (crc << 1) ^ 0x07 : crc << 1);
        crc8_table[i] = crc;
    }
    PyObject *hashlib = PyImport_ImportModule("hashlib");
    if (hashlib == NULL)
        return NULL;
    blake2b = PyObject_GetAttrString(hashlib, "blake2b");
    Py_DECREF(hashlib);
    digest_kwnames = Py_BuildValue("(s)", "digest_size");
    digest_size = PyLong_FromLong(DIGEST_BYTES);
    digest_name = PyUnicode_InternFromString("digest");
    if (blake2b == NULL || digest_kwnames == NULL || digest_size == NULL || digest_name == NULL)
        return NULL;
    return PyModule_Create(&module_def);
}

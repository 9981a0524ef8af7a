/* The rewrite's per-row walks over PlainBuffer pages, compiled: the same bytes, digests and
 * errors as the pure-Python loops they replace (rekey.py's Rekey.page, rowbytes.py's
 * page_totals), which stay the fallback where this module is not built. A row is walked once;
 * cells are copied as bytes, values are never decoded. The digest is hashlib's blake2b, called
 * through the C API, so both paths hash with one implementation.
 *
 * Change capture's per-record work, compiled the same way (each beside the Python it stands in
 * for, named there *_in_python, which tests/rewrite/test_capture_walks.py compares it with):
 * a page of stream records and the rows BatchGetRow returns walked once each (row_cells,
 * row_versions, records, raw_rows), keys encoded (key_row, key_cells), a target row's merge
 * (merge_columns), its changes in order (row_changes) and their UpdateRow bodies (update_bodies),
 * the two protobuf answers capture reads the most (batch_get_rows, stream_records), and a
 * target key of plain columns (plain_key, beside transform.RowTransform.key_of).
 *
 * Errors: ValueError for a truncated or malformed page (the callers raise PlainBufferError),
 * None from rekey_page for a row the fast path does not build (the caller's NotRekeyable), and
 * from key_row, key_cells, row_changes and update_bodies for input they leave to Python,
 * TypeError for arguments no caller gives.
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

/* ---- capture's walks: one row at a time (rowbytes.row_cells and what capture builds of it) ----
 *
 * The same walk as rowbytes.row_cells_in_python, position by position: the tags that loop reads
 * are the ones checked here, a read past the end is a ValueError (the loop's IndexError), and a
 * value is decoded as rowbytes.value_at decodes it. A length that is negative is malformed here
 * (the loop would read the bytes backwards: damaged data either way). */

#define NAME_SLOTS 1024 /* recent column names: bytes -> str, as rowbytes._names */

typedef struct {
    PyObject *raw;  /* bytes */
    PyObject *name; /* str */
} NameSlot;

static NameSlot name_slots[NAME_SLOTS];

static PyObject *cell_name(const uint8_t *p, Py_ssize_t size) {
    uint32_t h = 2166136261u;
    for (Py_ssize_t i = 0; i < size; i++)
        h = (h ^ p[i]) * 16777619u;
    NameSlot *slot = &name_slots[h & (NAME_SLOTS - 1)];
    if (slot->raw != NULL && PyBytes_GET_SIZE(slot->raw) == size &&
        memcmp(PyBytes_AS_STRING(slot->raw), p, size) == 0)
        return Py_NewRef(slot->name);
    PyObject *name = PyUnicode_DecodeUTF8((const char *)p, size, NULL);
    if (name == NULL)
        return NULL;
    PyObject *raw = PyBytes_FromStringAndSize((const char *)p, size);
    if (raw == NULL) {
        Py_DECREF(name);
        return NULL;
    }
    Py_XSETREF(slot->raw, raw);
    Py_XSETREF(slot->name, Py_NewRef(name));
    return name;
}

static int64_t read_i64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return (int64_t)v;
}

/* The length at p (a len32 at b + at), or -1 with ValueError when it is not all there or is
 * negative. */
static Py_ssize_t length_at(const uint8_t *b, Py_ssize_t n, Py_ssize_t at) {
    if (at < 0 || at + 4 > n)
        return malformed("a length is truncated", at);
    int32_t size = read_i32(b + at);
    if (size < 0)
        return malformed("a negative length", at);
    return size;
}

/* rowbytes.value_at: the value of ``vtype + payload`` at b[start:end]. */
static PyObject *value_at(const uint8_t *b, Py_ssize_t n, Py_ssize_t start, Py_ssize_t end) {
    if (start >= n) {
        malformed("a value is truncated", start);
        return NULL;
    }
    Py_ssize_t low = start + 5 < n ? start + 5 : n, high = end < n ? end : n;
    if (high < low)
        high = low;
    switch (b[start]) {
    case 0x0:
        if (start + 9 > n)
            break;
        return PyLong_FromLongLong(read_i64(b + start + 1));
    case 0x3:
        return PyUnicode_DecodeUTF8((const char *)b + low, high - low, NULL);
    case 0x7:
        return PyBytes_FromStringAndSize((const char *)b + low, high - low);
    case 0x1: {
        if (start + 9 > n)
            break;
        int64_t bits = read_i64(b + start + 1); /* little-endian, as the format */
        double d;
        memcpy(&d, &bits, 8);
        return PyFloat_FromDouble(d);
    }
    case 0x2:
        if (start + 1 >= n)
            break;
        return PyBool_FromLong(b[start + 1] != 0);
    case 0x6:
        Py_RETURN_NONE;
    default:
        PyErr_Format(PyExc_ValueError, "unexpected value type 0x%02x in a row read back", b[start]);
        return NULL;
    }
    malformed("a value is truncated", start);
    return NULL;
}

/* ``tuple``, no longer tracked by the cyclic collector when it holds nothing that could be in a
 * cycle (what the collector does to such a tuple on its first pass, done as it is made: the
 * dicts capture keeps them in stay untracked, and none of them is carried into the collector's
 * oldest generation, whose full collections cost in proportion to it). NULL passes through. */
static PyObject *atomic(PyObject *tuple) {
    if (tuple == NULL || !PyTuple_CheckExact(tuple) || !PyObject_GC_IsTracked(tuple))
        return tuple;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tuple); i++) {
        PyObject *item = PyTuple_GET_ITEM(tuple, i);
        if (PyObject_IS_GC(item) && !(PyTuple_CheckExact(item) && !PyObject_GC_IsTracked(item)))
            return tuple;
    }
    PyObject_GC_UnTrack(tuple);
    return tuple;
}

static int byte_at(const uint8_t *b, Py_ssize_t n, Py_ssize_t pos) {
    return pos >= 0 && pos < n ? b[pos] : -1;
}

enum { CELLS_NONE, CELLS_STAMPS, CELLS_BYTES, CELLS_VERSIONS };

typedef struct {
    PyObject *key;    /* tuple of (name, value) */
    PyObject *cells;  /* list (CELLS_STAMPS, CELLS_BYTES), dict (CELLS_VERSIONS) or NULL */
    PyObject *values; /* dict, or NULL when no value is wanted */
} Walked;

static void walked_clear(Walked *w) {
    Py_CLEAR(w->key);
    Py_CLEAR(w->cells);
    Py_CLEAR(w->values);
}

static int wanted_has(PyObject *wanted, PyObject *name) {
    if (PyAnySet_Check(wanted))
        return PySet_Contains(wanted, name);
    return PySequence_Contains(wanted, name);
}

/* One row (HEADER + row): its key, its cells as ``mode`` says ((name, ts) pairs, rowbytes.RawCell
 * tuples, or a dict (name, ts) -> (bytes, crc)), the newest value of each name in ``wanted``
 * (NULL: none wanted). 0, or -1 with an exception set. */
static int walk_row(const uint8_t *b, Py_ssize_t n, PyObject *wanted, int mode, Walked *out) {
    out->key = out->cells = out->values = NULL;
    PyObject *key_items = NULL;
    if (n < 4 || read_i32(b) != 0x75) {
        PyErr_SetString(PyExc_ValueError, "a row must start with the PlainBuffer header");
        return -1;
    }
    if ((key_items = PyList_New(0)) == NULL)
        goto fail;
    if (mode == CELLS_VERSIONS)
        out->cells = PyDict_New();
    else if (mode != CELLS_NONE)
        out->cells = PyList_New(0);
    if (mode != CELLS_NONE && out->cells == NULL)
        goto fail;
    if (wanted != NULL && (out->values = PyDict_New()) == NULL)
        goto fail;
    Py_ssize_t pos = 5, size, end;
    while (byte_at(b, n, pos) == 0x03) {
        if ((size = length_at(b, n, pos + 2)) < 0)
            goto fail;
        Py_ssize_t start = pos + 6;
        end = start + size;
        if (end > n) {
            malformed("a cell name is truncated", pos);
            goto fail;
        }
        Py_ssize_t vsize = length_at(b, n, end + 1);
        if (vsize < 0)
            goto fail;
        Py_ssize_t vstart = end + 5;
        pos = vstart + vsize;
        PyObject *name = cell_name(b + start, size);
        if (name == NULL)
            goto fail;
        PyObject *value = value_at(b, n, vstart, pos);
        if (value == NULL) {
            Py_DECREF(name);
            goto fail;
        }
        PyObject *pair = atomic(PyTuple_Pack(2, name, value));
        Py_DECREF(name);
        Py_DECREF(value);
        if (pair == NULL || PyList_Append(key_items, pair) < 0) {
            Py_XDECREF(pair);
            goto fail;
        }
        Py_DECREF(pair);
        pos += 2; /* TAG_CELL_CHECKSUM crc */
    }
    if (byte_at(b, n, pos) < 0) {
        malformed("a row is truncated", pos);
        goto fail;
    }
    if (b[pos] == 0x02) {
        pos++;
        while (byte_at(b, n, pos) == 0x03) {
            Py_ssize_t cell = pos;
            if ((size = length_at(b, n, pos + 2)) < 0)
                goto fail;
            Py_ssize_t start = pos + 6;
            pos = end = start + size;
            if (end > n) {
                malformed("a cell name is truncated", cell);
                goto fail;
            }
            PyObject *name = cell_name(b + start, size); /* decoded as the loop does: every one */
            if (name == NULL)
                goto fail;
            if (byte_at(b, n, pos) == 0x05) {
                Py_ssize_t vsize = length_at(b, n, pos + 1);
                if (vsize < 0) {
                    Py_DECREF(name);
                    goto fail;
                }
                Py_ssize_t vstart = pos + 5;
                pos = vstart + vsize;
                if (out->values != NULL && !(PyAnySet_Check(wanted) && PySet_GET_SIZE(wanted) == 0)) {
                    int hit = wanted_has(wanted, name);
                    if (hit > 0) { /* the newest version: the first one read */
                        int seen = PyDict_Contains(out->values, name);
                        hit = seen < 0 ? -1 : !seen;
                    }
                    if (hit > 0) {
                        PyObject *value = value_at(b, n, vstart, pos);
                        if (value == NULL || PyDict_SetItem(out->values, name, value) < 0) {
                            Py_XDECREF(value);
                            Py_DECREF(name);
                            goto fail;
                        }
                        Py_DECREF(value);
                    } else if (hit < 0) {
                        Py_DECREF(name);
                        goto fail;
                    }
                }
            }
            if (byte_at(b, n, pos) == 0x06)
                pos += 2;
            int64_t stamp = 0;
            if (byte_at(b, n, pos) == 0x07) {
                if (pos + 9 > n) {
                    Py_DECREF(name);
                    malformed("a timestamp is truncated", pos);
                    goto fail;
                }
                stamp = read_i64(b + pos + 1);
                pos += 9;
            }
            pos += 2; /* TAG_CELL_CHECKSUM crc */
            if (pos > n) {
                Py_DECREF(name);
                malformed("a cell checksum is truncated", pos);
                goto fail;
            }
            if (mode == CELLS_NONE) {
                Py_DECREF(name);
                continue;
            }
            PyObject *ts = PyLong_FromLongLong(stamp), *item = NULL;
            if (ts == NULL) {
                Py_DECREF(name);
                goto fail;
            }
            if (mode == CELLS_STAMPS) {
                item = atomic(PyTuple_Pack(2, name, ts));
                if (item == NULL || PyList_Append(out->cells, item) < 0)
                    goto cell_fail;
            } else {
                PyObject *raw = PyBytes_FromStringAndSize((const char *)b + cell, pos - cell);
                PyObject *crc = raw ? PyLong_FromLong(b[pos - 1]) : NULL;
                if (crc == NULL) {
                    Py_XDECREF(raw);
                    goto cell_fail;
                }
                if (mode == CELLS_BYTES) {
                    item = atomic(PyTuple_Pack(4, name, ts, raw, crc));
                    Py_DECREF(raw);
                    Py_DECREF(crc);
                    if (item == NULL || PyList_Append(out->cells, item) < 0)
                        goto cell_fail;
                } else {
                    PyObject *version = atomic(PyTuple_Pack(2, name, ts));
                    item = atomic(PyTuple_Pack(2, raw, crc));
                    Py_DECREF(raw);
                    Py_DECREF(crc);
                    int set = version && item ? PyDict_SetItem(out->cells, version, item) : -1;
                    Py_XDECREF(version);
                    if (set < 0)
                        goto cell_fail;
                }
            }
            Py_DECREF(item);
            Py_DECREF(ts);
            Py_DECREF(name);
            continue;
        cell_fail:
            Py_XDECREF(item);
            Py_DECREF(ts);
            Py_DECREF(name);
            goto fail;
        }
    }
    if (row_end(b, pos, n) < 0)
        goto fail;
    out->key = atomic(PyList_AsTuple(key_items));
    Py_DECREF(key_items);
    if (out->key == NULL) {
        walked_clear(out);
        return -1;
    }
    return 0;
fail:
    Py_XDECREF(key_items);
    walked_clear(out);
    return -1;
}

static int get_bytes(PyObject *obj, Py_buffer *view) {
    return PyObject_GetBuffer(obj, view, PyBUF_SIMPLE);
}

/* row_cells(buf, wanted) -> (key, [(name, ts, bytes, crc)], {name: newest value}):
 * rowbytes.row_cells, compiled. */
static PyObject *row_cells(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "row_cells takes 2 arguments");
        return NULL;
    }
    Py_buffer view;
    if (get_bytes(args[0], &view) < 0)
        return NULL;
    Walked w;
    int ok = walk_row(view.buf, view.len, args[1], CELLS_BYTES, &w);
    PyBuffer_Release(&view);
    if (ok < 0)
        return NULL;
    PyObject *result = PyTuple_Pack(3, w.key, w.cells, w.values);
    walked_clear(&w);
    return result;
}

/* row_versions(buf) -> {(name, ts): (bytes, crc)}: the cells of rowbytes.row_cells by version. */
static PyObject *row_versions(PyObject *module, PyObject *arg) {
    Py_buffer view;
    if (get_bytes(arg, &view) < 0)
        return NULL;
    Walked w;
    int ok = walk_row(view.buf, view.len, NULL, CELLS_VERSIONS, &w);
    PyBuffer_Release(&view);
    if (ok < 0)
        return NULL;
    PyObject *result = Py_NewRef(w.cells);
    walked_clear(&w);
    return result;
}

/* records(encoded, wanted, record) -> [record(action, key, ((name, ts), ...), origin values or None)]:
 * capture.read_records_in_python, compiled. ``encoded``: (action, row, origin row or None)
 * tuples (RawClient.stream_record_bytes); ``record``: a tuple subclass of four fields. */
static PyObject *records(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "records takes 3 arguments");
        return NULL;
    }
    PyObject *wanted = args[1], *record_type = args[2];
    if (!PyType_Check(record_type) || !PyType_IsSubtype((PyTypeObject *)record_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "record must be a tuple subclass");
        return NULL;
    }
    PyObject *fast = PySequence_Fast(args[0], "encoded must be iterable");
    if (fast == NULL)
        return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(fast);
    PyObject *out = PyList_New(count), *item = NULL;
    if (out == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < count; i++) {
        item = PySequence_Fast(PySequence_Fast_GET_ITEM(fast, i), "a record is a sequence");
        if (item == NULL)
            goto fail;
        if (PySequence_Fast_GET_SIZE(item) != 3) {
            PyErr_SetString(PyExc_TypeError, "an encoded record is an (action, row, origin) tuple");
            goto fail;
        }
        PyObject *action = PySequence_Fast_GET_ITEM(item, 0), *origin = PySequence_Fast_GET_ITEM(item, 2);
        PyObject *values = Py_None;
        Py_buffer view;
        Walked row, before;
        if (get_bytes(PySequence_Fast_GET_ITEM(item, 1), &view) < 0)
            goto fail;
        int ok = walk_row(view.buf, view.len, NULL, CELLS_STAMPS, &row);
        PyBuffer_Release(&view);
        if (ok < 0)
            goto fail;
        if (origin != Py_None) {
            if (get_bytes(origin, &view) < 0) {
                walked_clear(&row);
                goto fail;
            }
            ok = walk_row(view.buf, view.len, wanted, CELLS_NONE, &before);
            PyBuffer_Release(&view);
            if (ok < 0) {
                walked_clear(&row);
                goto fail;
            }
            values = before.values;
            Py_CLEAR(before.key);
        }
        PyObject *cells = atomic(PyList_AsTuple(row.cells)); /* a tuple, as the Python loop's */
        PyObject *fields = cells ? PyTuple_Pack(4, action, row.key, cells, values) : NULL;
        Py_XDECREF(cells);
        walked_clear(&row);
        if (origin != Py_None)
            Py_DECREF(values);
        Py_CLEAR(item);
        if (fields == NULL)
            goto fail;
        /* tuple.__new__(record, fields): how a NamedTuple's __new__ makes one */
        PyObject *call_args = PyTuple_Pack(1, fields);
        Py_DECREF(fields);
        if (call_args == NULL)
            goto fail;
        PyObject *made = PyTuple_Type.tp_new((PyTypeObject *)record_type, call_args, NULL);
        Py_DECREF(call_args);
        if (made == NULL)
            goto fail;
        PyList_SET_ITEM(out, i, made);
    }
    Py_DECREF(fast);
    return out;
fail:
    Py_XDECREF(item);
    Py_DECREF(fast);
    Py_XDECREF(out);
    return NULL;
}

/* raw_rows(found, wanted, row) -> {key: row((cell, ...), values)}: capture.raw_rows_in_python,
 * compiled. ``found``: key -> HEADER + row; ``row``: a tuple subclass of two fields. */
static PyObject *raw_rows(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "raw_rows takes 3 arguments");
        return NULL;
    }
    PyObject *found = args[0], *wanted = args[1], *row_type = args[2];
    if (!PyDict_Check(found)) {
        PyErr_SetString(PyExc_TypeError, "found must be a dict");
        return NULL;
    }
    if (!PyType_Check(row_type) || !PyType_IsSubtype((PyTypeObject *)row_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "row must be a tuple subclass");
        return NULL;
    }
    PyObject *out = PyDict_New();
    if (out == NULL)
        return NULL;
    Py_ssize_t pos = 0;
    PyObject *key, *buf;
    while (PyDict_Next(found, &pos, &key, &buf)) {
        Py_buffer view;
        Walked w;
        if (get_bytes(buf, &view) < 0)
            goto fail;
        int ok = walk_row(view.buf, view.len, wanted, CELLS_BYTES, &w);
        PyBuffer_Release(&view);
        if (ok < 0)
            goto fail;
        PyObject *cells = atomic(PyList_AsTuple(w.cells)); /* a tuple, as the Python loop's */
        PyObject *fields = cells ? PyTuple_Pack(2, cells, w.values) : NULL;
        Py_XDECREF(cells);
        walked_clear(&w);
        PyObject *call_args = fields ? PyTuple_Pack(1, fields) : NULL;
        Py_XDECREF(fields);
        PyObject *made = call_args ? PyTuple_Type.tp_new((PyTypeObject *)row_type, call_args, NULL) : NULL;
        Py_XDECREF(call_args);
        if (made == NULL || PyDict_SetItem(out, key, made) < 0) {
            Py_XDECREF(made);
            goto fail;
        }
        Py_DECREF(made);
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* ---- key cells (rowbytes.key_cells, key_row) ---- */

typedef struct {
    char *data;
    Py_ssize_t size, capacity;
} Buffer;

static int buffer_add(Buffer *buf, const void *data, Py_ssize_t size) {
    if (buf->size + size > buf->capacity) {
        Py_ssize_t capacity = buf->capacity ? buf->capacity : 256;
        while (capacity < buf->size + size)
            capacity *= 2;
        char *grown = PyMem_Realloc(buf->data, capacity);
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        buf->data = grown;
        buf->capacity = capacity;
    }
    memcpy(buf->data + buf->size, data, size);
    buf->size += size;
    return 0;
}

static int buffer_byte(Buffer *buf, uint8_t byte) {
    return buffer_add(buf, &byte, 1);
}

static int buffer_i32(Buffer *buf, int32_t v) {
    uint8_t p[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    return buffer_add(buf, p, 4);
}

static uint8_t crc_over(uint8_t crc, const uint8_t *p, Py_ssize_t size) {
    for (Py_ssize_t i = 0; i < size; i++)
        crc = crc8_table[crc ^ p[i]];
    return crc;
}

/* Appends the key's cells to ``cells`` and their checksums to ``crcs``: 1, or 0 for a key the
 * compiled path leaves to Python (another type, an integer out of int64), or -1 on an error. */
static int encode_key(PyObject *key, Buffer *cells, Buffer *crcs) {
    PyObject *fast = PySequence_Fast(key, "a key is a sequence of (name, value) pairs");
    if (fast == NULL)
        return -1;
    int result = 1;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast) && result == 1; i++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(fast, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 || !PyUnicode_CheckExact(PyTuple_GET_ITEM(pair, 0))) {
            result = 0;
            break;
        }
        PyObject *value = PyTuple_GET_ITEM(pair, 1);
        Py_ssize_t name_size;
        const char *name = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(pair, 0), &name_size);
        if (name == NULL) {
            PyErr_Clear();
            result = 0;
            break;
        }
        uint8_t head[9];
        const char *payload = NULL;
        Py_ssize_t head_size, payload_size = 0;
        if (PyUnicode_CheckExact(value)) {
            payload = PyUnicode_AsUTF8AndSize(value, &payload_size);
            if (payload == NULL) {
                PyErr_Clear();
                result = 0;
                break;
            }
            head[0] = 0x03;
            head_size = 5;
        } else if (PyLong_CheckExact(value)) {
            int overflow;
            long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
            if (overflow || (v == -1 && PyErr_Occurred())) {
                PyErr_Clear();
                result = 0;
                break;
            }
            head[0] = 0x00;
            for (int k = 0; k < 8; k++)
                head[1 + k] = (uint8_t)((unsigned long long)v >> (8 * k));
            head_size = 9;
        } else if (PyBytes_CheckExact(value) || PyByteArray_CheckExact(value)) {
            payload = PyBytes_Check(value) ? PyBytes_AS_STRING(value) : PyByteArray_AS_STRING(value);
            payload_size = PyBytes_Check(value) ? PyBytes_GET_SIZE(value) : PyByteArray_GET_SIZE(value);
            head[0] = 0x07;
            head_size = 5;
        } else {
            result = 0;
            break;
        }
        if (head_size == 5) {
            if (payload_size > INT32_MAX - 5) {
                result = 0;
                break;
            }
            int32_t size = (int32_t)payload_size;
            for (int k = 0; k < 4; k++)
                head[1 + k] = (uint8_t)((uint32_t)size >> (8 * k));
        }
        uint8_t crc = crc_over(0, (const uint8_t *)name, name_size);
        crc = crc_over(crc, head, head_size);
        crc = crc_over(crc, (const uint8_t *)payload, payload_size);
        if (buffer_byte(cells, 0x03) < 0 || buffer_byte(cells, 0x04) < 0 ||
            buffer_i32(cells, (int32_t)name_size) < 0 || buffer_add(cells, name, name_size) < 0 ||
            buffer_byte(cells, 0x05) < 0 || buffer_i32(cells, (int32_t)(head_size + payload_size)) < 0 ||
            buffer_add(cells, head, head_size) < 0 || buffer_add(cells, payload, payload_size) < 0 ||
            buffer_byte(cells, 0x0A) < 0 || buffer_byte(cells, crc) < 0 || buffer_byte(crcs, crc) < 0)
            result = -1;
    }
    Py_DECREF(fast);
    return result;
}

/* key_row(key) -> HEADER + a row of the key alone, or None for a key left to Python:
 * rowbytes.key_row, compiled. */
static PyObject *key_row(PyObject *module, PyObject *key) {
    Buffer cells = {NULL, 0, 0}, crcs = {NULL, 0, 0};
    PyObject *result = NULL;
    static const uint8_t start[5] = {0x75, 0, 0, 0, 0x01};
    if (buffer_add(&cells, start, 5) < 0)
        goto done;
    int encoded = encode_key(key, &cells, &crcs);
    if (encoded < 0)
        goto done;
    if (encoded == 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    uint8_t crc = crc_over(0, (const uint8_t *)crcs.data, crcs.size);
    crc = crc8_table[crc]; /* the delete marker's byte, 0 */
    if (buffer_byte(&cells, 0x09) < 0 || buffer_byte(&cells, crc) < 0)
        goto done;
    result = PyBytes_FromStringAndSize(cells.data, cells.size);
done:
    PyMem_Free(cells.data);
    PyMem_Free(crcs.data);
    return result;
}

/* key_cells(key) -> (cells, checksums) or None for a key left to Python: rowbytes.key_cells,
 * compiled. */
static PyObject *key_cells(PyObject *module, PyObject *key) {
    Buffer cells = {NULL, 0, 0}, crcs = {NULL, 0, 0};
    PyObject *result = NULL;
    int encoded = encode_key(key, &cells, &crcs);
    if (encoded > 0)
        result = Py_BuildValue("(y#y#)", cells.data ? cells.data : "", cells.size,
                               crcs.data ? crcs.data : "", crcs.size);
    else if (encoded == 0)
        result = Py_NewRef(Py_None);
    PyMem_Free(cells.data);
    PyMem_Free(crcs.data);
    return result;
}


/* ---- capture's merge and writes of one target row ---- */

static PyObject *put_op;    /* "put" */
static PyObject *delete_op; /* "delete" */

/* The (name, stamp) key of a version in a row's cells: a 2-tuple, or -1 with TypeError. */
static int version_parts(PyObject *version, PyObject **name, PyObject **stamp) {
    if (!PyTuple_Check(version) || PyTuple_GET_SIZE(version) != 2) {
        PyErr_SetString(PyExc_TypeError, "a version is a (name, timestamp) tuple");
        return -1;
    }
    *name = PyTuple_GET_ITEM(version, 0);
    *stamp = PyTuple_GET_ITEM(version, 1);
    return 0;
}

static int contains(PyObject *container, PyObject *item) {
    if (PyAnySet_Check(container))
        return PySet_Contains(container, item);
    if (PyDict_Check(container))
        return PyDict_Contains(container, item);
    return PySequence_Contains(container, item);
}

/* merge_columns(cells, source, columns, row_time, arrived, added) -> wrote:
 * capture.merge_columns_in_python, compiled (see there). */
static PyObject *merge_columns(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "merge_columns takes 6 arguments");
        return NULL;
    }
    PyObject *cells = args[0], *columns = args[2], *row_time = args[3], *added = args[5];
    int arrived = PyObject_IsTrue(args[4]);
    if (arrived < 0)
        return NULL;
    if (!PyDict_Check(cells) || !PyDict_Check(columns)) {
        PyErr_SetString(PyExc_TypeError, "cells and columns are dicts");
        return NULL;
    }
    PyObject *source = PySequence_Fast(args[1], "source must be a sequence");
    if (source == NULL)
        return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(source);
    PyObject *index = PyDict_New(), *names = PyList_New(0), *gone = NULL;
    Py_ssize_t *name_of = PyMem_Malloc((count + 1) * sizeof(Py_ssize_t));
    int wrote = 0, failed = 1;
    if (index == NULL || names == NULL || name_of == NULL) {
        if (name_of == NULL)
            PyErr_NoMemory();
        goto done;
    }
    /* the names, in the order of dict.fromkeys([*source names, *cell names]) */
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *cell = PySequence_Fast_GET_ITEM(source, i);
        if (!PyTuple_Check(cell) || PyTuple_GET_SIZE(cell) != 4) {
            PyErr_SetString(PyExc_TypeError, "a source cell is a (name, ts, bytes, crc) tuple");
            goto done;
        }
        PyObject *name = PyTuple_GET_ITEM(cell, 0), *at = PyDict_GetItemWithError(index, name);
        if (at == NULL) {
            if (PyErr_Occurred())
                goto done;
            PyObject *position = PyLong_FromSsize_t(PyList_GET_SIZE(names));
            if (position == NULL || PyDict_SetItem(index, name, position) < 0 || PyList_Append(names, name) < 0) {
                Py_XDECREF(position);
                goto done;
            }
            Py_DECREF(position);
            name_of[i] = PyList_GET_SIZE(names) - 1;
        } else {
            name_of[i] = PyLong_AsSsize_t(at);
        }
    }
    Py_ssize_t pos = 0;
    PyObject *version, *value;
    while (PyDict_Next(cells, &pos, &version, &value)) {
        PyObject *name, *stamp;
        if (version_parts(version, &name, &stamp) < 0)
            goto done;
        int seen = PyDict_Contains(index, name);
        if (seen < 0)
            goto done;
        if (!seen) {
            if (PyDict_SetItem(index, name, Py_None) < 0 || PyList_Append(names, name) < 0)
                goto done;
        }
    }
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(names); k++) {
        PyObject *name = PyList_GET_ITEM(names, k);
        int skip = contains(added, name);
        if (skip < 0)
            goto done;
        if (skip)
            continue;
        PyObject *column = PyDict_GetItemWithError(columns, name), *when;
        if (column == NULL && PyErr_Occurred())
            goto done;
        if (row_time == Py_None) {
            when = column;
        } else if (column == NULL) {
            when = row_time;
        } else {
            int later = PyObject_RichCompareBool(row_time, column, Py_GT);
            if (later < 0)
                goto done;
            when = later ? row_time : column; /* max(column, row_time) */
        }
        if (when == Py_None)
            when = NULL;
        if (when == NULL && !arrived)
            continue;
        Py_INCREF(name);
        if (when != NULL)
            Py_INCREF(when);
        int ok = 1;
        for (Py_ssize_t i = 0; i < count && ok; i++) {
            if (name_of[i] != k)
                continue;
            PyObject *cell = PySequence_Fast_GET_ITEM(source, i);
            PyObject *key = atomic(PyTuple_Pack(2, name, PyTuple_GET_ITEM(cell, 1))), *encoded = NULL;
            /* a version the row has with the same bytes stays as it is (equal either way) */
            PyObject *there = key ? PyDict_GetItemWithError(cells, key) : NULL;
            int same = 0;
            if (there != NULL && PyTuple_Check(there) && PyTuple_GET_SIZE(there) == 2) {
                same = PyObject_RichCompareBool(PyTuple_GET_ITEM(there, 0), PyTuple_GET_ITEM(cell, 2), Py_EQ);
                if (same > 0)
                    same = PyObject_RichCompareBool(PyTuple_GET_ITEM(there, 1), PyTuple_GET_ITEM(cell, 3), Py_EQ);
            }
            if (key == NULL || PyErr_Occurred() || same < 0) {
                ok = 0;
            } else if (!same) {
                encoded = atomic(PyTuple_Pack(2, PyTuple_GET_ITEM(cell, 2), PyTuple_GET_ITEM(cell, 3)));
                ok = encoded != NULL && PyDict_SetItem(cells, key, encoded) == 0;
            }
            Py_XDECREF(key);
            Py_XDECREF(encoded);
            wrote = 1;
        }
        if (ok && when != NULL) { /* the versions not newer than ``when`` the source lacks */
            gone = PyList_New(0);
            ok = gone != NULL;
            pos = 0;
            while (ok && PyDict_Next(cells, &pos, &version, &value)) {
                PyObject *vname, *stamp;
                if (version_parts(version, &vname, &stamp) < 0) {
                    ok = 0;
                    break;
                }
                int hit = PyObject_RichCompareBool(vname, name, Py_EQ);
                if (hit > 0)
                    hit = PyObject_RichCompareBool(stamp, when, Py_LE);
                for (Py_ssize_t i = 0; hit > 0 && i < count; i++) {
                    if (name_of[i] != k)
                        continue;
                    int same = PyObject_RichCompareBool(stamp, PyTuple_GET_ITEM(PySequence_Fast_GET_ITEM(source, i), 1), Py_EQ);
                    if (same != 0)
                        hit = same < 0 ? -1 : 0; /* kept: the source has it */
                }
                if (hit < 0 || (hit > 0 && PyList_Append(gone, version) < 0))
                    ok = 0;
            }
            for (Py_ssize_t g = 0; ok && g < PyList_GET_SIZE(gone); g++)
                ok = PyDict_DelItem(cells, PyList_GET_ITEM(gone, g)) == 0;
            Py_CLEAR(gone);
        }
        Py_DECREF(name);
        Py_XDECREF(when);
        if (!ok)
            goto done;
    }
    failed = 0;
done:
    Py_DECREF(source);
    Py_XDECREF(index);
    Py_XDECREF(names);
    Py_XDECREF(gone);
    PyMem_Free(name_of);
    if (failed)
        return NULL;
    return PyBool_FromLong(wrote);
}

typedef struct {
    PyObject *name, *stamp, *value; /* borrowed; value NULL for a delete */
    int64_t at;
    Py_ssize_t column;
} Diff;

static int stamp_of(PyObject *stamp, int64_t *at) {
    if (!PyLong_Check(stamp))
        return 0;
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(stamp, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    *at = v;
    return 1;
}

static int compare_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

static PyObject *change_tuple(const Diff *d) {
    if (d->value != NULL)
        return atomic(PyTuple_Pack(4, put_op, d->name, d->value, d->stamp));
    return atomic(PyTuple_Pack(4, delete_op, d->name, Py_None, d->stamp));
}

/* row_changes(before, cells, max_versions) -> [CellChange] in the order they are safe to apply,
 * or None for a row left to Python (a timestamp that is not an int64):
 * capture.row_changes_in_python, compiled (see there). */
static PyObject *row_changes(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "row_changes takes 3 arguments");
        return NULL;
    }
    PyObject *before = args[0], *cells = args[1];
    if (!PyDict_Check(before) || !PyDict_Check(cells)) {
        PyErr_SetString(PyExc_TypeError, "before and cells are dicts");
        return NULL;
    }
    Py_ssize_t keep = PyLong_AsSsize_t(args[2]);
    if (keep == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (keep < 0)
        Py_RETURN_NONE;
    Py_ssize_t capacity = PyDict_GET_SIZE(before) + PyDict_GET_SIZE(cells) + 1, count = 0, puts;
    Diff *diffs = PyMem_Malloc(capacity * sizeof(Diff));
    int64_t *stamps = PyMem_Malloc(capacity * sizeof(int64_t));
    PyObject *columns = PyList_New(0), *index = PyDict_New(), *out = NULL;
    if (diffs == NULL || stamps == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (columns == NULL || index == NULL)
        goto done;
    Py_ssize_t pos = 0;
    PyObject *version, *value;
    while (PyDict_Next(cells, &pos, &version, &value)) {
        PyObject *name, *stamp;
        if (version_parts(version, &name, &stamp) < 0)
            goto done;
        PyObject *was = PyDict_GetItemWithError(before, version);
        if (was == NULL && PyErr_Occurred())
            goto done;
        if (was != NULL) {
            int same = PyObject_RichCompareBool(was, value, Py_EQ);
            if (same < 0)
                goto done;
            if (same)
                continue;
        }
        Diff *d = &diffs[count++];
        *d = (Diff){name, stamp, value, 0, 0};
        if (!stamp_of(stamp, &d->at))
            goto python;
    }
    puts = count;
    pos = 0;
    while (PyDict_Next(before, &pos, &version, &value)) {
        PyObject *name, *stamp;
        if (version_parts(version, &name, &stamp) < 0)
            goto done;
        int there = PyDict_Contains(cells, version);
        if (there < 0)
            goto done;
        if (there)
            continue;
        Diff *d = &diffs[count++];
        *d = (Diff){name, stamp, NULL, 0, 0};
        if (!stamp_of(stamp, &d->at))
            goto python;
    }
    /* the columns, in the order the changes name them first */
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *at = PyDict_GetItemWithError(index, diffs[i].name);
        if (at == NULL) {
            if (PyErr_Occurred())
                goto done;
            PyObject *position = PyLong_FromSsize_t(PyList_GET_SIZE(columns));
            if (position == NULL || PyDict_SetItem(index, diffs[i].name, position) < 0 ||
                PyList_Append(columns, diffs[i].name) < 0) {
                Py_XDECREF(position);
                goto done;
            }
            Py_DECREF(position);
            diffs[i].column = PyList_GET_SIZE(columns) - 1;
        } else {
            diffs[i].column = PyLong_AsSsize_t(at);
        }
    }
    if ((out = PyList_New(0)) == NULL)
        goto done;
    for (Py_ssize_t c = 0; c < PyList_GET_SIZE(columns); c++) {
        PyObject *name = PyList_GET_ITEM(columns, c);
        /* the column's versions before, and the newest of them (-1: none) */
        Py_ssize_t held = 0;
        int64_t newest = -1;
        int any = 0;
        pos = 0;
        while (PyDict_Next(before, &pos, &version, &value)) {
            PyObject *vname, *stamp;
            int64_t at;
            if (version_parts(version, &vname, &stamp) < 0)
                goto fail;
            int same = PyObject_RichCompareBool(vname, name, Py_EQ);
            if (same < 0)
                goto fail;
            if (!same)
                continue;
            if (!stamp_of(stamp, &at))
                goto python;
            stamps[held++] = at;
            if (!any || at > newest)
                newest = at;
            any = 1;
        }
        if (!any)
            newest = -1;
        /* puts that become the newest versions go first when what they push out is deleted */
        int first = 0;
        for (Py_ssize_t i = 0; i < puts; i++)
            if (diffs[i].column == c && diffs[i].at > newest) {
                stamps[held++] = diffs[i].at;
                first = 1;
            }
        if (first && held > keep) {
            qsort(stamps, held, sizeof(int64_t), compare_desc);
            for (Py_ssize_t h = keep; h < held && first; h++) {
                int deleted = 0;
                for (Py_ssize_t i = puts; i < count && !deleted; i++)
                    deleted = diffs[i].column == c && diffs[i].at == stamps[h];
                first = deleted;
            }
        }
        for (int pass = 0; pass < 3; pass++) {
            Py_ssize_t low = pass == 1 ? puts : 0, high = pass == 1 ? count : puts;
            for (Py_ssize_t i = low; i < high; i++) {
                if (diffs[i].column != c)
                    continue;
                int early = first && diffs[i].at > newest;
                if ((pass == 0 && !early) || (pass == 2 && early))
                    continue;
                PyObject *change = change_tuple(&diffs[i]);
                if (change == NULL || PyList_Append(out, change) < 0) {
                    Py_XDECREF(change);
                    goto fail;
                }
                Py_DECREF(change);
            }
        }
    }
    goto done;
python:
    Py_CLEAR(out);
    out = Py_NewRef(Py_None);
    goto done;
fail:
    Py_CLEAR(out);
done:
    PyMem_Free(diffs);
    PyMem_Free(stamps);
    Py_XDECREF(columns);
    Py_XDECREF(index);
    return out;
}

/* update_bodies(pk_cells, pk_crcs, changes, max_cells) -> [HEADER + row] or None for changes
 * left to Python: writer.update_bodies_in_python (the rounds of writer.update_rounds, each
 * encoded as writer.encode_update encodes it), compiled. */
static PyObject *update_bodies(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "update_bodies takes 4 arguments");
        return NULL;
    }
    if (!PyBytes_Check(args[0]) || !PyBytes_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "the key's cells and checksums are bytes");
        return NULL;
    }
    Py_ssize_t max_cells = PyLong_AsSsize_t(args[3]);
    if (max_cells == -1 && PyErr_Occurred())
        return NULL;
    if (max_cells < 1) {
        PyErr_SetString(PyExc_ValueError, "max_cells must be positive");
        return NULL;
    }
    PyObject *changes = PySequence_Fast(args[2], "changes must be a sequence");
    if (changes == NULL)
        return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(changes), rounds = 0;
    Py_ssize_t *column = PyMem_Malloc((count + 1) * sizeof(Py_ssize_t));
    Py_ssize_t *round_of = PyMem_Malloc((count + 1) * sizeof(Py_ssize_t));
    Py_ssize_t *sizes = PyMem_Calloc(count + 1, sizeof(Py_ssize_t));
    PyObject *index = PyDict_New(), *out = NULL;
    Buffer row = {NULL, 0, 0};
    Py_ssize_t columns = 0;
    if (column == NULL || round_of == NULL || sizes == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (index == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *change = PySequence_Fast_GET_ITEM(changes, i);
        if (!PyTuple_Check(change) || PyTuple_GET_SIZE(change) != 4)
            goto python;
        PyObject *name = PyTuple_GET_ITEM(change, 1), *at = PyDict_GetItemWithError(index, name);
        if (at == NULL) {
            if (PyErr_Occurred())
                goto done;
            PyObject *position = PyLong_FromSsize_t(columns);
            if (position == NULL || PyDict_SetItem(index, name, position) < 0) {
                Py_XDECREF(position);
                goto done;
            }
            Py_DECREF(position);
            column[i] = columns++;
        } else {
            column[i] = PyLong_AsSsize_t(at);
        }
    }
    /* writer.update_rounds: each change of a column in a later round than the one before, in a
     * round with room */
    for (Py_ssize_t c = 0; c < columns; c++) {
        Py_ssize_t at = 0;
        for (Py_ssize_t i = 0; i < count; i++) {
            if (column[i] != c)
                continue;
            while (at < rounds && sizes[at] >= max_cells)
                at++;
            if (at == rounds)
                rounds++;
            round_of[i] = at;
            sizes[at]++;
            at++;
        }
    }
    const uint8_t *pk = (const uint8_t *)PyBytes_AS_STRING(args[0]);
    const uint8_t *pk_crcs = (const uint8_t *)PyBytes_AS_STRING(args[1]);
    uint8_t pk_crc = crc_over(0, pk_crcs, PyBytes_GET_SIZE(args[1]));
    if ((out = PyList_New(0)) == NULL)
        goto done;
    for (Py_ssize_t r = 0; r < rounds; r++) {
        static const uint8_t start[5] = {0x75, 0, 0, 0, 0x01};
        row.size = 0;
        if (buffer_add(&row, start, 5) < 0 || buffer_add(&row, pk, PyBytes_GET_SIZE(args[0])) < 0 ||
            buffer_byte(&row, 0x02) < 0)
            goto fail;
        uint8_t crc = pk_crc;
        for (Py_ssize_t c = 0; c < columns; c++)
            for (Py_ssize_t i = 0; i < count; i++) {
                if (column[i] != c || round_of[i] != r)
                    continue;
                PyObject *change = PySequence_Fast_GET_ITEM(changes, i);
                PyObject *op = PyTuple_GET_ITEM(change, 0);
                int put = PyUnicode_Check(op) && PyUnicode_CompareWithASCIIString(op, "put") == 0;
                if (put) { /* the cell as read: (bytes, crc), its last two items */
                    PyObject *value = PyTuple_GET_ITEM(change, 2);
                    if (!PyTuple_Check(value) || PyTuple_GET_SIZE(value) < 2)
                        goto python;
                    PyObject *cell = PyTuple_GET_ITEM(value, PyTuple_GET_SIZE(value) - 2);
                    PyObject *cell_crc = PyTuple_GET_ITEM(value, PyTuple_GET_SIZE(value) - 1);
                    if (!PyBytes_Check(cell) || !PyLong_Check(cell_crc))
                        goto python;
                    long checksum = PyLong_AsLong(cell_crc);
                    if (checksum < 0 || checksum > 255) {
                        PyErr_Clear();
                        goto python;
                    }
                    if (buffer_add(&row, PyBytes_AS_STRING(cell), PyBytes_GET_SIZE(cell)) < 0)
                        goto fail;
                    crc = crc8_table[crc ^ (uint8_t)checksum];
                    continue;
                }
                /* a delete of one version: name, 0x06 OP_DELETE_ONE, 0x07 ts, its checksum
                 * over the timestamp before the operation (writer._delete_version_cell) */
                PyObject *name = PyTuple_GET_ITEM(change, 1);
                int64_t at;
                if (!PyUnicode_CheckExact(name) || !stamp_of(PyTuple_GET_ITEM(change, 3), &at))
                    goto python;
                Py_ssize_t name_size;
                const char *raw = PyUnicode_AsUTF8AndSize(name, &name_size);
                if (raw == NULL) {
                    PyErr_Clear();
                    goto python;
                }
                uint8_t packed[8];
                for (int k = 0; k < 8; k++)
                    packed[k] = (uint8_t)((uint64_t)at >> (8 * k));
                uint8_t cell_crc = crc_over(0, (const uint8_t *)raw, name_size);
                cell_crc = crc_over(cell_crc, packed, 8);
                cell_crc = crc8_table[cell_crc ^ 0x03];
                static const uint8_t op_delete[3] = {0x06, 0x03, 0x07};
                if (buffer_byte(&row, 0x03) < 0 || buffer_byte(&row, 0x04) < 0 ||
                    buffer_i32(&row, (int32_t)name_size) < 0 || buffer_add(&row, raw, name_size) < 0 ||
                    buffer_add(&row, op_delete, 3) < 0 || buffer_add(&row, packed, 8) < 0 ||
                    buffer_byte(&row, 0x0A) < 0 || buffer_byte(&row, cell_crc) < 0)
                    goto fail;
                crc = crc8_table[crc ^ cell_crc];
            }
        crc = crc8_table[crc]; /* the delete marker's byte, 0 */
        if (buffer_byte(&row, 0x09) < 0 || buffer_byte(&row, crc) < 0)
            goto fail;
        PyObject *body = PyBytes_FromStringAndSize(row.data, row.size);
        if (body == NULL || PyList_Append(out, body) < 0) {
            Py_XDECREF(body);
            goto fail;
        }
        Py_DECREF(body);
    }
    goto done;
python:
    Py_CLEAR(out);
    out = Py_NewRef(Py_None);
    goto done;
fail:
    Py_CLEAR(out);
done:
    Py_DECREF(changes);
    Py_XDECREF(index);
    PyMem_Free(column);
    PyMem_Free(round_of);
    PyMem_Free(sizes);
    PyMem_Free(row.data);
    return out;
}


/* ---- protobuf answers read without message objects: BatchGetRow's rows, GetStreamRecord's
 * records. The wire format (varint, 64-bit, length-delimited, 32-bit fields; groups are not
 * used by these messages and are malformed here); a singular field's last value counts. ---- */

typedef struct {
    uint32_t field;
    int wire;
    uint64_t value;         /* wire 0 */
    Py_ssize_t start, end;  /* wire 2: the bytes */
} PbField;

static int pb_varint(const uint8_t *b, Py_ssize_t n, Py_ssize_t *pos, uint64_t *value) {
    uint64_t v = 0;
    for (int shift = 0; shift < 70 && *pos < n; shift += 7) {
        uint8_t c = b[(*pos)++];
        if (shift < 64)
            v |= (uint64_t)(c & 0x7F) << shift;
        if (!(c & 0x80)) {
            *value = v;
            return 0;
        }
    }
    return malformed("a varint is truncated or too long", *pos);
}

/* The field at *pos, whose end is before ``end``: 0, 1 at the end, -1 with ValueError. */
static int pb_next(const uint8_t *b, Py_ssize_t end, Py_ssize_t *pos, PbField *f) {
    if (*pos >= end)
        return 1;
    uint64_t tag, size;
    if (pb_varint(b, end, pos, &tag) < 0)
        return -1;
    f->field = (uint32_t)(tag >> 3);
    f->wire = (int)(tag & 7);
    if (f->field == 0 || (tag >> 3) > 0x1FFFFFFF)
        return malformed("a field number is invalid", *pos);
    switch (f->wire) {
    case 0:
        return pb_varint(b, end, pos, &f->value) < 0 ? -1 : 0;
    case 1:
        if (end - *pos < 8)
            return malformed("a 64-bit field is truncated", *pos);
        *pos += 8;
        return 0;
    case 5:
        if (end - *pos < 4)
            return malformed("a 32-bit field is truncated", *pos);
        *pos += 4;
        return 0;
    case 2:
        if (pb_varint(b, end, pos, &size) < 0)
            return -1;
        if (size > (uint64_t)(end - *pos))
            return malformed("a length-delimited field is truncated", *pos);
        f->start = *pos;
        f->end = *pos + (Py_ssize_t)size;
        *pos = f->end;
        return 0;
    default:
        return malformed("a field of an unexpected wire type", *pos);
    }
}

/* batch_get_rows(body) -> [(is_ok, row)] of the first table, or None when the answer has no
 * table: the fields of BatchGetRowResponse.tables[0].rows that capture reads. */
static PyObject *batch_get_rows(PyObject *module, PyObject *arg) {
    Py_buffer view;
    if (get_bytes(arg, &view) < 0)
        return NULL;
    const uint8_t *b = view.buf;
    Py_ssize_t n = view.len, pos = 0, table_start = -1, table_end = -1;
    PyObject *rows = NULL;
    PbField f;
    int more;
    while ((more = pb_next(b, n, &pos, &f)) == 0)
        if (f.field == 1 && f.wire == 2 && table_start < 0) {
            table_start = f.start;
            table_end = f.end;
        } else if (f.field == 1) {
            if (f.wire != 2) {
                malformed("tables is not a message", pos);
                goto done;
            }
        }
    if (more < 0)
        goto done;
    if (table_start < 0) {
        rows = Py_NewRef(Py_None);
        goto done;
    }
    if ((rows = PyList_New(0)) == NULL)
        goto done;
    pos = table_start;
    while ((more = pb_next(b, table_end, &pos, &f)) == 0) {
        if (f.field != 2)
            continue;
        if (f.wire != 2)
            goto wrong;
        Py_ssize_t at = f.start, row_start = 0, row_end = 0;
        int ok = 0, inner;
        PbField g;
        while ((inner = pb_next(b, f.end, &at, &g)) == 0) {
            if (g.field == 1) {
                if (g.wire != 0)
                    goto wrong;
                ok = g.value != 0;
            } else if (g.field == 4) {
                if (g.wire != 2)
                    goto wrong;
                row_start = g.start;
                row_end = g.end;
            }
        }
        if (inner < 0)
            goto fail;
        PyObject *row = PyBytes_FromStringAndSize((const char *)b + row_start, row_end - row_start);
        PyObject *item = row ? Py_BuildValue("(ON)", ok ? Py_True : Py_False, row) : NULL;
        if (item == NULL || PyList_Append(rows, item) < 0) {
            Py_XDECREF(item);
            goto fail;
        }
        Py_DECREF(item);
    }
    if (more < 0)
        goto fail;
    goto done;
wrong:
    malformed("a field of another wire type than its message's", pos);
fail:
    Py_CLEAR(rows);
done:
    PyBuffer_Release(&view);
    return rows;
}

/* stream_records(body) -> ([(action_type, record, origin_record or None)], next_shard_iterator
 * or None): GetStreamRecordResponse as RawClient.stream_record_bytes reads it (origin_record,
 * field 3 of a StreamRecord, is tsmigrate's StreamRecordOrigin). An action_type of no known
 * value is left unset, as a closed enum's is; a record without action_type or record is
 * malformed (the message requires them). */
static PyObject *stream_records(PyObject *module, PyObject *arg) {
    Py_buffer view;
    if (get_bytes(arg, &view) < 0)
        return NULL;
    const uint8_t *b = view.buf;
    Py_ssize_t n = view.len, pos = 0, next_start = -1, next_end = -1;
    PyObject *records = PyList_New(0), *result = NULL;
    PbField f;
    int more;
    if (records == NULL)
        goto done;
    while ((more = pb_next(b, n, &pos, &f)) == 0) {
        if (f.field == 2) {
            if (f.wire != 2)
                goto wrong;
            next_start = f.start;
            next_end = f.end;
            continue;
        }
        if (f.field != 1)
            continue;
        if (f.wire != 2)
            goto wrong;
        Py_ssize_t at = f.start, row_start = -1, row_end = -1, origin_start = -1, origin_end = -1;
        long action = 0;
        int inner;
        PbField g;
        while ((inner = pb_next(b, f.end, &at, &g)) == 0) {
            if (g.field == 1) {
                if (g.wire != 0)
                    goto wrong;
                if (g.value >= 1 && g.value <= 3)
                    action = (long)g.value;
            } else if (g.field == 2 || g.field == 3) {
                if (g.wire != 2)
                    goto wrong;
                if (g.field == 2) {
                    row_start = g.start;
                    row_end = g.end;
                } else {
                    origin_start = g.start;
                    origin_end = g.end;
                }
            }
        }
        if (inner < 0)
            goto done;
        if (action == 0 || row_start < 0) {
            malformed("a stream record lacks its action or its row", f.start);
            goto done;
        }
        PyObject *row = PyBytes_FromStringAndSize((const char *)b + row_start, row_end - row_start);
        PyObject *origin = row == NULL ? NULL
                           : origin_start < 0 ? Py_NewRef(Py_None)
                           : PyBytes_FromStringAndSize((const char *)b + origin_start, origin_end - origin_start);
        PyObject *item = origin ? Py_BuildValue("(lNN)", action, row, origin) : NULL;
        if (item == NULL) {
            if (origin == NULL)
                Py_XDECREF(row);
            goto done;
        }
        if (PyList_Append(records, item) < 0) {
            Py_DECREF(item);
            goto done;
        }
        Py_DECREF(item);
    }
    if (more < 0)
        goto done;
    PyObject *following = next_start < 0 ? Py_NewRef(Py_None)
                          : PyUnicode_DecodeUTF8((const char *)b + next_start, next_end - next_start, NULL);
    if (following != NULL)
        result = Py_BuildValue("(ON)", records, following);
    goto done;
wrong:
    malformed("a field of another wire type than its message's", pos);
done:
    Py_XDECREF(records);
    PyBuffer_Release(&view);
    return result;
}

/* plain_key(pk, attributes, source_names, sources, target_names, allowed): the target key of a
 * source key and the newest values of its columns where neither key derives a column
 * (transform.RowTransform.key_of, whose general path is its Python twin): the source key's
 * columns, named as ``source_names`` says in that order, then the values of ``attributes`` (a
 * dict) whose names are in ``sources``, give each column of ``target_names`` its value, which
 * must be of a type in its ``allowed`` frozenset. A tuple of (name, value), or None for
 * anything else (names out of order, a column missing, a value of another type, a key that is
 * not (name, value) pairs): the general path then gives the key or the error. */
static PyObject *plain_key(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6 || !PyDict_Check(args[1]) || !PyTuple_Check(args[2]) || !PyAnySet_Check(args[3])
        || !PyTuple_Check(args[4]) || !PyTuple_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError,
                        "plain_key(pk, attributes, source_names, sources, target_names, allowed)");
        return NULL;
    }
    PyObject *pk = args[0], *attributes = args[1], *source_names = args[2], *sources = args[3];
    PyObject *target_names = args[4], *allowed = args[5];
    Py_ssize_t width = PyTuple_GET_SIZE(target_names);
    if (PyTuple_GET_SIZE(allowed) != width)
        Py_RETURN_NONE;
    PyObject *items = PySequence_Fast(pk, "a key is a sequence of (name, value)");
    if (items == NULL) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(items);
    PyObject *result = NULL;
    if (n != PyTuple_GET_SIZE(source_names))
        goto none;
    PyObject **cells = PySequence_Fast_ITEMS(items);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = cells[i];
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2)
            goto none;
        int same = PyObject_RichCompareBool(PyTuple_GET_ITEM(item, 0), PyTuple_GET_ITEM(source_names, i), Py_EQ);
        if (same < 0)
            goto fail;
        if (!same)
            goto none;
    }
    result = PyTuple_New(width);
    if (result == NULL)
        goto fail;
    for (Py_ssize_t j = 0; j < width; j++) {
        PyObject *name = PyTuple_GET_ITEM(target_names, j);
        PyObject *value = NULL;
        PyObject *pair = NULL;
        for (Py_ssize_t i = 0; i < n && value == NULL; i++) { /* the key's own columns first */
            int same = PyObject_RichCompareBool(PyTuple_GET_ITEM(source_names, i), name, Py_EQ);
            if (same < 0)
                goto fail;
            if (same) {
                pair = cells[i];
                value = PyTuple_GET_ITEM(pair, 1);
            }
        }
        if (value == NULL) {
            int wanted = PySet_Contains(sources, name);
            if (wanted < 0)
                goto fail;
            if (wanted) {
                value = PyDict_GetItemWithError(attributes, name);
                if (value == NULL && PyErr_Occurred())
                    goto fail;
            }
            if (value == NULL)
                goto none; /* the row has no such column */
        }
        PyObject *types = PyTuple_GET_ITEM(allowed, j);
        if (!PyAnySet_Check(types))
            goto none;
        int fits = PySet_Contains(types, (PyObject *)Py_TYPE(value));
        if (fits < 0)
            goto fail;
        if (!fits)
            goto none;
        if (pair != NULL && PyTuple_CheckExact(pair) && PyTuple_GET_ITEM(pair, 0) == name) {
            Py_INCREF(pair); /* the key's own (name, value), as it is */
        } else {
            pair = atomic(PyTuple_Pack(2, name, value));
            if (pair == NULL)
                goto fail;
        }
        PyTuple_SET_ITEM(result, j, pair);
    }
    Py_DECREF(items);
    return atomic(result);
none:
    Py_XDECREF(result);
    Py_DECREF(items);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(result);
    Py_DECREF(items);
    return NULL;
}

static PyMethodDef methods[] = {
    {"page_totals", (PyCFunction)page_totals, METH_O,
     "page_totals(buf) -> (rows, sum of digests): rowbytes.page_totals, compiled."},
    {"rekey_page", (PyCFunction)(void (*)(void))rekey_page, METH_FASTCALL,
     "rekey_page(buf, parts, moved) -> (rows, sum of digests, bytes) or None "
     "for a row the fast path does not build: rekey.Rekey.page, compiled."},
    {"row_cells", (PyCFunction)(void (*)(void))row_cells, METH_FASTCALL,
     "row_cells(buf, wanted) -> (key, cells, values): rowbytes.row_cells, compiled."},
    {"row_versions", (PyCFunction)row_versions, METH_O,
     "row_versions(buf) -> {(name, ts): (bytes, crc)}: a row's cells by version, compiled."},
    {"records", (PyCFunction)(void (*)(void))records, METH_FASTCALL,
     "records(encoded, wanted, record) -> [record]: capture.read_records, compiled."},
    {"raw_rows", (PyCFunction)(void (*)(void))raw_rows, METH_FASTCALL,
     "raw_rows(found, wanted, row) -> {key: row}: capture.raw_rows, compiled."},
    {"key_row", (PyCFunction)key_row, METH_O,
     "key_row(key) -> bytes or None: rowbytes.key_row, compiled."},
    {"key_cells", (PyCFunction)key_cells, METH_O,
     "key_cells(key) -> (cells, checksums) or None: rowbytes.key_cells, compiled."},
    {"merge_columns", (PyCFunction)(void (*)(void))merge_columns, METH_FASTCALL,
     "merge_columns(cells, source, columns, row_time, arrived, added) -> wrote: capture's merge, compiled."},
    {"row_changes", (PyCFunction)(void (*)(void))row_changes, METH_FASTCALL,
     "row_changes(before, cells, max_versions) -> [CellChange] or None: capture's diff, compiled."},
    {"update_bodies", (PyCFunction)(void (*)(void))update_bodies, METH_FASTCALL,
     "update_bodies(pk_cells, pk_crcs, changes, max_cells) -> [bytes] or None: UpdateRow rounds, compiled."},
    {"batch_get_rows", (PyCFunction)batch_get_rows, METH_O,
     "batch_get_rows(body) -> [(is_ok, row)] of BatchGetRowResponse.tables[0], or None."},
    {"plain_key", (PyCFunction)(void (*)(void))plain_key, METH_FASTCALL,
     "plain_key(pk, attributes, source_names, sources, target_names, allowed) -> key or None: "
     "transform.RowTransform.key_of's direct path, compiled."},
    {"stream_records", (PyCFunction)stream_records, METH_O,
     "stream_records(body) -> ([(action_type, record, origin or None)], next iterator or None)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_rowwalk", "Compiled row walks of the rewrite (see rekey.py, rowbytes.py, capture.py).", -1,
    methods,
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
    put_op = PyUnicode_InternFromString("put");
    delete_op = PyUnicode_InternFromString("delete");
    if (put_op == NULL || delete_op == NULL)
        return NULL;
    if (blake2b == NULL || digest_kwnames == NULL || digest_size == NULL || digest_name == NULL)
        return NULL;
    return PyModule_Create(&module_def);
}

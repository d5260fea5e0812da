/* loadtests.client._fastread: the raw user's per-read path in C (optional; the Python path is the
 * reference, loadtests/client/raw_body.py and body_mux.py).
 *
 * A Reader is one body's libev io-watcher callback (MuxedBody.reader). Per read it receives with the
 * kernel's arrival stamp as kernel_stamps.recv_stamped does, then either takes the read itself (a
 * read that is exactly one chunk holding one whole ordinary "data: {json}" frame: no Python frame
 * runs) or hands it to the Python code at a point where nothing differs from what that code would
 * have seen:
 *   A  nothing consumed but the receive: muxed._took(data, arrived, read_at, body.take_read)
 *   B  llhttp fed:                       muxed._took(data, arrived, read_at, body.take_fed)
 *                                        (take_failed_feed with the HTTPParseError if llhttp refused)
 * Decide, then commit: every precondition is checked and the frame judged before any Python-visible
 * state is written; the writes are those of the Python path, field by field, float by float. The
 * body's, SSE parser's and tracker's __slots__ are read and written at their member offsets, found
 * once. The C keeps no state but constants (those offsets among them) and counters: the Python
 * objects hold it all, so C and Python reads may interleave. When in doubt, it falls back. Exceptions: an Exception ends the body through
 * muxed._end(exc) as readable does; a BaseException propagates. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#ifdef Py_GIL_DISABLED
#error "the compiled reader relies on the GIL (one receive buffer a process): the Python path reads here"
#endif
#ifndef FASTREAD_SOURCE_SHA
#define FASTREAD_SOURCE_SHA "unknown"
#endif
#ifndef SO_TIMESTAMPNS
#define SO_TIMESTAMPNS 35
#endif
#define MAX_READ 65536

static char read_buffer[MAX_READ]; /* one per process: the GIL is held from the receive to the copy */

/* time.monotonic() and time.time(), computed as the time module computes them */
static double
monotonic_now(void)
{
#if PY_VERSION_HEX >= 0x030D0000
    PyTime_t t;
    (void)PyTime_Monotonic(&t);
    return PyTime_AsSecondsDouble(t);
#else
    return _PyTime_AsSecondsDouble(_PyTime_GetMonotonicClock());
#endif
}

static double
wall_now(void)
{
#if PY_VERSION_HEX >= 0x030D0000
    PyTime_t t;
    (void)PyTime_Time(&t);
    return PyTime_AsSecondsDouble(t);
#else
    return _PyTime_AsSecondsDouble(_PyTime_GetSystemClock());
#endif
}

/* recv_stamped's stamp: min(read_at, seconds + nanoseconds * 1e-9 - (time.time() - read_at)) */
static double
arrival(long sec, long nsec, double wall, double read_at)
{
    double x = ((double)sec + (double)nsec * 1e-9) - (wall - read_at);
    return x < read_at ? x : read_at;
}

typedef struct {
    PyObject_HEAD
    PyObject *body;   /* RawBody */
    PyObject *muxed;  /* MuxedBody or None */
    PyObject *socket; /* the OS socket (muxed only) */
    PyObject *took;   /* muxed._took */
    PyObject *mux;    /* muxed._mux, the BodyMux that counts reads */
    PyObject *take_read, *take_fed, *take_failed_feed; /* the body's bound methods */
    PyObject *raw, *parser, *tracker; /* the body's */
    PyObject *frame_m, *feed_m;       /* body._frame (tracker.frame), body._feed (parser.feed) */
    Py_ssize_t size;
    int stamped;
    int direct; /* body._direct: reads go straight to llhttp (response_end.feed_body) */
    int plain;  /* the body, parser and tracker are of the exact classes whose code the C repeats */
    Py_ssize_t fast, to_a, to_b;
} Reader;

static PyObject *s_ended, *s_socket, *s_size, *s_stamped, *s_took, *s_take_read, *s_take_fed,
    *s_take_failed_feed, *s_end, *s_readable, *s_fileno;
static PyObject *partial, *one;
static PyObject *feed_body, *http_parse_error, *json_loads;
/* the classes whose code the C repeats, looked up when the first Reader is made (raw_body imports this
 * module before it defines RawBody) */
static PyObject *raw_body_class, *sse_parser_class, *stream_tracker_class, *tracker_frame, *parser_feed;
/* attribute names */
static PyObject *s_frame_m, *s_feed_m, *s_raw, *s_parser, *s_tracker, *s_direct, *s_body_buffer, *s_message_complete,
    *s_ttft, *s_finish_reason, *s_mux, *s_reads, *s_last_read;
/* The __slots__ of the exact classes that fast_take reads and writes (RawBody, SSEParser, StreamTracker),
 * found once with the classes: a read or write is then one load or store at the member's offset, as
 * PyMember_GetOne and PyMember_SetOne make it for an object member, without the attribute look-up. */
enum {
    B_TRACKER, B_PARSER, B_RAW, B_FRAME_M, B_FEED_M, B_STARTED, B_T, B_WAIT,
    P_PENDING_CR, P_FRAME, P_BUFFER, P_FRAME_BYTES, P_MAX_LINE_BYTES,
    K_STREAM_ENDED, K_FRAMES, K_LAST_T, K_MAX_GAP, K_LAST_DATA_T, K_MAX_DATA_GAP, K_TTFT, K_FINISH_REASON, K_BYTES,
    K_DATA, N_SLOTS
};
static Py_ssize_t slot_offsets[N_SLOTS];
static int slots_found; /* 1 every slot above is a writable object member of its class; 0 the Python path reads */
#define SLOT(obj, i) (*(PyObject **)((char *)(obj) + slot_offsets[i]))

/* JSON keys and values */
static PyObject *k_error, *k_usage, *k_object, *k_choices, *k_delta, *k_content, *k_reasoning_content, *k_tool_calls,
    *k_text, *k_finish_reason, *v_abort, *v_data;

static int
reader_traverse(Reader *self, visitproc visit, void *arg)
{
    Py_VISIT(self->body);
    Py_VISIT(self->muxed);
    Py_VISIT(self->socket);
    Py_VISIT(self->took);
    Py_VISIT(self->mux);
    Py_VISIT(self->take_read);
    Py_VISIT(self->take_fed);
    Py_VISIT(self->take_failed_feed);
    Py_VISIT(self->raw);
    Py_VISIT(self->parser);
    Py_VISIT(self->tracker);
    Py_VISIT(self->frame_m);
    Py_VISIT(self->feed_m);
    return 0;
}

static int
reader_clear(Reader *self)
{
    Py_CLEAR(self->body);
    Py_CLEAR(self->muxed);
    Py_CLEAR(self->socket);
    Py_CLEAR(self->took);
    Py_CLEAR(self->mux);
    Py_CLEAR(self->take_read);
    Py_CLEAR(self->take_fed);
    Py_CLEAR(self->take_failed_feed);
    Py_CLEAR(self->raw);
    Py_CLEAR(self->parser);
    Py_CLEAR(self->tracker);
    Py_CLEAR(self->frame_m);
    Py_CLEAR(self->feed_m);
    return 0;
}

static void
reader_dealloc(Reader *self)
{
    PyObject_GC_UnTrack(self);
    reader_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *import_attribute(const char *module_name, const char *name);

/* The body, its parser and its tracker are still of the exact classes (``__class__`` can be assigned). */
static int
exact_classes(Reader *self)
{
    return (PyObject *)Py_TYPE(self->body) == raw_body_class && (PyObject *)Py_TYPE(self->parser) == sse_parser_class &&
           (PyObject *)Py_TYPE(self->tracker) == stream_tracker_class;
}

/* The offset of ``name``'s member in ``cls``: a writable object member (T_OBJECT_EX), or -1. */
static Py_ssize_t
member_offset(PyObject *cls, const char *name)
{
    PyObject *descriptor = PyObject_GetAttrString(cls, name);
    Py_ssize_t offset = -1;
    if (descriptor == NULL) {
        PyErr_Clear();
        return -1;
    }
    if (Py_IS_TYPE(descriptor, &PyMemberDescr_Type)) {
        PyMemberDef *member = ((PyMemberDescrObject *)descriptor)->d_member;
        if (member->type == T_OBJECT_EX && !(member->flags & READONLY) && member->offset > 0)
            offset = member->offset;
    }
    Py_DECREF(descriptor);
    return offset;
}

static int
find_slots(void)
{
    static const struct {
        int index, owner; /* 0 RawBody, 1 SSEParser, 2 StreamTracker */
        const char *name;
    } table[N_SLOTS] = {
        {B_TRACKER, 0, "tracker"}, {B_PARSER, 0, "parser"}, {B_RAW, 0, "raw"}, {B_FRAME_M, 0, "_frame"},
        {B_FEED_M, 0, "_feed"}, {B_STARTED, 0, "_started"}, {B_T, 0, "t"}, {B_WAIT, 0, "wait"},
        {P_PENDING_CR, 1, "_pending_cr"}, {P_FRAME, 1, "_frame"}, {P_BUFFER, 1, "_buffer"},
        {P_FRAME_BYTES, 1, "_frame_bytes"}, {P_MAX_LINE_BYTES, 1, "max_line_bytes"},
        {K_STREAM_ENDED, 2, "stream_ended"}, {K_FRAMES, 2, "frames"}, {K_LAST_T, 2, "_last_t"},
        {K_MAX_GAP, 2, "_max_gap"}, {K_LAST_DATA_T, 2, "_last_data_t"}, {K_MAX_DATA_GAP, 2, "_max_data_gap"},
        {K_TTFT, 2, "_ttft"}, {K_FINISH_REASON, 2, "_finish_reason"}, {K_BYTES, 2, "bytes"}, {K_DATA, 2, "_data"},
    };
    PyObject *owners[3] = {raw_body_class, sse_parser_class, stream_tracker_class};
    for (int i = 0; i < N_SLOTS; i++)
        if ((slot_offsets[table[i].index] = member_offset(owners[table[i].owner], table[i].name)) < 0)
            return 0;
    return 1;
}

/* A subclass (of the tracker, say) may judge otherwise: only the exact classes, their own methods
 * bound, are read in C, and only while every slot the C uses was found; 1 plain, 0 not (every read
 * goes to the Python path), -1 an error. */
static int
plain_classes(Reader *self)
{
    if (raw_body_class == NULL) {
        if (!(raw_body_class = import_attribute("loadtests.client.raw_body", "RawBody")) ||
            !(sse_parser_class = import_attribute("loadtests.client.sse", "SSEParser")) ||
            !(stream_tracker_class = import_attribute("loadtests.client.outcome", "StreamTracker")) ||
            !(tracker_frame = PyObject_GetAttrString(stream_tracker_class, "frame")) ||
            !(parser_feed = PyObject_GetAttrString(sse_parser_class, "feed"))) {
            Py_CLEAR(raw_body_class);
            return -1;
        }
        slots_found = find_slots();
    }
    return slots_found && exact_classes(self) && PyMethod_Check(self->frame_m) &&
           PyMethod_GET_FUNCTION(self->frame_m) == tracker_frame && PyMethod_GET_SELF(self->frame_m) == self->tracker &&
           PyMethod_Check(self->feed_m) && PyMethod_GET_FUNCTION(self->feed_m) == parser_feed &&
           PyMethod_GET_SELF(self->feed_m) == self->parser;
}

static int
reader_init(Reader *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"body", "muxed", NULL};
    PyObject *body, *muxed = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:Reader", kwlist, &body, &muxed))
        return -1;
    reader_clear(self);
    self->body = Py_NewRef(body);
    self->muxed = Py_NewRef(muxed);
    if (!(self->take_read = PyObject_GetAttr(body, s_take_read)) ||
        !(self->take_fed = PyObject_GetAttr(body, s_take_fed)) ||
        !(self->take_failed_feed = PyObject_GetAttr(body, s_take_failed_feed)) ||
        !(self->raw = PyObject_GetAttr(body, s_raw)) || !(self->parser = PyObject_GetAttr(body, s_parser)) ||
        !(self->tracker = PyObject_GetAttr(body, s_tracker)))
        return -1;
    {
        PyObject *direct = PyObject_GetAttr(body, s_direct);
        if (direct == NULL)
            return -1;
        self->direct = direct == Py_True;
        Py_DECREF(direct);
    }
    if (!(self->frame_m = PyObject_GetAttr(body, s_frame_m)) || !(self->feed_m = PyObject_GetAttr(body, s_feed_m)))
        return -1;
    if ((self->plain = plain_classes(self)) < 0)
        return -1;
    if (muxed != Py_None) {
        PyObject *size, *stamped;
        if (!(self->socket = PyObject_GetAttr(muxed, s_socket)) || !(self->took = PyObject_GetAttr(muxed, s_took)) ||
            !(self->mux = PyObject_GetAttr(muxed, s_mux)))
            return -1;
        if (!(size = PyObject_GetAttr(muxed, s_size)))
            return -1;
        self->size = PyLong_AsSsize_t(size);
        Py_DECREF(size);
        if (self->size == -1 && PyErr_Occurred())
            return -1;
        if (self->size <= 0 || self->size > MAX_READ) {
            PyErr_Format(PyExc_ValueError, "a read size of 1 to %d bytes, got %zd", MAX_READ, self->size);
            return -1;
        }
        if (!(stamped = PyObject_GetAttr(muxed, s_stamped)))
            return -1;
        self->stamped = PyObject_IsTrue(stamped);
        Py_DECREF(stamped);
        if (self->stamped < 0)
            return -1;
    }
    return 0;
}

enum { TO_A = 0, TAKEN = 1, TO_B = 2, FAILED = -1 };

/* New references held while a read is decided, released at its end. */
typedef struct {
    PyObject *refs[48];
    int n;
} Held;

static PyObject *
hold(Held *held, PyObject *obj)
{
    if (obj != NULL)
        held->refs[held->n++] = obj;
    return obj;
}

static void
release(Held *held)
{
    while (held->n > 0)
        Py_DECREF(held->refs[--held->n]);
}

/* The read is exactly one chunk, HEX{1,8} CRLF P CRLF (no extension): P's size, or -1. */
static Py_ssize_t
one_chunk(const char *read, Py_ssize_t n, const char **payload)
{
    Py_ssize_t digits = 0, size = 0;
    for (; digits < n && digits <= 8; digits++) {
        char c = read[digits];
        int value;
        if (c >= '0' && c <= '9')
            value = c - '0';
        else if (c >= 'a' && c <= 'f')
            value = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            value = c - 'A' + 10;
        else
            break;
        size = size * 16 + value;
    }
    if (digits == 0 || digits > 8 || n != digits + 2 + size + 2)
        return -1;
    if (read[digits] != '\r' || read[digits + 1] != '\n' || read[n - 2] != '\r' || read[n - 1] != '\n')
        return -1;
    *payload = read + digits + 2;
    return size;
}

/* tracker._judge_data's decision for a token chunk's text (outcome.py: _judge_data, _carries_token,
 * _finish_reasons), writing nothing: 1 it is "data" (*token: it carries the first token, looked for
 * only when need_token; *reason: the finish reason to keep, a new reference, or NULL to keep cur),
 * 0 the Python path must judge it, -1 a BaseException. */
static int
judge(PyObject *text, int need_token, PyObject *cur, int *token, PyObject **reason)
{
    PyObject *payload, *value, *choices;
    Py_ssize_t i, count;
    int rc = 0, found;
    *token = 0;
    *reason = NULL;
    if (!(payload = PyObject_CallOneArg(json_loads, text)))
        goto doubt;
    if (!PyDict_CheckExact(payload))
        goto out;
    if ((found = PyDict_Contains(payload, k_error)) != 0)
        goto doubt;
    if ((value = PyDict_GetItemWithError(payload, k_usage)) != NULL ? value != Py_None : PyErr_Occurred() != NULL)
        goto doubt;
    if ((value = PyDict_GetItemWithError(payload, k_object)) != NULL) {
        if (PyObject_RichCompareBool(value, k_error, Py_EQ) != 0)
            goto doubt;
    }
    else if (PyErr_Occurred())
        goto doubt;
    choices = PyDict_GetItemWithError(payload, k_choices);
    if (choices == NULL && PyErr_Occurred())
        goto doubt;
    count = choices != NULL && PyList_Check(choices) ? PyList_GET_SIZE(choices) : 0;
    for (i = 0; need_token && !*token && i < count; i++) { /* _carries_token: isinstance, as Python */
        PyObject *choice = PyList_GET_ITEM(choices, i), *delta;
        if (!PyDict_Check(choice))
            continue;
        if ((delta = PyDict_GetItemWithError(choice, k_delta)) == NULL && PyErr_Occurred())
            goto doubt;
        if (delta != NULL && PyDict_Check(delta)) {
            PyObject *keys[3] = {k_content, k_reasoning_content, k_tool_calls};
            for (int k = 0; k < 3 && !*token; k++) {
                if ((value = PyDict_GetItemWithError(delta, keys[k])) == NULL) {
                    if (PyErr_Occurred())
                        goto doubt;
                    continue;
                }
                if ((found = PyObject_IsTrue(value)) < 0)
                    goto doubt;
                *token = found;
            }
        }
        else {
            if ((value = PyDict_GetItemWithError(choice, k_text)) == NULL) {
                if (PyErr_Occurred())
                    goto doubt;
                continue;
            }
            if ((found = PyObject_IsTrue(value)) < 0)
                goto doubt;
            *token = found;
        }
    }
    count = choices != NULL && PyList_CheckExact(choices) ? PyList_GET_SIZE(choices) : 0;
    for (i = 0; i < count; i++) { /* _finish_reasons: exact types, as Python */
        PyObject *choice = PyList_GET_ITEM(choices, i), *now = *reason != NULL ? *reason : cur;
        if (!PyDict_CheckExact(choice))
            continue;
        if ((value = PyDict_GetItemWithError(choice, k_finish_reason)) == NULL) {
            if (PyErr_Occurred())
                goto doubt;
            continue;
        }
        if (value == Py_None)
            continue;
        if (now != Py_None && (PyUnicode_Compare(now, v_abort) == 0 || PyUnicode_Compare(now, k_error) == 0))
            continue; /* a failed reason is kept */
        if (!PyUnicode_CheckExact(value))
            goto out; /* str() of it: the Python path's */
        Py_XSETREF(*reason, PyUnicode_GET_LENGTH(value) > 500 ? PyUnicode_Substring(value, 0, 500) : Py_NewRef(value));
        if (*reason == NULL)
            goto doubt;
    }
    rc = 1;
    goto out;
doubt: /* an error or a verdict the Python path gives: an Exception is cleared, a BaseException kept */
    if (PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_Exception))
            rc = -1;
        else
            PyErr_Clear();
    }
out:
    Py_XDECREF(payload);
    if (rc != 1)
        Py_CLEAR(*reason);
    return rc;
}

/* PyMember_SetOne's store for an object member: the new value in, the old one released. */
static void
set_slot(PyObject *obj, int i, PyObject *value)
{
    PyObject *old = SLOT(obj, i);
    SLOT(obj, i) = Py_NewRef(value);
    Py_XDECREF(old);
}

static int
exact_float(PyObject *obj, double *value)
{
    if (obj == NULL || !PyFloat_CheckExact(obj))
        return 0;
    *value = PyFloat_AS_DOUBLE(obj);
    return 1;
}

/* One read decided, then taken in C (TAKEN, every write of the Python path made) or not (TO_A:
 * nothing done; TO_B: llhttp fed, *failure its HTTPParseError or NULL); FAILED: an exception, as the
 * Python path would raise it from the feed (or a BaseException). Decide, then commit. */
static int
fast_take(Reader *self, PyObject *data, PyObject *arrived_obj, PyObject *read_at_obj, PyObject **failure)
{
    Held held = {.n = 0};
    int rc = TO_A, token = 0, has_arrived, has_last_data_t, has_max_data_gap;
    const char *read, *payload = NULL, *newline;
    Py_ssize_t n, size, max_line;
    PyObject *buffer, *value, *frames, *bytes, *count, *body_t_obj, *ttft, *cur, *text;
    PyObject *reason = NULL, *wait_obj, *t_obj, *gap_obj, *size_obj, *record, *max_data_gap_obj = NULL;
    PyObject *args[2];
    double read_at, arrived = 0.0, started, body_t, last_t, max_gap, last_data_t = 0.0, max_data_gap = 0.0;
    double t, gap, data_gap = 0.0;

    *failure = NULL;
    has_arrived = arrived_obj != Py_None;
    if (!self->direct || !self->plain || !PyBytes_CheckExact(data) || !exact_float(read_at_obj, &read_at) ||
        (has_arrived && !exact_float(arrived_obj, &arrived)))
        return TO_A;
    read = PyBytes_AS_STRING(data);
    n = PyBytes_GET_SIZE(data);
    /* 1.2: one chunk holding one whole "data: ..." frame of one line, LF ends, no marker */
    if ((size = one_chunk(read, n, &payload)) < 8 || memcmp(payload, "data: ", 6) != 0 || payload[6] == '[')
        return TO_A;
    newline = memchr(payload, '\n', (size_t)size);
    if (newline != payload + size - 2 || payload[size - 1] != '\n' || memchr(payload, '\r', (size_t)size) != NULL)
        return TO_A;
#define DOUBT(verdict)                                                    \
    do {                                                                  \
        rc = (verdict);                                                   \
        if (PyErr_Occurred()) {                                           \
            if (PyErr_ExceptionMatches(PyExc_Exception))                  \
                PyErr_Clear();                                            \
            else                                                          \
                rc = FAILED;                                              \
        }                                                                 \
        goto done;                                                        \
    } while (0)
#define ATTR(obj, name) hold(&held, PyObject_GetAttr((obj), (name)))
#define HELD(obj, i) hold(&held, Py_XNewRef(SLOT((obj), (i)))) /* a strong reference: code may run before the commit */
    /* the body's parts are still those the Reader was made with, of the classes it was made with */
    if (!exact_classes(self) || SLOT(self->body, B_TRACKER) != self->tracker || SLOT(self->body, B_PARSER) != self->parser ||
        SLOT(self->body, B_RAW) != self->raw || SLOT(self->body, B_FRAME_M) != self->frame_m ||
        SLOT(self->body, B_FEED_M) != self->feed_m)
        return TO_A;
    /* the HTTP parser between chunks, nothing decoded and left */
    if (!(buffer = ATTR(self->raw, s_body_buffer)) || !PyByteArray_CheckExact(buffer) || PyByteArray_GET_SIZE(buffer))
        DOUBT(TO_A);
    if ((value = ATTR(self->raw, s_message_complete)) != Py_False)
        DOUBT(TO_A);
    /* the SSE parser between frames */
    if (SLOT(self->parser, P_PENDING_CR) != Py_False || SLOT(self->parser, P_FRAME) != Py_None)
        DOUBT(TO_A);
    if (!(value = SLOT(self->parser, P_BUFFER)) || !PyBytes_CheckExact(value) || PyBytes_GET_SIZE(value))
        DOUBT(TO_A);
    if (!(value = SLOT(self->parser, P_FRAME_BYTES)) || !PyLong_CheckExact(value) || PyLong_AsSsize_t(value) != 0)
        DOUBT(TO_A);
    if (!(value = SLOT(self->parser, P_MAX_LINE_BYTES)) || !PyLong_CheckExact(value))
        DOUBT(TO_A);
    if ((max_line = PyLong_AsSsize_t(value)) == -1 && PyErr_Occurred())
        DOUBT(TO_A);
    if (size - 2 >= max_line)
        DOUBT(TO_A);
    /* the tracker, every field it writes of an exact type */
    if (SLOT(self->tracker, K_STREAM_ENDED) != Py_False)
        DOUBT(TO_A);
    if (!(frames = HELD(self->tracker, K_FRAMES)) || !PyList_CheckExact(frames))
        DOUBT(TO_A);
    if (!exact_float(SLOT(self->tracker, K_LAST_T), &last_t) || !exact_float(SLOT(self->tracker, K_MAX_GAP), &max_gap))
        DOUBT(TO_A);
    if (!(value = SLOT(self->tracker, K_LAST_DATA_T)) ||
        !((has_last_data_t = exact_float(value, &last_data_t)) || value == Py_None))
        DOUBT(TO_A);
    if (!(value = SLOT(self->tracker, K_MAX_DATA_GAP)) ||
        !((has_max_data_gap = exact_float(value, &max_data_gap)) || value == Py_None))
        DOUBT(TO_A);
    if (!(ttft = HELD(self->tracker, K_TTFT)) || !(ttft == Py_None || PyFloat_CheckExact(ttft)))
        DOUBT(TO_A);
    if (!(cur = HELD(self->tracker, K_FINISH_REASON)) || !(cur == Py_None || PyUnicode_CheckExact(cur)))
        DOUBT(TO_A);
    if (!(bytes = HELD(self->tracker, K_BYTES)) || !PyLong_CheckExact(bytes))
        DOUBT(TO_A);
    if (!(count = HELD(self->tracker, K_DATA)) || !PyLong_CheckExact(count))
        DOUBT(TO_A);
    /* the body's clock */
    if (!exact_float(SLOT(self->body, B_STARTED), &started) ||
        !exact_float(body_t_obj = HELD(self->body, B_T), &body_t))
        DOUBT(TO_A);

    /* 1.3: llhttp, the authority on the chunk */
    args[0] = self->raw;
    args[1] = data;
    if (!(value = hold(&held, PyObject_Vectorcall(feed_body, args, 2, NULL)))) {
        if (PyErr_ExceptionMatches(http_parse_error)) {
            PyObject *type, *tb;
            PyErr_Fetch(&type, failure, &tb);
            PyErr_NormalizeException(&type, failure, &tb);
            if (tb != NULL)
                PyException_SetTraceback(*failure, tb);
            Py_XDECREF(type);
            Py_XDECREF(tb);
            rc = TO_B;
        }
        else
            rc = FAILED;
        goto done;
    }
    if (ATTR(self->raw, s_message_complete) != Py_False || PyByteArray_GET_SIZE(buffer) != size ||
        memcmp(PyByteArray_AS_STRING(buffer), payload, (size_t)size) != 0)
        DOUBT(TO_B);
    if (!(text = hold(&held, PyUnicode_DecodeUTF8(payload + 6, size - 8, "strict"))))
        DOUBT(TO_B);
    switch (judge(text, ttft == Py_None, cur, &token, &reason)) {
    case 1:
        break;
    case 0:
        DOUBT(TO_B);
    default:
        rc = FAILED;
        goto done;
    }
    hold(&held, reason);

    /* RawBody.take's and StreamTracker.frame's arithmetic, as Python evaluates it */
    t = (has_arrived ? arrived : read_at) - started;
    if (!(t > body_t))
        t = body_t;
    gap = t - last_t;
    if (has_last_data_t) {
        data_gap = t - last_data_t;
        if (!has_max_data_gap || data_gap > max_data_gap)
            if (!(max_data_gap_obj = hold(&held, PyFloat_FromDouble(data_gap))))
                DOUBT(TO_B);
    }
    wait_obj = has_arrived ? hold(&held, PyFloat_FromDouble(read_at - arrived)) : Py_None;
    t_obj = t == body_t ? body_t_obj : hold(&held, PyFloat_FromDouble(t));
    gap_obj = hold(&held, PyFloat_FromDouble(gap));
    size_obj = hold(&held, PyLong_FromSsize_t(size));
    if (!wait_obj || !t_obj || !gap_obj || !size_obj)
        DOUBT(TO_B);
    bytes = hold(&held, PyNumber_Add(bytes, size_obj));
    count = hold(&held, PyNumber_Add(count, one));
    value = hold(&held, PyLong_FromSsize_t(PyList_GET_SIZE(frames)));
    if (!bytes || !count || !value)
        DOUBT(TO_B);
    if (!(record = hold(&held, PyTuple_Pack(6, value, v_data, t_obj, gap_obj, size_obj, wait_obj))))
        DOUBT(TO_B);
    if (PyByteArray_Resize(buffer, 0) < 0) /* take_buffered's clear */
        DOUBT(TO_B);

    /* 1.4: commit (nothing below can doubt; only the append can fail, and it comes first) */
    if (PyList_Append(frames, record) < 0) {
        rc = FAILED;
        goto done;
    }
    set_slot(self->body, B_WAIT, wait_obj);
    set_slot(self->body, B_T, t_obj);
    set_slot(self->tracker, K_BYTES, bytes);
    set_slot(self->tracker, K_LAST_T, t_obj);
    if (gap > max_gap)
        set_slot(self->tracker, K_MAX_GAP, gap_obj);
    set_slot(self->tracker, K_DATA, count);
    if (max_data_gap_obj)
        set_slot(self->tracker, K_MAX_DATA_GAP, max_data_gap_obj);
    set_slot(self->tracker, K_LAST_DATA_T, t_obj);
    if (token)
        set_slot(self->tracker, K_TTFT, t_obj);
    if (reason)
        set_slot(self->tracker, K_FINISH_REASON, reason);
    rc = TAKEN;
done:
#undef HELD
#undef ATTR
#undef DOUBT
    release(&held);
    if (rc == FAILED && !PyErr_Occurred())
        PyErr_SetString(PyExc_SystemError, "the compiled reader failed without an exception");
    return rc;
}

/* One read through fast_take, or on from where it stopped in Python: RawBody.take_read's contract. */
static PyObject *
take(Reader *self, PyObject *data, PyObject *arrived, PyObject *read_at)
{
    PyObject *failure, *result;
    switch (fast_take(self, data, arrived, read_at, &failure)) {
    case TAKEN:
        self->fast++;
        Py_RETURN_FALSE; /* neither the stream nor the body ended */
    case TO_A:
        self->to_a++;
        return PyObject_CallFunctionObjArgs(self->take_read, data, arrived, read_at, NULL);
    case TO_B:
        self->to_b++;
        if (failure == NULL)
            return PyObject_CallFunctionObjArgs(self->take_fed, data, arrived, read_at, NULL);
        result = PyObject_CallFunctionObjArgs(self->take_failed_feed, failure, data, arrived, read_at, NULL);
        Py_DECREF(failure);
        return result;
    default:
        return NULL;
    }
}

static PyObject *
reader_take_read(Reader *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "take_read(data, arrived, read_at)");
        return NULL;
    }
    if (self->take_read == NULL) {
        PyErr_SetString(PyExc_TypeError, "a Reader not initialised with its body");
        return NULL;
    }
    return take(self, args[0], args[1], args[2]);
}

/* readable's except Exception: the body ends with it (raised in its reader); a BaseException propagates. */
static PyObject *
end_with_error(Reader *self)
{
    PyObject *type, *value, *tb, *done;
    if (!PyErr_ExceptionMatches(PyExc_Exception))
        return NULL;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL)
        PyException_SetTraceback(value, tb);
    done = PyObject_CallMethodOneArg(self->muxed, s_end, value);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    if (done == NULL)
        return NULL;
    Py_DECREF(done);
    Py_RETURN_FALSE;
}

/* MuxedBody._took's count of a read taken in C: mux.reads += 1, muxed._last_read = read_at. */
static int
count_read(Reader *self, PyObject *read_at)
{
    PyObject *reads, *more;
    int rc;
    if (!(reads = PyObject_GetAttr(self->mux, s_reads)))
        return -1;
    more = PyNumber_Add(reads, one);
    Py_DECREF(reads);
    if (more == NULL)
        return -1;
    rc = PyObject_SetAttr(self->mux, s_reads, more);
    Py_DECREF(more);
    return rc < 0 ? -1 : PyObject_SetAttr(self->muxed, s_last_read, read_at);
}

/* readable's tail for one received read (``full``: it filled the buffer): taken in C, or handed to
 * muxed._took with the continuation from where C stopped. */
static PyObject *
take_received(Reader *self, PyObject *data, PyObject *arrived, PyObject *read_at, int full)
{
    PyObject *failure, *then, *result;
    switch (fast_take(self, data, arrived, read_at, &failure)) {
    case TAKEN:
        self->fast++;
        if (count_read(self, read_at) < 0)
            return end_with_error(self);
        return Py_NewRef(full ? Py_True : Py_False);
    case TO_A:
        self->to_a++;
        return PyObject_CallFunctionObjArgs(self->took, data, arrived, read_at, self->take_read, NULL);
    case TO_B:
        self->to_b++;
        if (failure == NULL)
            return PyObject_CallFunctionObjArgs(self->took, data, arrived, read_at, self->take_fed, NULL);
        then = PyObject_CallFunctionObjArgs(partial, self->take_failed_feed, failure, NULL);
        Py_DECREF(failure);
        if (then == NULL)
            return end_with_error(self);
        result = PyObject_CallFunctionObjArgs(self->took, data, arrived, read_at, then, NULL);
        Py_DECREF(then);
        return result;
    default: /* what the feed raised: readable counts the read, then ends the body with it */
        if (PyErr_ExceptionMatches(PyExc_Exception)) {
            PyObject *type, *value, *tb;
            PyErr_Fetch(&type, &value, &tb);
            if (count_read(self, read_at) < 0) {
                Py_XDECREF(type);
                Py_XDECREF(value);
                Py_XDECREF(tb);
                return end_with_error(self);
            }
            PyErr_Restore(type, value, tb);
            return end_with_error(self);
        }
        return NULL;
    }
}

/* muxed.readable()'s contract: one receive, taken; True when it filled the buffer and the body goes on. */
static PyObject *
reader_read(Reader *self)
{
    PyObject *ended, *fd_obj, *data, *arrived_obj, *read_at_obj, *result;
    struct msghdr msg;
    struct iovec iov;
    union {
        char bytes[CMSG_SPACE(2 * sizeof(long))];
        struct cmsghdr align;
    } control;
    struct cmsghdr *cmsg;
    Py_ssize_t n;
    long fd;
    int truth;
    double read_at, arrived = -1.0;
    int stamp = 0;

    if (!(ended = PyObject_GetAttr(self->muxed, s_ended)))
        return NULL;
    truth = PyObject_IsTrue(ended);
    Py_DECREF(ended);
    if (truth != 0)
        return truth < 0 ? NULL : Py_NewRef(Py_False);
    if (!self->stamped)
        return PyObject_CallMethodNoArgs(self->muxed, s_readable);
    if (!(fd_obj = PyObject_CallMethodNoArgs(self->socket, s_fileno)))
        return end_with_error(self);
    fd = PyLong_AsLong(fd_obj);
    Py_DECREF(fd_obj);
    if (fd == -1 && PyErr_Occurred())
        return end_with_error(self);
    if (fd < 0) /* closed: the Python path says so as the socket module does */
        return PyObject_CallMethodNoArgs(self->muxed, s_readable);
    for (;;) {
        memset(&msg, 0, sizeof msg);
        iov.iov_base = read_buffer;
        iov.iov_len = (size_t)self->size;
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.bytes;
        msg.msg_controllen = sizeof control.bytes;
        n = recvmsg((int)fd, &msg, 0);
        if (n >= 0)
            break;
        if (errno == EINTR) {
            if (PyErr_CheckSignals() < 0)
                return end_with_error(self);
            continue;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            Py_RETURN_FALSE; /* nothing yet: no read counted */
        PyErr_SetFromErrno(PyExc_OSError);
        return end_with_error(self);
    }
    read_at = monotonic_now();
    for (cmsg = CMSG_FIRSTHDR(&msg); cmsg != NULL; cmsg = CMSG_NXTHDR(&msg, cmsg)) {
        const char *payload = (const char *)CMSG_DATA(cmsg);
        if (cmsg->cmsg_level == SOL_SOCKET && cmsg->cmsg_type == SO_TIMESTAMPNS &&
            cmsg->cmsg_len >= CMSG_LEN(2 * sizeof(long)) &&
            payload + 2 * sizeof(long) <= control.bytes + msg.msg_controllen) {
            long stamp_at[2];
            memcpy(stamp_at, payload, sizeof stamp_at);
            arrived = arrival(stamp_at[0], stamp_at[1], wall_now(), read_at);
            stamp = 1;
            break;
        }
    }
    if (!(data = PyBytes_FromStringAndSize(read_buffer, n)))
        return end_with_error(self);
    read_at_obj = PyFloat_FromDouble(read_at);
    arrived_obj = stamp ? PyFloat_FromDouble(arrived) : Py_NewRef(Py_None);
    if (read_at_obj == NULL || arrived_obj == NULL) {
        Py_DECREF(data);
        Py_XDECREF(read_at_obj);
        Py_XDECREF(arrived_obj);
        return end_with_error(self);
    }
    result = take_received(self, data, arrived_obj, read_at_obj, (Py_ssize_t)n >= self->size);
    Py_DECREF(data);
    Py_DECREF(arrived_obj);
    Py_DECREF(read_at_obj);
    return result;
}

static PyObject *
reader_call(Reader *self, PyObject *args, PyObject *kwds)
{
    PyObject *result;
    if (PyTuple_GET_SIZE(args) != 0 || (kwds != NULL && PyDict_GET_SIZE(kwds) != 0)) {
        PyErr_SetString(PyExc_TypeError, "Reader() takes no arguments");
        return NULL;
    }
    if (self->muxed == NULL || self->muxed == Py_None || self->took == NULL) {
        PyErr_SetString(PyExc_TypeError, "a Reader without a MuxedBody cannot receive");
        return NULL;
    }
    Py_INCREF(self); /* the body may drop its reader (and the watcher its callback) while it runs */
    result = reader_read(self);
    Py_DECREF(self);
    return result;
}

static PyObject *
py_arrival(PyObject *module, PyObject *args)
{
    long sec, nsec;
    double wall, read_at;
    if (!PyArg_ParseTuple(args, "lldd:_arrival", &sec, &nsec, &wall, &read_at))
        return NULL;
    return PyFloat_FromDouble(arrival(sec, nsec, wall, read_at));
}

/* _judge(tracker, data, t): the C judgement of a data frame's text (what tracker._judge_data does
 * for it): "data", its writes made (the first token's time, the finish reason), or None, nothing
 * written: the Python path judges it. */
static PyObject *
py_judge(PyObject *module, PyObject *args)
{
    PyObject *tracker, *text, *t, *ttft = NULL, *cur = NULL, *reason = NULL, *result = NULL;
    int token, rc;
    if (!PyArg_ParseTuple(args, "OUO:_judge", &tracker, &text, &t))
        return NULL;
    if (!(ttft = PyObject_GetAttr(tracker, s_ttft)) || !(cur = PyObject_GetAttr(tracker, s_finish_reason)))
        goto done;
    if (!(ttft == Py_None || PyFloat_CheckExact(ttft)) || !(cur == Py_None || PyUnicode_CheckExact(cur)) ||
        (PyUnicode_GET_LENGTH(text) > 0 && PyUnicode_READ_CHAR(text, 0) == '[')) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    if ((rc = judge(text, ttft == Py_None, cur, &token, &reason)) < 0)
        goto done;
    if (rc == 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    if ((token && PyObject_SetAttr(tracker, s_ttft, t) < 0) ||
        (reason && PyObject_SetAttr(tracker, s_finish_reason, reason) < 0))
        goto done;
    result = Py_NewRef(v_data);
done:
    Py_XDECREF(ttft);
    Py_XDECREF(cur);
    Py_XDECREF(reason);
    return result;
}

static PyMethodDef reader_methods[] = {
    {"take_read", (PyCFunction)(void (*)(void))reader_take_read, METH_FASTCALL,
     "take_read(data, arrived, read_at) -> bool: RawBody.take_read's contract (no socket)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef reader_members[] = {
    {"fast", T_PYSSIZET, offsetof(Reader, fast), READONLY, "reads taken in C"},
    {"to_a", T_PYSSIZET, offsetof(Reader, to_a), READONLY, "reads handed whole to the Python path"},
    {"to_b", T_PYSSIZET, offsetof(Reader, to_b), READONLY, "reads handed to the Python path once fed to llhttp"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "loadtests.client._fastread.Reader",
    .tp_basicsize = sizeof(Reader),
    .tp_dealloc = (destructor)reader_dealloc,
    .tp_call = (ternaryfunc)reader_call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Reader(body, muxed=None): one raw body's reads, in C where they are plain.",
    .tp_traverse = (traverseproc)reader_traverse,
    .tp_clear = (inquiry)reader_clear,
    .tp_methods = reader_methods,
    .tp_members = reader_members,
    .tp_init = (initproc)reader_init,
    .tp_new = PyType_GenericNew,
};

static PyMethodDef module_methods[] = {
    {"_arrival", py_arrival, METH_VARARGS, "_arrival(sec, nsec, wall, read_at) -> float: recv_stamped's stamp."},
    {"_judge", py_judge, METH_VARARGS, "_judge(tracker, data, t) -> str | None: the C judgement of a data frame."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fastread_module = {
    PyModuleDef_HEAD_INIT, "_fastread", "The raw user's per-read path in C.", -1, module_methods,
};

#define INTERN(var, text) \
    if (!(var = PyUnicode_InternFromString(text))) \
        return NULL;

static PyObject *
import_attribute(const char *module_name, const char *name)
{
    PyObject *module = PyImport_ImportModule(module_name), *attribute;
    if (module == NULL)
        return NULL;
    attribute = PyObject_GetAttrString(module, name);
    Py_DECREF(module);
    return attribute;
}

PyMODINIT_FUNC
PyInit__fastread(void)
{
    PyObject *module, *functools;
    INTERN(s_ended, "_ended");
    INTERN(s_socket, "_socket");
    INTERN(s_size, "_size");
    INTERN(s_stamped, "_stamped");
    INTERN(s_took, "_took");
    INTERN(s_take_read, "take_read");
    INTERN(s_take_fed, "take_fed");
    INTERN(s_take_failed_feed, "take_failed_feed");
    INTERN(s_end, "_end");
    INTERN(s_readable, "readable");
    INTERN(s_fileno, "fileno");
    INTERN(s_frame_m, "_frame");
    INTERN(s_feed_m, "_feed");
    INTERN(s_raw, "raw");
    INTERN(s_parser, "parser");
    INTERN(s_tracker, "tracker");
    INTERN(s_direct, "_direct");
    INTERN(s_body_buffer, "_body_buffer");
    INTERN(s_message_complete, "message_complete");
    INTERN(s_ttft, "_ttft");
    INTERN(s_finish_reason, "_finish_reason");
    INTERN(s_mux, "_mux");
    INTERN(s_reads, "reads");
    INTERN(s_last_read, "_last_read");
    INTERN(k_error, "error");
    INTERN(k_usage, "usage");
    INTERN(k_object, "object");
    INTERN(k_choices, "choices");
    INTERN(k_delta, "delta");
    INTERN(k_content, "content");
    INTERN(k_reasoning_content, "reasoning_content");
    INTERN(k_tool_calls, "tool_calls");
    INTERN(k_text, "text");
    INTERN(k_finish_reason, "finish_reason");
    INTERN(v_abort, "abort");
    INTERN(v_data, "data");
    if (!(one = PyLong_FromLong(1)))
        return NULL;
    if (!(feed_body = import_attribute("geventhttpclient._parser", "HTTPResponseParser")))
        return NULL;
    Py_SETREF(feed_body, PyObject_GetAttrString(feed_body, "feed")); /* response_end.feed_body */
    if (feed_body == NULL || !(http_parse_error = import_attribute("geventhttpclient.response", "HTTPParseError")) ||
        !(json_loads = import_attribute("orjson", "loads")))
        return NULL;
    if (!(functools = PyImport_ImportModule("functools")))
        return NULL;
    partial = PyObject_GetAttrString(functools, "partial");
    Py_DECREF(functools);
    if (partial == NULL || PyType_Ready(&ReaderType) < 0)
        return NULL;
    if (!(module = PyModule_Create(&fastread_module)))
        return NULL;
    if (PyModule_AddObjectRef(module, "Reader", (PyObject *)&ReaderType) < 0 ||
        PyModule_AddStringConstant(module, "SOURCE_SHA", FASTREAD_SOURCE_SHA) < 0 ||
        PyModule_AddIntConstant(module, "MAX_READ", MAX_READ) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}

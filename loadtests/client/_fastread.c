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
 * state is written; the writes are those of the Python path, field by field, float by float. The C
 * keeps no state but constants and counters: the Python objects hold it all, so C and Python reads
 * may interleave. When in doubt, it falls back. Exceptions: an Exception ends the body through
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
    PyObject *take_read, *take_fed, *take_failed_feed; /* the body's bound methods */
    Py_ssize_t size;
    int stamped;
    Py_ssize_t fast, to_a, to_b;
} Reader;

static PyObject *s_ended, *s_socket, *s_size, *s_stamped, *s_took, *s_take_read, *s_take_fed,
    *s_take_failed_feed, *s_end, *s_readable, *s_fileno;
static PyObject *partial;

static int
reader_traverse(Reader *self, visitproc visit, void *arg)
{
    Py_VISIT(self->body);
    Py_VISIT(self->muxed);
    Py_VISIT(self->socket);
    Py_VISIT(self->took);
    Py_VISIT(self->take_read);
    Py_VISIT(self->take_fed);
    Py_VISIT(self->take_failed_feed);
    return 0;
}

static int
reader_clear(Reader *self)
{
    Py_CLEAR(self->body);
    Py_CLEAR(self->muxed);
    Py_CLEAR(self->socket);
    Py_CLEAR(self->took);
    Py_CLEAR(self->take_read);
    Py_CLEAR(self->take_fed);
    Py_CLEAR(self->take_failed_feed);
    return 0;
}

static void
reader_dealloc(Reader *self)
{
    PyObject_GC_UnTrack(self);
    reader_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
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
        !(self->take_failed_feed = PyObject_GetAttr(body, s_take_failed_feed)))
        return -1;
    if (muxed != Py_None) {
        PyObject *size, *stamped;
        if (!(self->socket = PyObject_GetAttr(muxed, s_socket)) || !(self->took = PyObject_GetAttr(muxed, s_took)))
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

/* A: the read handed whole to the Python path. */
static PyObject *
take_as_python(Reader *self, PyObject *data, PyObject *arrived, PyObject *read_at)
{
    self->to_a++;
    return PyObject_CallFunctionObjArgs(self->take_read, data, arrived, read_at, NULL);
}

static PyObject *
reader_take_read(Reader *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "take_read(data, arrived, read_at)");
        return NULL;
    }
    return take_as_python(self, args[0], args[1], args[2]);
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
    self->to_a++;
    result = PyObject_CallFunctionObjArgs(self->took, data, arrived_obj, read_at_obj, self->take_read, NULL);
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
    if (self->muxed == NULL || self->muxed == Py_None) {
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
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fastread_module = {
    PyModuleDef_HEAD_INIT, "_fastread", "The raw user's per-read path in C.", -1, module_methods,
};

#define INTERN(var, text) \
    if (!(var = PyUnicode_InternFromString(text))) \
        return NULL;

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
    if (!(functools = PyImport_ImportModule("functools")))
        return NULL;
    partial = PyObject_GetAttrString(functools, "partial");
    Py_DECREF(functools);
    if (partial == NULL || PyType_Ready(&ReaderType) < 0)
        return NULL;
    if (!(module = PyModule_Create(&fastread_module)))
        return NULL;
    if (PyModule_AddObjectRef(module, "Reader", (PyObject *)&ReaderType) < 0 ||
        PyModule_AddStringConstant(module, "SOURCE_SHA", FASTREAD_SOURCE_SHA) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}

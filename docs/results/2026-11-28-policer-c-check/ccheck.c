/* Sizing, not the product: xtc.daemon.datagram.decode in C, to measure what a compiled datagram check costs the
 * policer engine in place (issue 50).  The same format, the same checks in the same order, the same errors
 * (DatagramError(reason, message), the class given once by set_error).  The tag is libsodium's keyed BLAKE2b
 * (crypto_generichash: the same function as hashlib's blake2b(key=..., digest_size=16)), compared in constant
 * time (sodium_memcmp).  libsodium's headers are not installed here (Debian's libsodium-dev): its three functions
 * are declared below, as its sodium/crypto_generichash.h and sodium/utils.h declare them. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

extern int sodium_init(void);
extern int crypto_generichash(unsigned char *out, size_t outlen, const unsigned char *in, unsigned long long inlen,
                              const unsigned char *key, size_t keylen);
extern int sodium_memcmp(const void *b1, const void *b2, size_t len);

#define HEAD 21 /* magic 4, key id 8, sequence number 8, frames 1 */
#define TAG 16
#define KEY_ID 8
#define KEY 32
#define MAX_FRAMES 8

static PyObject *error_class = NULL;

static PyObject *fail(const char *reason, const char *message) {
    PyObject *e = PyObject_CallFunction(error_class, "ss", reason, message);
    if (e != NULL) {
        PyErr_SetObject(error_class, e);
        Py_DECREF(e);
    }
    return NULL;
}

static uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static PyObject *set_error(PyObject *self, PyObject *cls) {
    (void)self;
    Py_XINCREF(cls);
    Py_XSETREF(error_class, cls);
    Py_RETURN_NONE;
}

static PyObject *decode(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer buf;
    PyObject *keys;
    if (error_class == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "set_error first");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "y*O!", &buf, &PyDict_Type, &keys))
        return NULL;
    const unsigned char *d = buf.buf;
    Py_ssize_t n = buf.len;
    PyObject *out = NULL, *key_id = NULL, *frames = NULL;
    char msg[160];
    if (n < HEAD + TAG) {
        snprintf(msg, sizeof msg, "a datagram of %zd bytes is shorter than a header and a tag", n);
        fail("short", msg);
        goto done;
    }
    if (memcmp(d, "XTU1", 4) != 0) {
        fail("magic", "not a samples datagram (no XTU1 magic)");
        goto done;
    }
    key_id = PyBytes_FromStringAndSize((const char *)d + 4, KEY_ID);
    if (key_id == NULL)
        goto done;
    PyObject *key = PyDict_GetItemWithError(keys, key_id); /* borrowed */
    if (key == NULL) {
        if (!PyErr_Occurred()) {
            static const char hex[] = "0123456789abcdef";
            char id[2 * KEY_ID + 1];
            for (int i = 0; i < KEY_ID; i++) {
                id[2 * i] = hex[d[4 + i] >> 4];
                id[2 * i + 1] = hex[d[4 + i] & 15];
            }
            id[2 * KEY_ID] = 0;
            snprintf(msg, sizeof msg, "key id %s names no subscription", id);
            fail("unknown_key", msg);
        }
        goto done;
    }
    if (!PyBytes_Check(key) || PyBytes_GET_SIZE(key) != KEY) {
        PyErr_SetString(PyExc_TypeError, "a key is 32 bytes");
        goto done;
    }
    unsigned char tag[TAG];
    crypto_generichash(tag, TAG, d, (unsigned long long)(n - TAG), (const unsigned char *)PyBytes_AS_STRING(key), KEY);
    if (sodium_memcmp(tag, d + n - TAG, TAG) != 0) {
        fail("bad_tag", "the datagram's tag does not check with its subscription's key");
        goto done;
    }
    unsigned long long seq = 0;
    for (int i = 0; i < 8; i++)
        seq = (seq << 8) | d[12 + i];
    int count = d[20];
    if (count < 1 || count > MAX_FRAMES) {
        snprintf(msg, sizeof msg, "a datagram of %d frames", count);
        fail("bad_frames", msg);
        goto done;
    }
    Py_ssize_t at = HEAD + 4 * count, end = n - TAG;
    if (at > end) {
        fail("bad_frames", "the frames' lengths run past the datagram");
        goto done;
    }
    frames = PyList_New(count);
    if (frames == NULL)
        goto done;
    for (int i = 0; i < count; i++) {
        uint32_t size = be32(d + HEAD + 4 * i);
        if (at + (Py_ssize_t)size > end) {
            fail("bad_frames", "a frame runs past the datagram");
            goto done;
        }
        PyObject *f = PyBytes_FromStringAndSize((const char *)d + at, size);
        if (f == NULL)
            goto done;
        PyList_SET_ITEM(frames, i, f);
        at += size;
    }
    if (at != end) {
        snprintf(msg, sizeof msg, "%zd bytes after the last frame", end - at);
        fail("bad_frames", msg);
        goto done;
    }
    out = Py_BuildValue("(OKO)", key_id, seq, frames);
done:
    Py_XDECREF(key_id);
    Py_XDECREF(frames);
    PyBuffer_Release(&buf);
    return out;
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS, "decode(data, keys) -> (key id, sequence number, frames), as xtc.daemon.datagram.decode"},
    {"set_error", set_error, METH_O, "set_error(cls): the class raised as cls(reason, message)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "ccheck", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_ccheck(void) {
    if (sodium_init() < 0) {
        PyErr_SetString(PyExc_RuntimeError, "libsodium did not initialise");
        return NULL;
    }
    return PyModule_Create(&module);
}

// shvd::Error becomes one Python exception class per ErrorKind, carrying .rank: here and nowhere else.
#include "bindings/bindings.h"
#include "common/error.h"

namespace shvd {
namespace {

PyObject* g_errors[6] = {nullptr};  // indexed by ErrorKind

PyObject* make_error_class(nb::module_& m, const char* name, PyObject* base, const char* doc) {
  std::string qualified = std::string("collective._native.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, base, nullptr);
  m.attr(name) = nb::handle(cls);
  return cls;
}

// The bases (base, ValueError), as PyErr_NewException takes several.
nb::object also_value_error(PyObject* base) {
  return nb::steal(PyTuple_Pack(2, base, PyExc_ValueError));
}

void raise_python(const Error& e) {
  PyObject* cls = g_errors[int(e.kind())];
  nb::object instance = nb::steal(PyObject_CallFunction(cls, "s", e.what()));
  if (!instance.is_valid()) return;
  if (e.peer_rank() >= 0) {
    nb::setattr(instance, "rank", nb::int_(e.peer_rank()));
  } else {
    nb::setattr(instance, "rank", nb::none());
  }
  PyErr_SetObject(cls, instance.ptr());
}

}  // namespace

void register_errors(nb::module_& m) {
  PyObject* base = make_error_class(m, "CollectiveError", PyExc_RuntimeError, "Base class of all collective errors.");
  g_errors[int(ErrorKind::kGeneric)] = base;
  g_errors[int(ErrorKind::kTimeout)] =
      make_error_class(m, "CollectiveTimeoutError", base, "A collective or connection passed its deadline.");
  g_errors[int(ErrorKind::kPeerFailure)] =
      make_error_class(m, "PeerFailureError", base, "A peer rank died, disconnected or aborted; .rank names it.");
  // Horovod raises ValueError for bad arguments and for ranks that disagree, so these two are ValueErrors
  // too: a ported `except ValueError` still catches them, and `except RuntimeError` as before.
  g_errors[int(ErrorKind::kMismatch)] = make_error_class(
      m, "MismatchError", also_value_error(base).ptr(), "Ranks disagree on a collective's shape, dtype, op or root.");
  g_errors[int(ErrorKind::kAuthentication)] =
      make_error_class(m, "AuthenticationError", base, "A peer failed the job-secret challenge.");
  g_errors[int(ErrorKind::kInvalidArgument)] = make_error_class(
      m, "InvalidArgumentError", also_value_error(base).ptr(), "A collective was called with bad arguments.");
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      raise_python(e);
    }
  });
}

}  // namespace shvd

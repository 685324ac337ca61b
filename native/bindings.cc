// The only file that knows Python. Tensors arrive as (address, dtype, shape) so that numpy, torch and
// TensorFlow adapters can all hand over their memory without a copy; every blocking call releases the
// GIL; shvd::Error becomes one Python exception class per ErrorKind, here and nowhere else. DType,
// ReduceOp, CollectiveKind and the option structs are exported from their one C++ definition, and
// Python imports them.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <mutex>

#include "common/error.h"
#include "communicator.h"
#include "engine/engine.h"
#include "reduce/reduce.h"

namespace nb = nanobind;
using namespace shvd;

namespace shvd {
void register_nccl_bindings(nb::module_& m);  // native/nccl/bindings_nccl.cc
}

namespace {

PyObject* g_errors[6] = {nullptr};  // indexed by ErrorKind

PyObject* make_error_class(nb::module_& m, const char* name, PyObject* base, const char* doc) {
  std::string qualified = std::string("collective._native.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, base, nullptr);
  m.attr(name) = nb::handle(cls);
  return cls;
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

DType dtype_from_format(const char* format, Py_ssize_t itemsize) {
  // Native byte order only: '=' and '@' prefixes are fine, anything else is not ours to reinterpret.
  if (format[0] == '@' || format[0] == '=') ++format;
  if (format[0] != '\0' && format[1] == '\0') {
    switch (format[0]) {
      case 'B': return DType::kUInt8;
      case 'b': return DType::kInt8;
      case 'e': return DType::kFloat16;
      case 'f': return DType::kFloat32;
      case 'd': return DType::kFloat64;
      case 'i':
      case 'l':
      case 'q':
        if (itemsize == 4) return DType::kInt32;
        if (itemsize == 8) return DType::kInt64;
        break;
    }
  }
  fail(ErrorKind::kInvalidArgument, std::string("unsupported element format '") + format +
                                        "'; use uint8, int8, int32, int64, float16, bfloat16, float32 or float64");
}

// A tensor handed over either as an object with the buffer protocol (numpy: one call, no copy) or as a
// raw address with an explicit dtype code and shape (torch and TensorFlow adapters).
struct TensorRef {
  void* data = nullptr;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
};

class TensorArg {
 public:
  TensorArg(nb::handle source, std::optional<DType> dtype, nb::handle shape, bool writable, const std::string& name) {
    if (PyLong_Check(source.ptr())) {
      if (!dtype) fail(ErrorKind::kInvalidArgument, "tensor '" + name + "' given by address needs a dtype");
      ref_.data = reinterpret_cast<void*>(PyLong_AsUnsignedLongLong(source.ptr()));
      ref_.dtype = *dtype;
      for (nb::handle d : shape) ref_.shape.push_back(nb::cast<int64_t>(d));
    } else {
      int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
      if (PyObject_GetBuffer(source.ptr(), &view_, flags) != 0) {
        PyErr_Clear();
        fail(ErrorKind::kInvalidArgument, "tensor '" + name + "' must be a C-contiguous" +
                                              (writable ? ", writable" : "") + " buffer");
      }
      held_ = true;
      ref_.data = view_.buf;
      // A dtype overrides the buffer's format: bfloat16 arrives as its uint16 bit pattern.
      ref_.dtype = dtype ? *dtype : dtype_from_format(view_.format, view_.itemsize);
      ref_.shape.assign(view_.shape, view_.shape + view_.ndim);
    }
    for (int64_t d : ref_.shape) {
      if (d < 0) fail(ErrorKind::kInvalidArgument, "negative dimension in shape " + shape_text(ref_.shape));
    }
  }
  ~TensorArg() {
    if (held_) PyBuffer_Release(&view_);
  }
  TensorArg(const TensorArg&) = delete;
  TensorArg& operator=(const TensorArg&) = delete;
  const TensorRef& ref() const { return ref_; }

 private:
  Py_buffer view_{};
  bool held_ = false;
  TensorRef ref_;
};

// Hands a result buffer to Python as a flat uint8 numpy array that owns it; the caller views and reshapes.
nb::ndarray<nb::numpy, uint8_t> to_numpy(OwnedResult& result, size_t bytes) {
  uint8_t* raw = result.data.release();
  nb::capsule owner(raw, [](void* p) noexcept { delete[] static_cast<uint8_t*>(p); });
  size_t shape[1] = {bytes};
  return nb::ndarray<nb::numpy, uint8_t>(raw, 1, shape, owner);
}

size_t result_bytes(const OwnedResult& r, DType dtype) { return element_count(r.shape) * dtype_size(dtype); }

// The call a direct method describes, for this rank's tensor.
CallInfo direct_call(CollectiveKind kind, const std::string& name, const TensorRef& t) {
  CallInfo call;
  call.kind = kind;
  call.name = name;
  call.dtype = t.dtype;
  call.shape = t.shape;
  return call;
}

// Serialises callers from several Python threads; the mesh itself is single-threaded.
struct PyCommunicator {
  std::unique_ptr<Communicator> comm;
  std::mutex mutex;
  bool engine_running = false;  // then the engine owns the mesh and direct calls must not touch it
};

// Direct (synchronous) calls hold this for their whole duration.
struct DirectCall {
  explicit DirectCall(PyCommunicator& c) : lock(c.mutex) {
    if (c.engine_running) {
      fail(ErrorKind::kInvalidArgument, "the collective engine owns this communicator; submit through the engine");
    }
  }
  std::lock_guard<std::mutex> lock;
};

struct PyEngine {
  PyCommunicator* comm = nullptr;
  std::unique_ptr<Engine> engine;
};

nb::object outcome_to_python(HandleOutcome& out, DType dtype) {
  if (out.failed) throw Error(out.error_kind, out.error, out.error_rank);
  if (out.join_rank >= 0) return nb::int_(out.join_rank);
  if (!out.has_result) return nb::none();
  size_t bytes = result_bytes(out.result, dtype);
  if (!out.result.received_splits.empty()) {
    return nb::make_tuple(to_numpy(out.result, bytes), out.result.shape, out.result.received_splits);
  }
  return nb::make_tuple(to_numpy(out.result, bytes), out.result.shape);
}

struct Listener {
  Fd fd;
  int port = 0;
};

// ---- the contracts: enums and option structs, exported from their one C++ definition --------------

void register_contracts(nb::module_& m) {
  nb::enum_<DType> dtype(m, "DType", nb::is_arithmetic(), "Element types, under numpy's names.");
#define SHVD_DTYPE_VALUE(enumerator, code, name, bytes) dtype.value(name, DType::enumerator);
  SHVD_DTYPES(SHVD_DTYPE_VALUE)
#undef SHVD_DTYPE_VALUE
  nb::enum_<ReduceOp> op(m, "ReduceOp", nb::is_arithmetic(), "Reduce operations.");
#define SHVD_OP_VALUE(enumerator, code, python_name, name) op.value(python_name, ReduceOp::enumerator);
  SHVD_REDUCE_OPS(SHVD_OP_VALUE)
#undef SHVD_OP_VALUE
  nb::enum_<CollectiveKind> kind(m, "CollectiveKind", nb::is_arithmetic(), "Collective kinds.");
#define SHVD_KIND_VALUE(enumerator, code, python_name, name) kind.value(python_name, CollectiveKind::enumerator);
  SHVD_COLLECTIVE_KINDS(SHVD_KIND_VALUE)
#undef SHVD_KIND_VALUE

  // Field names are Config's, so Config.to_native() copies them by name.
  nb::class_<MeshOptions>(m, "MeshOptions", "How this rank's mesh connects and waits (native/transport/mesh.h).")
      .def(nb::init<>())
      .def_rw("rank", &MeshOptions::rank)
      .def_rw("size", &MeshOptions::size)
      .def_prop_rw(
          "secret", [](const MeshOptions& o) { return nb::bytes(o.secret.data(), o.secret.size()); },
          [](MeshOptions& o, nb::bytes secret) { o.secret.assign(secret.c_str(), secret.size()); })
      .def_rw("hosts", &MeshOptions::hosts)
      .def_rw("ports", &MeshOptions::ports)
      .def_rw("host_keys", &MeshOptions::host_keys)
      .def_rw("enable_shm", &MeshOptions::enable_shm)
      .def_rw("shm_buffer_bytes", &MeshOptions::shm_buffer_bytes)
      .def_rw("tcp_chunk_bytes", &MeshOptions::tcp_chunk_bytes)
      .def_rw("tcp_socket_buffer_bytes", &MeshOptions::tcp_socket_buffer_bytes)
      .def_rw("connect_timeout_s", &MeshOptions::connect_timeout_s)
      .def_rw("timeout_s", &MeshOptions::timeout_s)
      .def_rw("spin_us", &MeshOptions::spin_us)
      .def_rw("yield_us", &MeshOptions::yield_us)
      .def_rw("job_tag", &MeshOptions::job_tag);
  nb::class_<EngineOptions>(m, "EngineOptions", "The background engine's knobs (native/engine/engine.h).")
      .def(nb::init<>())
      .def_rw("fusion_threshold_bytes", &EngineOptions::fusion_threshold_bytes)
      .def_rw("cycle_time_ms", &EngineOptions::cycle_time_ms)
      .def_rw("cache_capacity", &EngineOptions::cache_capacity)
      .def_rw("timeline", &EngineOptions::timeline)
      .def_rw("stall_check_s", &EngineOptions::stall_check_s)
      .def_rw("stall_shutdown_s", &EngineOptions::stall_shutdown_s);
}

}  // namespace

NB_MODULE(_native, m) {
  m.doc() = "spark-hvd native core: transports, ring collectives and reduction kernels.";
  // Bumped whenever a binding's signature changes, so a stale build fails at import with a clear message.
  m.attr("ABI_VERSION") = 4;
  register_contracts(m);

  PyObject* base = make_error_class(m, "CollectiveError", PyExc_RuntimeError, "Base class of all collective errors.");
  g_errors[int(ErrorKind::kGeneric)] = base;
  g_errors[int(ErrorKind::kTimeout)] =
      make_error_class(m, "CollectiveTimeoutError", base, "A collective or connection passed its deadline.");
  g_errors[int(ErrorKind::kPeerFailure)] =
      make_error_class(m, "PeerFailureError", base, "A peer rank died, disconnected or aborted; .rank names it.");
  g_errors[int(ErrorKind::kMismatch)] =
      make_error_class(m, "MismatchError", base, "Ranks disagree on a collective's shape, dtype, op or root.");
  g_errors[int(ErrorKind::kAuthentication)] =
      make_error_class(m, "AuthenticationError", base, "A peer failed the job-secret challenge.");
  g_errors[int(ErrorKind::kInvalidArgument)] =
      make_error_class(m, "InvalidArgumentError", base, "A collective was called with bad arguments.");

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      raise_python(e);
    }
  });

  nb::class_<Listener>(m, "Listener")
      .def_ro("port", &Listener::port)
      .def("close", [](Listener& l) { l.fd.reset(); });

  m.def(
      "listen",
      [](const std::string& host) {
        auto l = std::make_unique<Listener>();
        l->port = Mesh::bind_listener(host, &l->fd);
        return l.release();
      },
      nb::arg("host"), nb::rv_policy::take_ownership, "Bind a listening socket for the mesh; publish .port to peers.");

  nb::class_<PyCommunicator>(m, "Communicator")
      .def(
          "__init__",
          [](PyCommunicator* self, Listener& listener, MeshOptions options) {
            new (self) PyCommunicator();
            Fd fd = std::move(listener.fd);
            nb::gil_scoped_release release;
            self->comm = std::make_unique<Communicator>(std::move(options), std::move(fd));
          },
          nb::arg("listener"), nb::arg("options"))
      .def_prop_ro("rank", [](PyCommunicator& c) { return c.comm->rank(); })
      .def_prop_ro("size", [](PyCommunicator& c) { return c.comm->size(); })
      .def("uses_shm", [](PyCommunicator& c, int peer) { return c.comm->uses_shm(peer); })
      .def(
          "allreduce",
          [](PyCommunicator& c, nb::handle tensor, ReduceOp op, double prescale, double postscale,
             const std::string& name, std::optional<DType> dtype, nb::handle shape) {
            TensorArg t(tensor, dtype, shape, true, name);
            CallInfo call = direct_call(CollectiveKind::kAllreduce, name, t.ref());
            call.op = op;
            call.prescale = prescale;
            call.postscale = postscale;
            nb::gil_scoped_release release;
            DirectCall lock(c);
            c.comm->run(std::move(call), t.ref().data);
          },
          nb::arg("tensor"), nb::arg("op"), nb::arg("prescale"), nb::arg("postscale"), nb::arg("name"),
          nb::arg("dtype") = nb::none(), nb::arg("shape") = nb::none(),
          "In place. `tensor` is a buffer, or an address with `dtype` and `shape`.")
      .def(
          "allgather",
          [](PyCommunicator& c, nb::handle tensor, const std::string& name, std::optional<DType> dtype, nb::handle shape) {
            TensorArg t(tensor, dtype, shape, false, name);
            OwnedResult r;
            {
              nb::gil_scoped_release release;
              DirectCall lock(c);
              r = c.comm->run(direct_call(CollectiveKind::kAllgather, name, t.ref()), t.ref().data);
            }
            size_t bytes = result_bytes(r, t.ref().dtype);
            return nb::make_tuple(to_numpy(r, bytes), r.shape);
          },
          nb::arg("tensor"), nb::arg("name"), nb::arg("dtype") = nb::none(), nb::arg("shape") = nb::none())
      .def(
          "broadcast",
          [](PyCommunicator& c, nb::handle tensor, int root, const std::string& name, std::optional<DType> dtype,
             nb::handle shape) {
            TensorArg t(tensor, dtype, shape, true, name);
            CallInfo call = direct_call(CollectiveKind::kBroadcast, name, t.ref());
            call.root = root;
            nb::gil_scoped_release release;
            DirectCall lock(c);
            c.comm->run(std::move(call), t.ref().data);
          },
          nb::arg("tensor"), nb::arg("root"), nb::arg("name"), nb::arg("dtype") = nb::none(), nb::arg("shape") = nb::none())
      .def(
          "alltoall",
          [](PyCommunicator& c, nb::handle tensor, std::vector<int64_t> splits, const std::string& name,
             std::optional<DType> dtype, nb::handle shape) {
            TensorArg t(tensor, dtype, shape, false, name);
            CallInfo call = direct_call(CollectiveKind::kAlltoall, name, t.ref());
            call.splits = std::move(splits);
            OwnedResult r;
            {
              nb::gil_scoped_release release;
              DirectCall lock(c);
              r = c.comm->run(std::move(call), t.ref().data);
            }
            size_t bytes = result_bytes(r, t.ref().dtype);
            return nb::make_tuple(to_numpy(r, bytes), r.shape, r.received_splits);
          },
          nb::arg("tensor"), nb::arg("splits"), nb::arg("name"), nb::arg("dtype") = nb::none(),
          nb::arg("shape") = nb::none())
      .def(
          "reducescatter",
          [](PyCommunicator& c, nb::handle tensor, ReduceOp op, double prescale, double postscale,
             const std::string& name, std::optional<DType> dtype, nb::handle shape) {
            TensorArg t(tensor, dtype, shape, false, name);
            CallInfo call = direct_call(CollectiveKind::kReducescatter, name, t.ref());
            call.op = op;
            call.prescale = prescale;
            call.postscale = postscale;
            OwnedResult r;
            {
              nb::gil_scoped_release release;
              DirectCall lock(c);
              r = c.comm->run(std::move(call), t.ref().data);
            }
            size_t bytes = result_bytes(r, t.ref().dtype);
            return nb::make_tuple(to_numpy(r, bytes), r.shape);
          },
          nb::arg("tensor"), nb::arg("op"), nb::arg("prescale"), nb::arg("postscale"), nb::arg("name"),
          nb::arg("dtype") = nb::none(), nb::arg("shape") = nb::none())
      .def("barrier",
           [](PyCommunicator& c) {
             nb::gil_scoped_release release;
             DirectCall lock(c);
             CallInfo call;
             call.kind = CollectiveKind::kBarrier;
             c.comm->run(std::move(call), nullptr);
           })
      .def("shutdown", [](PyCommunicator& c) {
        nb::gil_scoped_release release;
        std::lock_guard<std::mutex> lock(c.mutex);
        c.comm->shutdown();
      });

  nb::class_<PyEngine>(m, "Engine")
      .def(
          "__init__",
          [](PyEngine* self, PyCommunicator& comm, EngineOptions options) {
            new (self) PyEngine();
            std::lock_guard<std::mutex> lock(comm.mutex);
            if (comm.engine_running) fail(ErrorKind::kInvalidArgument, "an engine already runs on this communicator");
            self->engine = std::make_unique<Engine>(comm.comm->mesh(), std::move(options));
            self->comm = &comm;
            comm.engine_running = true;
          },
          nb::arg("comm"), nb::arg("options"), nb::keep_alive<1, 2>())
      .def(
          "enqueue",
          [](PyEngine& e, CollectiveKind kind, const std::string& name, nb::handle tensor, std::optional<DType> dtype,
             nb::handle shape, ReduceOp op, int root, double prescale, double postscale, std::vector<int64_t> splits,
             int group, int group_size) {
            RequestSpec spec;
            spec.kind = kind;
            spec.name = name;
            spec.op = op;
            spec.root = root;
            spec.prescale = prescale;
            spec.postscale = postscale;
            spec.splits = std::move(splits);
            spec.group = group;
            spec.group_size = group_size;
            void* data = nullptr;
            if (!tensor.is_none()) {
              bool writes = spec.kind == CollectiveKind::kAllreduce || spec.kind == CollectiveKind::kBroadcast;
              TensorArg t(tensor, dtype, shape, writes, name);
              data = t.ref().data;
              spec.dtype = t.ref().dtype;
              spec.shape = t.ref().shape;
            }
            return e.engine->enqueue(std::move(spec), data);
          },
          nb::arg("kind"), nb::arg("name"), nb::arg("tensor").none(), nb::arg("dtype").none(), nb::arg("shape").none(), nb::arg("op"),
          nb::arg("root"), nb::arg("prescale"), nb::arg("postscale"), nb::arg("splits"), nb::arg("group"),
          nb::arg("group_size"))
      .def("poll", [](PyEngine& e, int64_t handle) { return e.engine->poll(handle); }, nb::arg("handle"))
      .def(
          "wait",
          [](PyEngine& e, int64_t handle, double timeout_s, DType dtype) {
            HandleOutcome out;
            {
              nb::gil_scoped_release release;
              out = e.engine->wait(handle, timeout_s);
            }
            return outcome_to_python(out, dtype);
          },
          nb::arg("handle"), nb::arg("timeout_s"), nb::arg("dtype") = DType::kUInt8,
          "Blocks until the handle completes. Returns None, the last rank to join, or (flat uint8 array, shape"
          "[, received_splits]); raises the collective's error.")
      .def("shutdown", [](PyEngine& e) {
        {
          nb::gil_scoped_release release;
          e.engine->shutdown();
        }
        std::lock_guard<std::mutex> lock(e.comm->mutex);
        e.comm->engine_running = false;
      });

  m.def(
      "reduce_arrays",
      [](uintptr_t dst, uintptr_t src, size_t count, DType dtype, ReduceOp op) {
        nb::gil_scoped_release release;
        reduce_inplace(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), count, dtype, op);
      },
      nb::arg("dst"), nb::arg("src"), nb::arg("count"), nb::arg("dtype"), nb::arg("op"),
      "dst = dst (op) src, element-wise; exposed for the kernel tests.");
  // The finishing steps of a reduction, shared with the MPI backend so both backends round alike.
  m.def(
      "scale_array",
      [](uintptr_t buf, size_t count, DType dtype, double factor) {
        nb::gil_scoped_release release;
        scale(reinterpret_cast<void*>(buf), count, dtype, factor);
      },
      nb::arg("buf"), nb::arg("count"), nb::arg("dtype"), nb::arg("factor"), "buf *= factor, rounded as reduce.h says.");
  m.def(
      "divide_array",
      [](uintptr_t buf, size_t count, DType dtype, int64_t divisor) {
        nb::gil_scoped_release release;
        divide(reinterpret_cast<void*>(buf), count, dtype, divisor);
      },
      nb::arg("buf"), nb::arg("count"), nb::arg("dtype"), nb::arg("divisor"), "Average's final division.");
  register_nccl_bindings(m);
  m.def("reduce_isa", &reduce_isa, "The vectorised instruction set the reduction kernels use.");
  m.def(
      "limit_reduce_isa", [](const std::string& name) { return limit_reduce_isa(name.c_str()); }, nb::arg("name"),
      "Caps the kernels' instruction set (baseline, avx2, avx512); returns True if that lowered it.");
}

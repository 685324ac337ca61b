// The Python binding (collective._native), split by area: errors, contracts (enums and option structs),
// tensors, the direct communicator, the engine, the kernels and NCCL. This folder is the only code that
// knows Python. Every blocking call releases the GIL.
#pragma once
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "communicator.h"
#include "engine/messages.h"

namespace shvd {
namespace nb = nanobind;

void register_errors(nb::module_& m);
void register_contracts(nb::module_& m);
void register_communicator(nb::module_& m);
void register_engine(nb::module_& m);
void register_kernels(nb::module_& m);
void register_nccl(nb::module_& m);

// A tensor handed over either as an object with the buffer protocol (numpy: one call, no copy) or as a
// raw address with an explicit dtype and shape (torch and TensorFlow adapters). Holds the buffer view
// for as long as it lives.
class TensorArg {
 public:
  TensorArg(nb::handle source, std::optional<DType> dtype, nb::handle shape, bool writable, const std::string& name);
  ~TensorArg();
  TensorArg(const TensorArg&) = delete;
  TensorArg& operator=(const TensorArg&) = delete;
  void* data() const { return data_; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  std::vector<int64_t> take_shape() { return std::move(shape_); }

 private:
  Py_buffer view_{};
  bool held_ = false;
  void* data_ = nullptr;
  DType dtype_ = DType::kUInt8;
  std::vector<int64_t> shape_;
};

// One collective call from Python, as the direct communicator and the engine both take it: the
// request, and this rank's tensor (none for barrier and join).
struct PyCall {
  // `splits`: a sequence of ints, or None for none.
  PyCall(CollectiveKind kind, const std::string& name, nb::handle tensor, std::optional<DType> dtype,
         nb::handle shape, ReduceOp op, int root, double prescale, double postscale, nb::handle splits);
  void* data() const { return tensor ? tensor->data() : nullptr; }

  RequestSpec spec;
  std::optional<TensorArg> tensor;  // in place, not on the heap: a small call takes about a microsecond
};

// None for in-place kinds; (flat uint8 array, shape[, received splits]) for those that allocate.
nb::object result_to_python(OwnedResult& result, DType dtype, bool returns_result);

// Serialises callers from several Python threads; the mesh itself is single-threaded.
struct PyCommunicator {
  std::unique_ptr<Communicator> comm;
  std::mutex mutex;
  bool engine_running = false;  // then the engine owns the mesh and direct calls must not touch it
};

}  // namespace shvd

// How tensors and calls cross from Python, and results back: one conversion for direct calls and the
// engine alike.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>

#include "algorithms/collective_op.h"
#include "bindings/bindings.h"
#include "common/error.h"

namespace shvd {
namespace {

DType dtype_from_format(const char* format, Py_ssize_t itemsize) {
  // Native byte order only: '=' and '@' prefixes are fine, anything else is not ours to reinterpret.
  if (format[0] == '@' || format[0] == '=') ++format;
  if (format[0] != '\0' && format[1] == '\0') {
    switch (format[0]) {
      case 'B': return DType::kUInt8;
      case 'b': return DType::kInt8;
      case 'h': return DType::kInt16;
      case 'H': return DType::kUInt16;
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
  fail(ErrorKind::kInvalidArgument,
       std::string("unsupported element format '") + format + "'; use one of " + supported_dtypes());
}

// Hands a result buffer to Python as a flat uint8 numpy array that owns it; the caller views and reshapes.
nb::ndarray<nb::numpy, uint8_t> to_numpy(OwnedResult& result, size_t bytes) {
  uint8_t* raw = result.data.release();
  nb::capsule owner(raw, [](void* p) noexcept { delete[] static_cast<uint8_t*>(p); });
  size_t shape[1] = {bytes};
  return nb::ndarray<nb::numpy, uint8_t>(raw, 1, shape, owner);
}

}  // namespace

TensorArg::TensorArg(nb::handle source, std::optional<DType> dtype, nb::handle shape, bool writable,
                     const std::string& name) {
  if (PyLong_Check(source.ptr())) {
    if (!dtype) fail(ErrorKind::kInvalidArgument, "tensor '" + name + "' given by address needs a dtype");
    data_ = reinterpret_cast<void*>(PyLong_AsUnsignedLongLong(source.ptr()));
    dtype_ = *dtype;
    for (nb::handle d : shape) shape_.push_back(nb::cast<int64_t>(d));
  } else {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(source.ptr(), &view_, flags) != 0) {
      PyErr_Clear();
      fail(ErrorKind::kInvalidArgument,
           "tensor '" + name + "' must be a C-contiguous" + (writable ? ", writable" : "") + " buffer");
    }
    held_ = true;
    data_ = view_.buf;
    // A dtype overrides the buffer's format: bfloat16 arrives as its uint16 bit pattern.
    dtype_ = dtype ? *dtype : dtype_from_format(view_.format, view_.itemsize);
    shape_.assign(view_.shape, view_.shape + view_.ndim);
  }
}

TensorArg::~TensorArg() {
  if (held_) PyBuffer_Release(&view_);
}

PyCall::PyCall(CollectiveKind kind, const std::string& name, nb::handle tensor, std::optional<DType> dtype,
               nb::handle shape, ReduceOp op, int root, double prescale, double postscale, nb::handle splits) {
  spec.kind = kind;
  spec.name = name;
  spec.op = op;
  spec.root = root;
  spec.prescale = prescale;
  spec.postscale = postscale;
  if (!splits.is_none()) {
    for (nb::handle s : splits) spec.splits.push_back(nb::cast<int64_t>(s));
  }
  if (!tensor.is_none()) {
    // Kinds without an output of their own write their result into the tensor.
    const bool writes = !op_for(kind).returns_result;
    this->tensor.emplace(tensor, dtype, shape, writes, name);
    spec.dtype = this->tensor->dtype();
    spec.shape = this->tensor->take_shape();
  }
}

nb::object result_to_python(OwnedResult& result, DType dtype, bool returns_result) {
  if (!returns_result) return nb::none();
  const size_t bytes = element_count(result.shape) * dtype_size(dtype);
  if (!result.received_splits.empty()) {
    return nb::make_tuple(to_numpy(result, bytes), result.shape, result.received_splits);
  }
  return nb::make_tuple(to_numpy(result, bytes), result.shape);
}

}  // namespace shvd

// The reduction kernels, for the kernel tests and for the MPI backend, which finishes its reductions
// with them so that both backends round alike.
#include <nanobind/stl/string.h>

#include "algorithms/collective_op.h"
#include "bindings/bindings.h"
#include "reduce/reduce.h"

namespace shvd {

void register_kernels(nb::module_& m) {
  m.def(
      "reduce_arrays",
      [](uintptr_t dst, uintptr_t src, size_t count, DType dtype, ReduceOp op) {
        nb::gil_scoped_release release;
        reduce_inplace(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), count, dtype, op);
      },
      nb::arg("dst"), nb::arg("src"), nb::arg("count"), nb::arg("dtype"), nb::arg("op"),
      "dst = dst (op) src, element-wise.");
  m.def(
      "scale_array",
      [](uintptr_t buf, size_t count, DType dtype, double factor) {
        nb::gil_scoped_release release;
        scale(reinterpret_cast<void*>(buf), count, dtype, factor);
      },
      nb::arg("buf"), nb::arg("count"), nb::arg("dtype"), nb::arg("factor"), "buf *= factor, rounded as reduce.h says.");
  m.def(
      "finish_reduction",
      [](uintptr_t buf, size_t count, DType dtype, ReduceOp op, int world_size, double postscale) {
        nb::gil_scoped_release release;
        apply_finish(reinterpret_cast<void*>(buf), count, dtype, finish_for(dtype, op, world_size, postscale));
      },
      nb::arg("buf"), nb::arg("count"), nb::arg("dtype"), nb::arg("op"), nb::arg("world_size"), nb::arg("postscale"),
      "Average's division, then the postscale: how every reduction ends.");
  m.def("reduce_isa", &reduce_isa, "The vectorised instruction set the reduction kernels use.");
  m.def(
      "limit_reduce_isa", [](const std::string& name) { return limit_reduce_isa(name.c_str()); }, nb::arg("name"),
      "Caps the kernels' instruction set (baseline, avx2, avx512); returns True if that lowered it.");
}

}  // namespace shvd

// NCCL: the library and its communicator. Device memory arrives as raw
// addresses (torch's data_ptr) and streams as cudaStream_t values (torch's cuda_stream); every call
// that can block (communicator creation, which waits for all ranks) releases the GIL.
#include <nanobind/nanobind.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>

#include "algorithms/collective_op.h"
#include "bindings/bindings.h"
#include "common/error.h"
#include "nccl/nccl.h"

namespace shvd {
namespace {

std::array<uint8_t, nccl_abi::kUniqueIdBytes> id_from_bytes(const nb::bytes& raw) {
  std::array<uint8_t, nccl_abi::kUniqueIdBytes> id{};
  if (raw.size() != id.size()) {
    fail(ErrorKind::kInvalidArgument, "an NCCL unique id is " + std::to_string(id.size()) + " bytes, got " +
                                          std::to_string(raw.size()));
  }
  std::memcpy(id.data(), raw.c_str(), id.size());
  return id;
}

void register_library(nb::module_& m) {
  nb::class_<NcclLibrary>(m, "NcclLibrary")
      .def(nb::new_([](std::vector<std::string> nccl, std::vector<std::string> cudart) {
             return std::make_shared<NcclLibrary>(nccl, cudart);
           }),
           nb::arg("nccl_candidates"), nb::arg("cudart_candidates"),
           "dlopens the first libnccl candidate that loads (and libcudart, optionally).")
      .def_prop_ro("path", &NcclLibrary::path)
      .def_prop_ro("cudart_path", &NcclLibrary::cudart_path)
      .def_prop_ro("version", &NcclLibrary::version)
      .def("unique_id",
           [](const NcclLibrary& lib) {
             auto id = lib.unique_id();
             return nb::bytes(reinterpret_cast<const char*>(id.data()), id.size());
           })
      .def(
          "synchronize",
          [](const NcclLibrary& lib, uintptr_t stream) {
            nb::gil_scoped_release release;
            lib.synchronize(stream);
          },
          nb::arg("stream"));
}

void register_comm(nb::module_& m) {
  nb::class_<NcclComm>(m, "NcclComm")
      .def(nb::new_([](std::shared_ptr<NcclLibrary> lib, nb::bytes unique_id, int size, int rank) {
             auto id = id_from_bytes(unique_id);
             nb::gil_scoped_release release;  // returns once every rank has joined
             return std::make_shared<NcclComm>(std::move(lib), id, size, rank);
           }),
           nb::arg("library"), nb::arg("unique_id"), nb::arg("size"), nb::arg("rank"))
      .def_prop_ro("rank", &NcclComm::rank)
      .def_prop_ro("size", &NcclComm::size)
      .def(
          "allreduce",
          [](NcclComm& c, uintptr_t send, uintptr_t recv, size_t count, DType dtype, ReduceOp op, uintptr_t stream) {
            c.allreduce(reinterpret_cast<const void*>(send), reinterpret_cast<void*>(recv), count, dtype,
                        op, stream);
          },
          nb::arg("send"), nb::arg("recv"), nb::arg("count"), nb::arg("dtype"), nb::arg("op"), nb::arg("stream"))
      .def(
          "broadcast",
          [](NcclComm& c, uintptr_t send, uintptr_t recv, size_t count, DType dtype, int root, uintptr_t stream) {
            // The broadcast op's own rule (algorithms/broadcast.cc), for the NCCL driver too.
            CallInfo call;
            call.kind = CollectiveKind::kBroadcast;
            call.root = root;
            validate_call(call, c.size());
            c.broadcast(reinterpret_cast<const void*>(send), reinterpret_cast<void*>(recv), count, dtype,
                        root, stream);
          },
          nb::arg("send"), nb::arg("recv"), nb::arg("count"), nb::arg("dtype"), nb::arg("root"), nb::arg("stream"))
      .def(
          "allgather",
          [](NcclComm& c, uintptr_t send, uintptr_t recv, size_t send_count, DType dtype, uintptr_t stream) {
            c.allgather(reinterpret_cast<const void*>(send), reinterpret_cast<void*>(recv), send_count,
                        dtype, stream);
          },
          nb::arg("send"), nb::arg("recv"), nb::arg("send_count"), nb::arg("dtype"), nb::arg("stream"))
      .def(
          "reducescatter",
          [](NcclComm& c, uintptr_t send, uintptr_t recv, size_t recv_count, DType dtype, ReduceOp op, uintptr_t stream) {
            c.reducescatter(reinterpret_cast<const void*>(send), reinterpret_cast<void*>(recv), recv_count,
                            dtype, op, stream);
          },
          nb::arg("send"), nb::arg("recv"), nb::arg("recv_count"), nb::arg("dtype"), nb::arg("op"), nb::arg("stream"))
      .def(
          "exchange",
          [](NcclComm& c, uintptr_t send, std::vector<size_t> send_counts, std::vector<size_t> send_offsets,
             uintptr_t recv, std::vector<size_t> recv_counts, std::vector<size_t> recv_offsets, DType dtype,
             uintptr_t stream) {
            c.exchange(reinterpret_cast<const void*>(send), send_counts, send_offsets, reinterpret_cast<void*>(recv),
                       recv_counts, recv_offsets, dtype, stream);
          },
          nb::arg("send"), nb::arg("send_counts"), nb::arg("send_offsets"), nb::arg("recv"), nb::arg("recv_counts"),
          nb::arg("recv_offsets"), nb::arg("dtype"), nb::arg("stream"),
          "Grouped ncclSend/ncclRecv: element counts and offsets per peer.")
      .def("destroy", [](NcclComm& c) {
        nb::gil_scoped_release release;
        c.destroy();
      });
}

}  // namespace

void register_nccl(nb::module_& m) {
  register_library(m);
  register_comm(m);
}

}  // namespace shvd

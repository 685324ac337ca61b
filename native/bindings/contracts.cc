// What crosses the boundary is defined once, in C++, and exported: the DType, ReduceOp and
// CollectiveKind enums (generated from native/common/types.h's tables), the option structs, the text
// naming the supported dtypes, and each collective's rules (local validation and cross-rank agreement),
// which the MPI backend applies to its own calls.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "algorithms/collective_op.h"
#include "bindings/bindings.h"
#include "engine/engine.h"

namespace shvd {
namespace {

void register_enums(nb::module_& m) {
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
  m.attr("SUPPORTED_DTYPES") = supported_dtypes();
}

// Field names are Config's, so Config.to_native() copies each knob by name.
void register_options(nb::module_& m) {
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
      .def_rw("handshake_timeout_s", &MeshOptions::handshake_timeout_s)
      .def_rw("max_pending_handshakes", &MeshOptions::max_pending_handshakes)
      .def_rw("timeout_s", &MeshOptions::timeout_s)
      .def_rw("spin_us", &MeshOptions::spin_us)
      .def_rw("yield_us", &MeshOptions::yield_us)
      .def_rw("hierarchical_allreduce", &MeshOptions::hierarchical_allreduce, nb::arg().none())
      .def_rw("small_call_radix", &MeshOptions::small_call_radix);
  nb::class_<EngineOptions>(m, "EngineOptions", "The background engine's knobs (native/engine/engine.h).")
      .def(nb::init<>())
      .def_rw("fusion_threshold_bytes", &EngineOptions::fusion_threshold_bytes)
      .def_rw("cycle_time_ms", &EngineOptions::cycle_time_ms)
      .def_rw("cache_capacity", &EngineOptions::cache_capacity)
      .def_rw("timeline", &EngineOptions::timeline)
      .def_rw("stall_check_s", &EngineOptions::stall_check_s)
      .def_rw("stall_shutdown_s", &EngineOptions::stall_shutdown_s);
}

// A call as the MPI backend describes it: (kind, name, dtype or -1, shape, op, root, prescale,
// postscale, splits), the fields of collective.mpi.calls.Call.
using PyCallFields = std::tuple<CollectiveKind, std::string, int, std::vector<int64_t>, ReduceOp, int, double, double,
                                std::vector<int64_t>>;

CallInfo call_from_fields(const PyCallFields& f, uint64_t seq) {
  CallInfo call;
  call.kind = std::get<0>(f);
  call.name = std::get<1>(f);
  call.dtype = is_dtype(std::get<2>(f)) ? DType(std::get<2>(f)) : DType::kUInt8;  // -1: no tensor
  call.shape = std::get<3>(f);
  call.op = std::get<4>(f);
  call.root = std::get<5>(f);
  call.prescale = std::get<6>(f);
  call.postscale = std::get<7>(f);
  call.splits = std::get<8>(f);
  call.seq = seq;
  return call;
}

void register_rules(nb::module_& m) {
  nb::class_<AgreementRules>(m, "AgreementRules", "Which fields of a call must agree across ranks.")
      .def_ro("dtype", &AgreementRules::dtype)
      .def_ro("shape", &AgreementRules::shape)
      .def_ro("trailing_shape", &AgreementRules::trailing_shape)
      .def_ro("op", &AgreementRules::op)
      .def_ro("root", &AgreementRules::root)
      .def_ro("scales", &AgreementRules::scales);
  m.def(
      "agreement_rules", [](CollectiveKind kind) { return op_for(kind).rules; }, nb::arg("kind"),
      "The fields a collective of this kind must agree on across ranks.");
  m.def(
      "validate_call",
      [](CollectiveKind kind, const std::string& name, std::vector<int64_t> shape, int root,
         std::vector<int64_t> splits, int size) {
        CallInfo call;
        call.kind = kind;
        call.name = name;
        call.shape = std::move(shape);
        call.root = root;
        call.splits = std::move(splits);
        validate_call(call, size);
        return call.splits;
      },
      nb::arg("kind"), nb::arg("name"), nb::arg("shape"), nb::arg("root"), nb::arg("splits"), nb::arg("size"),
      "The op's own checks of one call, for drivers outside the native core (MPI, NCCL); raises "
      "InvalidArgumentError. Returns the splits, completed (alltoall's even split).");
  m.def(
      "check_agreement",
      [](const std::vector<PyCallFields>& fields, const std::vector<int>& ranks, size_t mine, uint64_t number) {
        std::vector<CallInfo> calls;
        for (const PyCallFields& f : fields) calls.push_back(call_from_fields(f, number));
        std::vector<const CallInfo*> pointers;
        for (const CallInfo& c : calls) pointers.push_back(&c);
        check_agreement(pointers, ranks, mine);
      },
      nb::arg("calls"), nb::arg("ranks"), nb::arg("mine"), nb::arg("number"),
      "Raises MismatchError, naming the field and what each rank passed, unless the calls agree.");
}

}  // namespace

void register_contracts(nb::module_& m) {
  register_enums(m);
  register_options(m);
  register_rules(m);
}

}  // namespace shvd

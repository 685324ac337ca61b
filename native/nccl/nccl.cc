#include "nccl/nccl.h"

#include <cstring>

#include "common/error.h"

namespace shvd {
namespace {

const char kNcclHint[] =
    "CUDA tensors need NCCL: pip install nvidia-nccl-cu13 (or nvidia-nccl-cu12 for CUDA 12), or point "
    "COLLECTIVE_NCCL_LIBRARY / Config.nccl_library at libnccl.so.2";

template <class F>
F lookup(const DynamicLibrary& lib, const char* name) {
  return reinterpret_cast<F>(lib.symbol(name));
}

}  // namespace

int nccl_dtype(DType dtype) {
  switch (dtype) {
    case DType::kUInt8: return nccl_abi::kUint8;
    case DType::kInt8: return nccl_abi::kInt8;
    case DType::kInt32: return nccl_abi::kInt32;
    case DType::kInt64: return nccl_abi::kInt64;
    case DType::kFloat16: return nccl_abi::kFloat16;
    case DType::kBFloat16: return nccl_abi::kBfloat16;
    case DType::kFloat32: return nccl_abi::kFloat32;
    case DType::kFloat64: return nccl_abi::kFloat64;
    case DType::kInt16:
    case DType::kUInt16: break;  // NCCL has no 16-bit integers (nor does Horovod's NCCL path)
  }
  fail(ErrorKind::kInvalidArgument, std::string("NCCL has no ") + dtype_name(dtype) +
                                        " type: move the tensor to the CPU or cast it (e.g. to int32)");
}

int nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage: return nccl_abi::kSum;
    case ReduceOp::kMin: return nccl_abi::kMin;
    case ReduceOp::kMax: return nccl_abi::kMax;
    case ReduceOp::kProduct: return nccl_abi::kProd;
  }
  fail(ErrorKind::kInvalidArgument, "no NCCL op for reduce op code " + std::to_string(int(op)));
}

NcclLibrary::NcclLibrary(const std::vector<std::string>& nccl_candidates,
                         const std::vector<std::string>& cudart_candidates)
    : nccl_(nccl_candidates, "libnccl", kNcclHint) {
  fn_.get_version = lookup<nccl_abi::GetVersionFn>(nccl_, "ncclGetVersion");
  fn_.get_unique_id = lookup<nccl_abi::GetUniqueIdFn>(nccl_, "ncclGetUniqueId");
  fn_.comm_init_rank = lookup<nccl_abi::CommInitRankFn>(nccl_, "ncclCommInitRank");
  fn_.comm_destroy = lookup<nccl_abi::CommDestroyFn>(nccl_, "ncclCommDestroy");
  fn_.comm_abort = lookup<nccl_abi::CommAbortFn>(nccl_, "ncclCommAbort");
  fn_.get_error_string = lookup<nccl_abi::GetErrorStringFn>(nccl_, "ncclGetErrorString");
  fn_.all_reduce = lookup<nccl_abi::AllReduceFn>(nccl_, "ncclAllReduce");
  fn_.broadcast = lookup<nccl_abi::BroadcastFn>(nccl_, "ncclBroadcast");
  fn_.all_gather = lookup<nccl_abi::AllGatherFn>(nccl_, "ncclAllGather");
  fn_.reduce_scatter = lookup<nccl_abi::ReduceScatterFn>(nccl_, "ncclReduceScatter");
  fn_.send = lookup<nccl_abi::SendFn>(nccl_, "ncclSend");
  fn_.recv = lookup<nccl_abi::RecvFn>(nccl_, "ncclRecv");
  fn_.group_start = lookup<nccl_abi::GroupFn>(nccl_, "ncclGroupStart");
  fn_.group_end = lookup<nccl_abi::GroupFn>(nccl_, "ncclGroupEnd");
  if (!cudart_candidates.empty()) {
    try {
      cudart_ = std::make_unique<DynamicLibrary>(cudart_candidates, "libcudart",
                                                 "pip install nvidia-cuda-runtime-cu13 (torch with CUDA ships it)");
      stream_synchronize_ = lookup<nccl_abi::CudaStreamSynchronizeFn>(*cudart_, "cudaStreamSynchronize");
      cuda_error_string_ = lookup<nccl_abi::CudaGetErrorStringFn>(*cudart_, "cudaGetErrorString");
    } catch (const Error&) {
      cudart_.reset();  // NCCL itself works without it; synchronize() then says what is missing
    }
  }
}

void NcclLibrary::check(nccl_abi::Result result, const std::string& what) const {
  if (result == 0) return;
  const char* text = fn_.get_error_string ? fn_.get_error_string(result) : nullptr;
  fail(result == 4 || result == 5 ? ErrorKind::kInvalidArgument : ErrorKind::kGeneric,
       what + " failed: NCCL error " + std::to_string(result) + (text ? std::string(" (") + text + ")" : ""));
}

int NcclLibrary::version() const {
  int v = 0;
  check(fn_.get_version(&v), "ncclGetVersion");
  return v;
}

std::array<uint8_t, nccl_abi::kUniqueIdBytes> NcclLibrary::unique_id() const {
  nccl_abi::UniqueId id{};
  check(fn_.get_unique_id(&id), "ncclGetUniqueId");
  std::array<uint8_t, nccl_abi::kUniqueIdBytes> out{};
  std::memcpy(out.data(), id.internal, out.size());
  return out;
}

void NcclLibrary::synchronize(uintptr_t stream) const {
  if (stream_synchronize_ == nullptr) {
    fail(ErrorKind::kInvalidArgument, "waiting on a CUDA stream needs libcudart, which was not found");
  }
  const nccl_abi::CudaError err = stream_synchronize_(reinterpret_cast<nccl_abi::Stream>(stream));
  if (err != 0) {
    fail(ErrorKind::kGeneric, std::string("cudaStreamSynchronize failed: ") + cuda_error_string_(err));
  }
}

NcclComm::NcclComm(std::shared_ptr<NcclLibrary> lib, const std::array<uint8_t, nccl_abi::kUniqueIdBytes>& id,
                   int size, int rank)
    : lib_(std::move(lib)), size_(size), rank_(rank) {
  if (size < 1 || rank < 0 || rank >= size) {
    fail(ErrorKind::kInvalidArgument, "NCCL rank " + std::to_string(rank) + " outside [0, " + std::to_string(size) + ")");
  }
  nccl_abi::UniqueId uid{};
  std::memcpy(uid.internal, id.data(), id.size());
  lib_->check(lib_->fn().comm_init_rank(&comm_, size, uid, rank), "ncclCommInitRank");
}

// A communicator never destroyed explicitly is left to the process's exit: at interpreter shutdown the
// CUDA context may already be gone, and ncclCommDestroy could then fail or wait.
NcclComm::~NcclComm() = default;

void NcclComm::destroy() {
  if (comm_ == nullptr) return;
  nccl_abi::Comm comm = comm_;
  comm_ = nullptr;
  lib_->check(lib_->fn().comm_destroy(comm), "ncclCommDestroy");
}

nccl_abi::Comm NcclComm::live() const {
  if (comm_ == nullptr) fail(ErrorKind::kInvalidArgument, "the NCCL communicator was destroyed");
  return comm_;
}

void NcclComm::allreduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op, uintptr_t stream) {
  lib_->check(lib_->fn().all_reduce(send, recv, count, nccl_dtype(dtype), nccl_op(op), live(),
                                    reinterpret_cast<nccl_abi::Stream>(stream)),
              "ncclAllReduce");
}

void NcclComm::broadcast(const void* send, void* recv, size_t count, DType dtype, int root, uintptr_t stream) {
  lib_->check(lib_->fn().broadcast(send, recv, count, nccl_dtype(dtype), root, live(),
                                   reinterpret_cast<nccl_abi::Stream>(stream)),
              "ncclBroadcast");
}

void NcclComm::allgather(const void* send, void* recv, size_t send_count, DType dtype, uintptr_t stream) {
  lib_->check(lib_->fn().all_gather(send, recv, send_count, nccl_dtype(dtype), live(),
                                    reinterpret_cast<nccl_abi::Stream>(stream)),
              "ncclAllGather");
}

void NcclComm::reducescatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op,
                             uintptr_t stream) {
  lib_->check(lib_->fn().reduce_scatter(send, recv, recv_count, nccl_dtype(dtype), nccl_op(op), live(),
                                        reinterpret_cast<nccl_abi::Stream>(stream)),
              "ncclReduceScatter");
}

void NcclComm::exchange(const void* send, const std::vector<size_t>& send_counts,
                        const std::vector<size_t>& send_offsets, void* recv, const std::vector<size_t>& recv_counts,
                        const std::vector<size_t>& recv_offsets, DType dtype, uintptr_t stream) {
  const size_t n = size_t(size_);
  if (send_counts.size() != n || send_offsets.size() != n || recv_counts.size() != n || recv_offsets.size() != n) {
    fail(ErrorKind::kInvalidArgument, "NCCL exchange needs one count and offset per rank");
  }
  const size_t item = dtype_size(dtype);
  const int type = nccl_dtype(dtype);
  auto* s = reinterpret_cast<nccl_abi::Stream>(stream);
  nccl_abi::Comm comm = live();
  lib_->check(lib_->fn().group_start(), "ncclGroupStart");
  // Every send and receive is posted before the group ends, so no pair waits on another.
  try {
    post_pairs(send, send_counts, send_offsets, recv, recv_counts, recv_offsets, item, type, comm, s);
  } catch (const Error&) {
    lib_->fn().group_end();  // never leave a group open behind an error
    throw;
  }
  lib_->check(lib_->fn().group_end(), "ncclGroupEnd");
}

void NcclComm::post_pairs(const void* send, const std::vector<size_t>& send_counts,
                          const std::vector<size_t>& send_offsets, void* recv, const std::vector<size_t>& recv_counts,
                          const std::vector<size_t>& recv_offsets, size_t item, int type, nccl_abi::Comm comm,
                          nccl_abi::Stream s) {
  const size_t n = send_counts.size();
  for (size_t peer = 0; peer < n; ++peer) {
    if (send_counts[peer] > 0) {
      lib_->check(lib_->fn().send(static_cast<const uint8_t*>(send) + send_offsets[peer] * item, send_counts[peer],
                                  type, int(peer), comm, s),
                  "ncclSend");
    }
    if (recv_counts[peer] > 0) {
      lib_->check(lib_->fn().recv(static_cast<uint8_t*>(recv) + recv_offsets[peer] * item, recv_counts[peer], type,
                                  int(peer), comm, s),
                  "ncclRecv");
    }
  }
}

}  // namespace shvd

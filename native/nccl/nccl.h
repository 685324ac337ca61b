// NCCL collectives on device memory, through a libnccl found at run time. Every call enqueues work on
// the caller's CUDA stream and returns at once; the caller orders it with the rest of its stream.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/types.h"
#include "nccl/loader.h"
#include "nccl/nccl_api.h"

namespace shvd {

class NcclLibrary {
 public:
  // `nccl_candidates`/`cudart_candidates`: paths or sonames, in the order to try them.
  NcclLibrary(const std::vector<std::string>& nccl_candidates, const std::vector<std::string>& cudart_candidates);

  int version() const;  // e.g. 22807 for 2.28.7
  std::array<uint8_t, nccl_abi::kUniqueIdBytes> unique_id() const;
  const std::string& path() const { return nccl_.path(); }
  std::string cudart_path() const { return cudart_ ? cudart_->path() : std::string(); }

  // Throws with NCCL's own text when `result` is an error.
  void check(nccl_abi::Result result, const std::string& what) const;
  // Waits for every operation queued on `stream` (needs the CUDA runtime).
  void synchronize(uintptr_t stream) const;

  struct Functions {
    nccl_abi::GetVersionFn get_version;
    nccl_abi::GetUniqueIdFn get_unique_id;
    nccl_abi::CommInitRankFn comm_init_rank;
    nccl_abi::CommDestroyFn comm_destroy;
    nccl_abi::CommAbortFn comm_abort;
    nccl_abi::GetErrorStringFn get_error_string;
    nccl_abi::AllReduceFn all_reduce;
    nccl_abi::BroadcastFn broadcast;
    nccl_abi::AllGatherFn all_gather;
    nccl_abi::ReduceScatterFn reduce_scatter;
    nccl_abi::SendFn send;
    nccl_abi::RecvFn recv;
    nccl_abi::GroupFn group_start;
    nccl_abi::GroupFn group_end;
  };
  const Functions& fn() const { return fn_; }

 private:
  DynamicLibrary nccl_;
  std::unique_ptr<DynamicLibrary> cudart_;  // optional: only synchronize() needs it
  Functions fn_{};
  nccl_abi::CudaStreamSynchronizeFn stream_synchronize_ = nullptr;
  nccl_abi::CudaGetErrorStringFn cuda_error_string_ = nullptr;
};

// One NCCL communicator: this rank of `size`, all of them created with the same unique id.
class NcclComm {
 public:
  NcclComm(std::shared_ptr<NcclLibrary> lib, const std::array<uint8_t, nccl_abi::kUniqueIdBytes>& id, int size,
           int rank);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  void allreduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op, uintptr_t stream);
  void broadcast(const void* send, void* recv, size_t count, DType dtype, int root, uintptr_t stream);
  void allgather(const void* send, void* recv, size_t send_count, DType dtype, uintptr_t stream);
  void reducescatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op, uintptr_t stream);
  // Grouped sends and receives: element counts and offsets per peer (allgatherv and alltoallv).
  void exchange(const void* send, const std::vector<size_t>& send_counts, const std::vector<size_t>& send_offsets,
                void* recv, const std::vector<size_t>& recv_counts, const std::vector<size_t>& recv_offsets,
                DType dtype, uintptr_t stream);
  void destroy();
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  nccl_abi::Comm live() const;
  void post_pairs(const void* send, const std::vector<size_t>& send_counts, const std::vector<size_t>& send_offsets,
                  void* recv, const std::vector<size_t>& recv_counts, const std::vector<size_t>& recv_offsets,
                  size_t item, int type, nccl_abi::Comm comm, nccl_abi::Stream s);
  std::shared_ptr<NcclLibrary> lib_;
  nccl_abi::Comm comm_ = nullptr;
  int size_;
  int rank_;
};

// Our dtype and op codes in NCCL's numbering (Average is Sum here: the caller divides).
int nccl_dtype(DType dtype);
int nccl_op(ReduceOp op);

}  // namespace shvd

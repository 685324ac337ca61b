// The few NCCL and CUDA runtime declarations this package uses, written out here so that the build
// needs neither nccl.h nor cuda_runtime.h: both libraries are dlopen'ed at run time (loader.h).
// Values and signatures follow NCCL's public ABI (stable since 2.x) and the CUDA runtime's.
#pragma once
#include <cstddef>

namespace shvd::nccl_abi {

using Result = int;         // ncclResult_t; 0 = ncclSuccess
using Comm = void*;         // ncclComm_t (opaque)
using Stream = void*;       // cudaStream_t (opaque)
using CudaError = int;      // cudaError_t; 0 = cudaSuccess
constexpr size_t kUniqueIdBytes = 128;
struct UniqueId {
  char internal[kUniqueIdBytes];
};

// ncclDataType_t
constexpr int kInt8 = 0, kUint8 = 1, kInt32 = 2, kInt64 = 4, kFloat16 = 6, kFloat32 = 7, kFloat64 = 8,
              kBfloat16 = 9;
// ncclRedOp_t
constexpr int kSum = 0, kProd = 1, kMax = 2, kMin = 3;

using GetVersionFn = Result (*)(int*);
using GetUniqueIdFn = Result (*)(UniqueId*);
using CommInitRankFn = Result (*)(Comm*, int nranks, UniqueId id, int rank);
using CommDestroyFn = Result (*)(Comm);
using CommAbortFn = Result (*)(Comm);
using GetErrorStringFn = const char* (*)(Result);
using AllReduceFn = Result (*)(const void*, void*, size_t, int dtype, int op, Comm, Stream);
using BroadcastFn = Result (*)(const void*, void*, size_t, int dtype, int root, Comm, Stream);
using AllGatherFn = Result (*)(const void*, void*, size_t sendcount, int dtype, Comm, Stream);
using ReduceScatterFn = Result (*)(const void*, void*, size_t recvcount, int dtype, int op, Comm, Stream);
using SendFn = Result (*)(const void*, size_t, int dtype, int peer, Comm, Stream);
using RecvFn = Result (*)(void*, size_t, int dtype, int peer, Comm, Stream);
using GroupFn = Result (*)();

using CudaStreamSynchronizeFn = CudaError (*)(Stream);
using CudaGetErrorStringFn = const char* (*)(CudaError);

}  // namespace shvd::nccl_abi

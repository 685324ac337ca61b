// Same-host transport: a shared-memory segment holding two single-producer/single-consumer byte rings,
// one per direction. Waiting uses cross-process futexes, with timeouts so the caller can watch for
// dead peers and deadlines.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace shvd {

struct alignas(64) RingControl {
  std::atomic<uint64_t> head;  // bytes ever written; only the producer stores it
  char pad0[56];
  std::atomic<uint64_t> tail;  // bytes ever consumed; only the consumer stores it
  char pad1[56];
  std::atomic<uint32_t> data_signal;  // futex word the producer bumps after writing
  std::atomic<uint32_t> consumer_waiting;
  char pad2[56];
  std::atomic<uint32_t> space_signal;  // futex word the consumer bumps after consuming
  std::atomic<uint32_t> producer_waiting;
  char pad3[56];
};

// One direction of a segment, seen from one side.
class ShmRing {
 public:
  ShmRing() = default;
  ShmRing(RingControl* control, uint8_t* data, size_t capacity) : control_(control), data_(data), capacity_(capacity) {}

  // Producer side: copies up to len bytes in; returns how many fitted.
  size_t write_some(const void* src, size_t len);
  // Consumer side: a contiguous readable region (0 if empty), then consume() what was used.
  size_t peek(const uint8_t** region) const;
  void consume(size_t n);

  // Sleep until data arrives / space frees up, or timeout_us passes. Spurious returns are fine.
  void wait_for_data(int timeout_us);
  void wait_for_space(int timeout_us);

 private:
  RingControl* control_ = nullptr;
  uint8_t* data_ = nullptr;
  size_t capacity_ = 0;
  uint64_t cached_tail_ = 0;  // producer's last view of tail, to avoid touching the shared line
};

// A mapped segment with both directions. The lower rank creates it; the higher rank opens it by name;
// the creator unlinks the name once the other side has mapped it, so nothing outlives the job.
class ShmSegment {
 public:
  static ShmSegment create(const std::string& name, size_t ring_capacity);
  static ShmSegment open(const std::string& name, size_t ring_capacity);
  ShmSegment() = default;
  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ~ShmSegment();

  // Ring used to send to the peer, and ring used to receive from it, given which side we are.
  ShmRing outgoing(bool is_creator) const;
  ShmRing incoming(bool is_creator) const;
  void unlink_name();
  const std::string& name() const { return name_; }

 private:
  ShmRing ring(int index) const;
  void* base_ = nullptr;
  size_t mapped_bytes_ = 0;
  size_t ring_capacity_ = 0;
  std::string name_;
  bool owns_name_ = false;
};

}  // namespace shvd

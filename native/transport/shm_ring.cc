#include "transport/shm_ring.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "common/error.h"

namespace shvd {
namespace {

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, int timeout_us) {
  timespec ts{timeout_us / 1000000, (timeout_us % 1000000) * 1000L};
  // Not FUTEX_PRIVATE: the word lives in memory shared between processes.
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

constexpr size_t kControlBytes = 2 * sizeof(RingControl);

}  // namespace

size_t ShmRing::write_some(const void* src, size_t len) {
  uint64_t head = control_->head.load(std::memory_order_relaxed);
  size_t free_bytes = capacity_ - size_t(head - cached_tail_);
  if (free_bytes < len) {
    cached_tail_ = control_->tail.load(std::memory_order_acquire);
    free_bytes = capacity_ - size_t(head - cached_tail_);
  }
  size_t n = len < free_bytes ? len : free_bytes;
  if (n == 0) return 0;
  size_t offset = size_t(head % capacity_);
  size_t first = n < capacity_ - offset ? n : capacity_ - offset;
  std::memcpy(data_ + offset, src, first);
  if (n > first) std::memcpy(data_, static_cast<const uint8_t*>(src) + first, n - first);
  control_->head.store(head + n, std::memory_order_seq_cst);
  control_->data_signal.fetch_add(1, std::memory_order_seq_cst);
  if (control_->consumer_waiting.load(std::memory_order_seq_cst)) futex_wake_all(&control_->data_signal);
  return n;
}

size_t ShmRing::peek(const uint8_t** region) const {
  uint64_t head = control_->head.load(std::memory_order_acquire);
  uint64_t tail = control_->tail.load(std::memory_order_relaxed);
  size_t available = size_t(head - tail);
  if (available == 0) return 0;
  size_t offset = size_t(tail % capacity_);
  *region = data_ + offset;
  size_t contiguous = capacity_ - offset;
  return available < contiguous ? available : contiguous;
}

void ShmRing::consume(size_t n) {
  uint64_t tail = control_->tail.load(std::memory_order_relaxed);
  control_->tail.store(tail + n, std::memory_order_seq_cst);
  control_->space_signal.fetch_add(1, std::memory_order_seq_cst);
  if (control_->producer_waiting.load(std::memory_order_seq_cst)) futex_wake_all(&control_->space_signal);
}

void ShmRing::wait_for_data(int timeout_us) {
  uint32_t signal = control_->data_signal.load(std::memory_order_seq_cst);
  control_->consumer_waiting.store(1, std::memory_order_seq_cst);
  if (control_->head.load(std::memory_order_seq_cst) == control_->tail.load(std::memory_order_relaxed)) {
    futex_wait(&control_->data_signal, signal, timeout_us);
  }
  control_->consumer_waiting.store(0, std::memory_order_relaxed);
}

void ShmRing::wait_for_space(int timeout_us) {
  uint32_t signal = control_->space_signal.load(std::memory_order_seq_cst);
  control_->producer_waiting.store(1, std::memory_order_seq_cst);
  uint64_t head = control_->head.load(std::memory_order_relaxed);
  if (head - control_->tail.load(std::memory_order_seq_cst) >= capacity_) {
    futex_wait(&control_->space_signal, signal, timeout_us);
  }
  control_->producer_waiting.store(0, std::memory_order_relaxed);
}

ShmSegment ShmSegment::create(const std::string& name, size_t ring_capacity) {
  int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) fail(ErrorKind::kGeneric, "shm_open(" + name + ") failed: " + errno_text(errno));
  size_t bytes = kControlBytes + 2 * ring_capacity;
  if (::ftruncate(fd, off_t(bytes)) != 0) {
    int err = errno;
    ::close(fd);
    ::shm_unlink(name.c_str());
    fail(ErrorKind::kGeneric, "cannot size shared memory segment " + name + " to " + std::to_string(bytes) +
                                  " bytes: " + errno_text(err) + " (is /dev/shm big enough? pass enable_shm=False)");
  }
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  ::close(fd);
  if (base == MAP_FAILED) {
    ::shm_unlink(name.c_str());
    fail(ErrorKind::kGeneric, "mmap of " + name + " failed: " + errno_text(err));
  }
  // A fresh segment is zero-filled, which is exactly the empty state of both rings.
  ShmSegment seg;
  seg.base_ = base;
  seg.mapped_bytes_ = bytes;
  seg.ring_capacity_ = ring_capacity;
  seg.name_ = name;
  seg.owns_name_ = true;
  return seg;
}

ShmSegment ShmSegment::open(const std::string& name, size_t ring_capacity) {
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) fail(ErrorKind::kGeneric, "cannot open shared memory segment " + name + ": " + errno_text(errno));
  size_t bytes = kControlBytes + 2 * ring_capacity;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || size_t(st.st_size) != bytes) {
    ::close(fd);
    fail(ErrorKind::kMismatch, "shared memory segment " + name + " has an unexpected size; do all ranks use the "
                               "same shm_buffer_bytes?");
  }
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  ::close(fd);
  if (base == MAP_FAILED) fail(ErrorKind::kGeneric, "mmap of " + name + " failed: " + errno_text(err));
  ShmSegment seg;
  seg.base_ = base;
  seg.mapped_bytes_ = bytes;
  seg.ring_capacity_ = ring_capacity;
  seg.name_ = name;
  return seg;
}

ShmSegment::ShmSegment(ShmSegment&& other) noexcept { *this = std::move(other); }

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    this->~ShmSegment();
    base_ = other.base_;
    mapped_bytes_ = other.mapped_bytes_;
    ring_capacity_ = other.ring_capacity_;
    name_ = std::move(other.name_);
    owns_name_ = other.owns_name_;
    other.base_ = nullptr;
    other.owns_name_ = false;
  }
  return *this;
}

ShmSegment::~ShmSegment() {
  unlink_name();
  if (base_ != nullptr) ::munmap(base_, mapped_bytes_);
  base_ = nullptr;
}

void ShmSegment::unlink_name() {
  if (owns_name_) ::shm_unlink(name_.c_str());
  owns_name_ = false;
}

ShmRing ShmSegment::ring(int index) const {
  auto* controls = static_cast<RingControl*>(base_);
  uint8_t* data = static_cast<uint8_t*>(base_) + kControlBytes + size_t(index) * ring_capacity_;
  return ShmRing(&controls[index], data, ring_capacity_);
}

ShmRing ShmSegment::outgoing(bool is_creator) const { return ring(is_creator ? 0 : 1); }
ShmRing ShmSegment::incoming(bool is_creator) const { return ring(is_creator ? 1 : 0); }

}  // namespace shvd

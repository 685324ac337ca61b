// A reusable, growable byte buffer. Unlike std::vector it never zero-fills, and it keeps its memory
// between calls: a collective that reallocates (and page-faults) megabytes per call is slow.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

namespace shvd {

class ByteBuffer {
 public:
  // Makes room for n bytes; keeps the first min(n, size()) bytes.
  void resize(size_t n) {
    if (n > capacity_) {
      size_t grown = n > 2 * capacity_ ? n : 2 * capacity_;
      std::unique_ptr<uint8_t[]> bigger(new uint8_t[grown]);
      if (size_ > 0) std::memcpy(bigger.get(), data_.get(), size_);
      data_ = std::move(bigger);
      capacity_ = grown;
    }
    size_ = n;
  }
  uint8_t* data() { return data_.get(); }
  const uint8_t* data() const { return data_.get(); }
  size_t size() const { return size_; }

 private:
  std::unique_ptr<uint8_t[]> data_;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

}  // namespace shvd

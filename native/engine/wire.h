// Little binary writer/reader for the engine's negotiation messages. Both ends are this library,
// authenticated, but a reader still checks every length against what is left.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"

namespace shvd {

class ByteWriter {
 public:
  template <typename T>
  void put(const T& v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint32_t>(uint32_t(s.size()));
    bytes_.insert(bytes_.end(), s.begin(), s.end());
  }
  void put_ints(const std::vector<int64_t>& v) {
    put<uint32_t>(uint32_t(v.size()));
    for (int64_t x : v) put<int64_t>(x);
  }
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t len) : p_(data), end_(data + len) {}
  template <typename T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, p_, sizeof(T));
    p_ += sizeof(T);
    return v;
  }
  std::string get_string() {
    uint32_t n = get<uint32_t>();
    need(n);
    std::string s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }
  std::vector<int64_t> get_ints() {
    uint32_t n = get<uint32_t>();
    need(size_t(n) * 8);
    std::vector<int64_t> v(n);
    std::memcpy(v.data(), p_, size_t(n) * 8);
    p_ += size_t(n) * 8;
    return v;
  }
  bool done() const { return p_ == end_; }

 private:
  void need(size_t n) {
    if (size_t(end_ - p_) < n) fail(ErrorKind::kPeerFailure, "truncated negotiation message");
  }
  const uint8_t* p_;
  const uint8_t* end_;
};

}  // namespace shvd

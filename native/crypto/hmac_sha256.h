// SHA-256 and HMAC-SHA-256 (FIPS 180-4, RFC 2104), used to authenticate peers with the per-job secret.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace shvd {

using Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t len);
  Digest finish();

 private:
  void compress(const uint8_t* block);
  uint32_t state_[8];
  uint8_t buffer_[64];
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

Digest hmac_sha256(const std::string& key, const void* data, size_t len);

// Compares without an early exit, so timing does not reveal how many bytes matched.
bool digests_equal(const Digest& a, const Digest& b);

// Cryptographically random bytes from the kernel.
void random_bytes(void* out, size_t len);

}  // namespace shvd

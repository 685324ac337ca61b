// A point in time after which a blocking call gives up. Every wait in the native core takes one.
#pragma once
#include <chrono>
#include <cstdint>

namespace shvd {

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  static Deadline after_seconds(double seconds) {
    Deadline d;
    d.at_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    return d;
  }
  bool expired() const { return Clock::now() >= at_; }
  // Milliseconds left, clamped to [0, cap_ms]; suits poll() and futex timeouts.
  int remaining_ms(int cap_ms) const {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now()).count();
    if (left < 0) return 0;
    return left > cap_ms ? cap_ms : static_cast<int>(left);
  }
  Clock::time_point at() const { return at_; }

 private:
  Clock::time_point at_{};
};

}  // namespace shvd

// Chrome trace ("Trace Event Format") writer: one row per tensor, one complete event per phase
// (negotiate, queue, memcpy into and out of the fusion buffer, the collective). Opens in Perfetto.
#pragma once
#include <chrono>
#include <cstdio>
#include <string>
#include <unordered_map>

namespace shvd {

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;
  Timeline() = default;
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // Starts writing to `path`; an empty path leaves the timeline off.
  void open(const std::string& path, int rank);
  bool enabled() const { return file_ != nullptr; }
  // One finished phase of one tensor.
  void phase(const std::string& tensor, const char* phase, Clock::time_point start, Clock::time_point end,
             const std::string& detail = "");
  // Closes the JSON array so the file is valid JSON.
  void close();

 private:
  int row_for(const std::string& tensor);
  std::FILE* file_ = nullptr;
  int rank_ = 0;
  Clock::time_point origin_;
  std::unordered_map<std::string, int> rows_;
};

}  // namespace shvd

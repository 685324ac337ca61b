// Chrome trace ("Trace Event Format") writer: one row per tensor, one complete event per phase
// (negotiate, queue, memcpy into and out of the fusion buffer, the collective). Opens in Perfetto.
// The engine thread writes; callers may start and stop it at any time (Horovod's start_timeline), so
// every method takes the lock.
#pragma once
#include <chrono>
#include <cstdio>
#include <mutex>
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

  // Starts writing to `path` (closing any file it was writing); an empty path leaves the timeline off.
  // With `mark_cycles`, every engine cycle that runs collectives is marked (cycle_start()).
  void open(const std::string& path, int rank, bool mark_cycles = false);
  // One finished phase of one tensor.
  void phase(const std::string& tensor, const char* phase, Clock::time_point start, Clock::time_point end,
             const std::string& detail = "");
  // An instant event at the start of an engine cycle, if open() asked for them.
  void cycle_start();
  // Closes the JSON array so the file is valid JSON.
  void close();

 private:
  int row_for(const std::string& tensor);
  void close_locked();
  std::mutex mutex_;
  std::FILE* file_ = nullptr;
  bool mark_cycles_ = false;
  int rank_ = 0;
  Clock::time_point origin_;
  std::unordered_map<std::string, int> rows_;
};

}  // namespace shvd

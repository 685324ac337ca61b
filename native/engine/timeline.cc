#include "engine/timeline.h"

#include <cerrno>

#include "common/error.h"

namespace shvd {
namespace {

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

Timeline::~Timeline() { close(); }

void Timeline::open(const std::string& path, int rank, bool mark_cycles) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (path.empty()) return;
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) {
    fail(ErrorKind::kInvalidArgument, "cannot write the timeline to '" + path + "': " + errno_text(errno));
  }
  close_locked();
  file_ = file;
  rows_.clear();
  mark_cycles_ = mark_cycles;
  rank_ = rank;
  origin_ = Clock::now();
  std::fputs("[\n", file_);
  std::fprintf(file_, R"({"name":"process_name","ph":"M","pid":%d,"args":{"name":"rank %d"}})", rank_, rank_);
}

int Timeline::row_for(const std::string& tensor) {
  auto it = rows_.find(tensor);
  if (it != rows_.end()) return it->second;
  int row = int(rows_.size()) + 1;
  rows_.emplace(tensor, row);
  std::fprintf(file_, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}",
               rank_, row, json_escape(tensor).c_str());
  return row;
}

void Timeline::phase(const std::string& tensor, const char* phase, Clock::time_point start, Clock::time_point end,
                     const std::string& detail) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_ == nullptr) return;
  int row = row_for(tensor);
  double ts = std::chrono::duration<double, std::micro>(start - origin_).count();
  double dur = std::chrono::duration<double, std::micro>(end - start).count();
  std::fprintf(file_, ",\n{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f",
               phase, rank_, row, ts, dur < 0 ? 0.0 : dur);
  if (!detail.empty()) std::fprintf(file_, ",\"args\":{\"detail\":\"%s\"}", json_escape(detail).c_str());
  std::fputs("}", file_);
}

void Timeline::cycle_start() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_ == nullptr || !mark_cycles_) return;
  double ts = std::chrono::duration<double, std::micro>(Clock::now() - origin_).count();
  std::fprintf(file_, ",\n{\"name\":\"CYCLE_START\",\"ph\":\"i\",\"s\":\"p\",\"pid\":%d,\"ts\":%.3f}", rank_, ts);
}

void Timeline::close() {
  std::lock_guard<std::mutex> lock(mutex_);
  close_locked();
}

void Timeline::close_locked() {
  if (file_ == nullptr) return;
  std::fputs("\n]\n", file_);
  std::fclose(file_);
  file_ = nullptr;
}

}  // namespace shvd

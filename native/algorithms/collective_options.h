// What every algorithm takes besides its buffers: when to give up, and a tag naming the call in errors.
#pragma once
#include <string>

#include "common/deadline.h"

namespace shvd {

struct CollectiveOptions {
  Deadline deadline;
  std::string tag;  // e.g. "allreduce 'grad.w'"
};

}  // namespace shvd

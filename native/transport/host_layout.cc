#include "transport/host_layout.h"

#include <algorithm>

namespace shvd {

HostLayout layout_hosts(const std::vector<std::string>& host_keys) {
  HostLayout layout;
  const int n = int(host_keys.size());
  std::vector<std::string> keys;  // of each host, in `hosts` order
  layout.host_of.resize(n);
  layout.local_index.resize(n);
  for (int r = 0; r < n; ++r) {
    auto found = std::find(keys.begin(), keys.end(), host_keys[r]);
    const int h = int(found - keys.begin());
    if (found == keys.end()) {
      keys.push_back(host_keys[r]);
      layout.hosts.emplace_back();
    }
    layout.host_of[r] = h;
    layout.local_index[r] = int(layout.hosts[h].size());
    layout.hosts[h].push_back(r);
  }
  layout.ring_position.resize(n);
  for (const std::vector<int>& members : layout.hosts) {
    layout.max_local_size = std::max(layout.max_local_size, int(members.size()));
    for (int r : members) {
      layout.ring_position[r] = int(layout.ring.size());
      layout.ring.push_back(r);
    }
  }
  return layout;
}

}  // namespace shvd

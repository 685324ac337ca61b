// Which ranks share a host, derived from the host key every rank published (equal keys = one host).
//
// Ranks are Spark partition ids, and Spark interleaves hosts (ranks 0 and 2 on one, 1 and 3 on the
// other), so a ring in rank order would cross the network on every hop. Every algorithm that walks the
// ranks in a line (rings, chains, the hierarchy) walks them host by host instead, in this order. Every
// rank holds the same host keys, so every rank derives the same layout without a word exchanged.
#pragma once
#include <string>
#include <vector>

namespace shvd {

struct HostLayout {
  // The ranks of each host in rank order; hosts in the order of their lowest rank.
  std::vector<std::vector<int>> hosts;
  std::vector<int> host_of;      // per rank: its host's index in `hosts`
  std::vector<int> local_index;  // per rank: its position among its host's ranks
  std::vector<int> ring;         // every rank, host by host: the order rings and chains follow
  std::vector<int> ring_position;  // per rank: its index in `ring`
  int max_local_size = 0;          // ranks on the most crowded host

  int host_count() const { return int(hosts.size()); }
};

HostLayout layout_hosts(const std::vector<std::string>& host_keys);

}  // namespace shvd

// Hierarchical allreduce: reduce-scatter within each host (shared memory), one allreduce across hosts per
// slice, all slices in parallel (TCP), then allgather within each host. A host's link then carries
// 2(H-1)/H of the tensor instead of the flat ring's 2(p-1)/p, and a small tensor crosses the network in
// one step instead of 2(p-1).
//
// Hosts may hold different numbers of ranks (3 + 1). The tensor is cut into as many segments as the
// most crowded host has ranks; each host deals its segments out to its ranks in contiguous groups, so a
// rank alone on its host owns every segment, and segment s is reduced across hosts by the ranks that own
// it there. Each segment's final value is computed by one rank and copied to all the others, so every
// rank gets the same bits.
#include <algorithm>

#include "algorithms/algorithms.h"
#include "algorithms/collective_op.h"
#include "algorithms/ring.h"
#include "reduce/reduce.h"

namespace shvd {
namespace {

// Which of a host's `local_size` groups (split_rows(segments, local_size)) holds segment `s`.
int group_of_segment(int s, int segments, int local_size) {
  const int base = segments / local_size;
  const int extra = segments % local_size;
  const int big = extra * (base + 1);  // segments in the first `extra` groups, one larger each
  return s < big ? s / (base + 1) : extra + (s - big) / base;
}

// Element range of each of this host's groups of segments.
struct HostShares {
  std::vector<size_t> elem_offset, elem_count;
  int first_segment = 0, segment_count = 0;  // this rank's own group
};

HostShares host_shares(const Partition& segments, int local_size, int local_index) {
  const int m = int(segments.rows.size());
  Partition groups = split_rows(size_t(m), local_size);
  HostShares shares;
  for (int g = 0; g < local_size; ++g) {
    const size_t first = groups.offset[g], n = groups.rows[g];
    size_t elems = 0;
    for (size_t s = first; s < first + n; ++s) elems += segments.rows[s];
    shares.elem_offset.push_back(n > 0 ? segments.offset[first] : 0);
    shares.elem_count.push_back(elems);
  }
  shares.first_segment = int(groups.offset[local_index]);
  shares.segment_count = int(groups.rows[local_index]);
  return shares;
}

// The ranks that own segment `s` on each host, in host order.
std::vector<int> segment_owners(const HostLayout& layout, int s) {
  std::vector<int> owners;
  for (const std::vector<int>& members : layout.hosts) {
    owners.push_back(members[group_of_segment(s, layout.max_local_size, int(members.size()))]);
  }
  return owners;
}

void run_local_phase(Mesh& mesh, const std::vector<int>& local, int local_index, bool reduce, uint8_t* data,
                     const HostShares& shares, DType dtype, ReduceOp op, const CollectiveOptions& opts) {
  if (local.size() < 2) return;
  RingItems ring(int(local.size()));
  RingView view{&local, local_index};
  if (reduce) {
    // Shift -1: position l ends holding group l, fully reduced over the host.
    add_ring_reduce_scatter(ring.sends, ring.recvs, view, data, shares.elem_offset, shares.elem_count, dtype, op, -1);
  } else {
    const size_t elem = dtype_size(dtype);
    std::vector<size_t> byte_offset, byte_len;
    for (size_t g = 0; g < local.size(); ++g) {
      byte_offset.push_back(shares.elem_offset[g] * elem);
      byte_len.push_back(shares.elem_count[g] * elem);
    }
    add_ring_allgather(ring.sends, ring.recvs, view, data, byte_offset, byte_len, -1, nullptr);
  }
  ring.run(mesh, opts);
}

}  // namespace

bool use_hierarchical_allreduce(const Mesh& mesh, size_t bytes) {
  const HostLayout& layout = mesh.layout();
  if (layout.host_count() < 2) return false;
  const std::optional<bool>& forced = mesh.options().hierarchical_allreduce;
  if (forced.has_value()) return *forced;
  // It pays when a host's ranks can share the link's work, and the tensor is past the one-round path.
  return layout.max_local_size > 1 && !is_small_call(bytes, mesh.size());
}

void hierarchical_allreduce(Mesh& mesh, void* data, size_t count, DType dtype, ReduceOp op,
                            const CollectiveOptions& opts, ByteBuffer& slots) {
  const HostLayout& layout = mesh.layout();
  const int me = mesh.rank();
  const int hosts = layout.host_count();
  if (mesh.size() == 1 || count == 0) return;
  const std::vector<int>& local = layout.hosts[layout.host_of[me]];
  const int local_index = layout.local_index[me];
  const size_t elem = dtype_size(dtype);
  uint8_t* bytes = static_cast<uint8_t*>(data);
  const Partition segments = split_rows(count, layout.max_local_size);
  const HostShares shares = host_shares(segments, int(local.size()), local_index);

  run_local_phase(mesh, local, local_index, true, bytes, shares, dtype, op, opts);

  // Across hosts: one allreduce per segment this rank owns, all in one mesh.run. Segments are appended
  // in increasing order on every rank, so two ranks that share several segments list their items to
  // each other in the same order.
  const int mine = shares.segment_count;
  std::vector<std::vector<int>> owners(mine);
  for (int i = 0; i < mine; ++i) owners[i] = segment_owners(layout, shares.first_segment + i);
  size_t widest = 0;
  for (int i = 0; i < mine; ++i) widest = std::max(widest, segments.rows[shares.first_segment + i] * elem);
  // A segment small enough goes to every other owner at once and each reduces all copies in host
  // order: one network step. Its owners all see the same size, so they all choose alike.
  auto direct = [&](int i) { return is_small_call(segments.rows[shares.first_segment + i] * elem, hosts); };
  slots.resize(std::max<size_t>(widest * size_t(hosts) * size_t(mine), 1));
  RingItems cross(2 * hosts * mine);
  const int position = layout.host_of[me];
  for (int i = 0; i < mine; ++i) {
    const int s = shares.first_segment + i;
    uint8_t* seg = bytes + segments.offset[s] * elem;
    const size_t seg_bytes = segments.rows[s] * elem;
    if (!direct(i)) {
      add_ring_allreduce(cross.sends, cross.recvs, RingView{&owners[i], position}, seg, segments.rows[s], dtype, op);
      continue;
    }
    for (int h = 0; h < hosts; ++h) {
      if (h == position) continue;
      SendItem out;
      out.peer = owners[i][h];
      out.data = seg;
      out.len = seg_bytes;
      cross.sends.push_back(out);
      RecvItem in;
      in.peer = owners[i][h];
      in.dst = slots.data() + (size_t(i) * hosts + h) * widest;
      in.len = seg_bytes;
      cross.recvs.push_back(std::move(in));
    }
  }
  cross.run(mesh, opts);
  std::vector<const void*> inputs(hosts);
  for (int i = 0; i < mine; ++i) {
    if (!direct(i)) continue;
    const int s = shares.first_segment + i;
    uint8_t* seg = bytes + segments.offset[s] * elem;
    for (int h = 0; h < hosts; ++h) inputs[h] = h == position ? seg : slots.data() + (size_t(i) * hosts + h) * widest;
    reduce_many(seg, inputs.data(), inputs.size(), segments.rows[s], dtype, op);
  }

  run_local_phase(mesh, local, local_index, false, bytes, shares, dtype, op, opts);
}

}  // namespace shvd

#include "engine/coordinator.h"

#include <algorithm>

#include "algorithms/collective_op.h"
#include "common/error.h"

namespace shvd {
namespace {

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

// Larger tensors are reduced in place on their own: copying them through the fusion buffer costs more
// than the per-collective overhead fusion saves.
constexpr size_t kLargestFusedTensor = 1 << 20;

bool fusible(const Response& a, const Response& b) {
  if (a.type != ResponseType::kCollective || b.type != ResponseType::kCollective) return false;
  if (a.kind != CollectiveKind::kAllreduce || b.kind != CollectiveKind::kAllreduce) return false;
  const RequestSpec& x = a.entries.front().spec;
  const RequestSpec& y = b.entries.front().spec;
  return x.dtype == y.dtype && x.op == y.op && x.prescale == y.prescale && x.postscale == y.postscale;
}

bool fuses_small(const Response& r) {
  return r.entries.size() > 1 || call_bytes(r.entries.front().spec) <= kLargestFusedTensor;
}

Response error_response(CollectiveKind kind, ErrorKind error_kind, const std::string& error, const RequestSpec& spec) {
  Response resp;
  resp.type = ResponseType::kError;
  resp.kind = kind;
  resp.error_kind = error_kind;
  resp.error = error;
  resp.entries.emplace_back();
  resp.entries.back().spec = spec;
  return resp;
}

}  // namespace

Coordinator::Coordinator(CoordinatorOptions options) : options_(options), joined_(options.size, false) {}

ResponseList Coordinator::process(const std::vector<RankMessage>& messages, Clock::time_point now,
                                  std::vector<std::string>* warnings) {
  ResponseList list;
  fold_in(messages, now, &list);
  respond(ready_in_order(), &list.responses);
  inspect_stalls(now, &list.responses, warnings);
  finish_join(&list.responses);
  list.every_rank_waiting = every_rank_waiting();
  return list;
}

bool Coordinator::every_rank_waiting() const {
  std::vector<bool> waiting = joined_;
  for (const auto& [name, p] : table_) {
    for (size_t r = 0; r < waiting.size(); ++r) waiting[r] = waiting[r] || p.submitted[r];
  }
  return std::all_of(waiting.begin(), waiting.end(), [](bool w) { return w; });
}

void Coordinator::fold_in(const std::vector<RankMessage>& messages, Clock::time_point now, ResponseList* list) {
  for (int r = 0; r < int(messages.size()); ++r) {
    const RankMessage& m = messages[r];
    if (m.shutdown && !list->shutdown) {
      list->shutdown = true;
      list->shutdown_rank = r;
    }
    for (const RequestSpec& spec : m.requests) add(r, spec, now);
    for (uint32_t id : m.cached) {
      if (id >= cache_by_id_.size()) fail(ErrorKind::kPeerFailure, "rank " + std::to_string(r) + " sent an unknown cache id");
      add(r, cache_by_id_[id], now);
    }
  }
}

void Coordinator::add(int rank, const RequestSpec& spec, Clock::time_point now) {
  if (spec.kind == CollectiveKind::kJoin) {
    joined_[rank] = true;
    last_joined_ = rank;
    return;
  }
  auto [it, inserted] = table_.try_emplace(spec.name);
  Pending& p = it->second;
  if (inserted) {
    p.by_rank.resize(options_.size);
    p.submitted.assign(options_.size, false);
    p.first_seen = now;
    p.order = next_order_++;
  }
  p.by_rank[rank] = spec;
  p.submitted[rank] = true;
}

// Ready entries, in the order they were first submitted anywhere.
std::vector<Coordinator::Table::iterator> Coordinator::ready_in_order() {
  std::vector<Table::iterator> ready_now;
  for (auto it = table_.begin(); it != table_.end(); ++it) {
    if (ready(it->second)) ready_now.push_back(it);
  }
  std::sort(ready_now.begin(), ready_now.end(), [](auto a, auto b) { return a->second.order < b->second.order; });
  return ready_now;
}

void Coordinator::respond(const std::vector<Table::iterator>& ready, std::vector<Response>* out) {
  std::map<int32_t, std::vector<Table::iterator>> groups;
  std::vector<Table::iterator> finished;
  for (auto it : ready) {
    const RequestSpec& spec = it->second.by_rank[submitters(it->second).front()];
    if (spec.group < 0) {
      append_fused(*out, to_response(it->first, it->second));
      finished.push_back(it);
      continue;
    }
    // A group goes out whole, once every member is ready everywhere.
    auto& members = groups[spec.group];
    members.push_back(it);
    if (int(members.size()) < spec.group_size) continue;
    for (Response& part : fused_group(members)) out->push_back(std::move(part));
    finished.insert(finished.end(), members.begin(), members.end());
    groups.erase(spec.group);
  }
  for (auto it : finished) table_.erase(it);
}

// Members go out together; members that cannot share a buffer (another dtype, op or scaling) go out as
// neighbouring responses.
std::vector<Response> Coordinator::fused_group(const std::vector<Table::iterator>& members) {
  std::vector<Response> parts;
  for (auto member : members) {
    Response part = to_response(member->first, member->second);
    if (part.type == ResponseType::kCollective && !parts.empty() && fusible(parts.back(), part)) {
      for (auto& e : part.entries) parts.back().entries.push_back(std::move(e));
    } else {
      parts.push_back(std::move(part));
    }
  }
  return parts;
}

Response Coordinator::to_response(const std::string& name, Pending& p) {
  std::vector<int> ranks = submitters(p);
  const RequestSpec& first = p.by_rank[ranks.front()];
  bool someone_joined = std::find(joined_.begin(), joined_.end(), true) != joined_.end();
  if (someone_joined && first.kind != CollectiveKind::kAllreduce) return refused_while_joined(name, first);
  std::vector<const CallInfo*> calls;
  for (int r : ranks) calls.push_back(&p.by_rank[r]);
  try {
    check_agreement(calls, ranks, 0);
  } catch (const Error& e) {
    return error_response(first.kind, ErrorKind::kMismatch, e.what(), first);
  }
  std::vector<const CallInfo*> by_rank;
  for (const RequestSpec& s : p.by_rank) by_rank.push_back(&s);
  Agreed agreed = agreed_from(first.kind, by_rank.data(), by_rank.size());
  ResponseEntry entry;
  entry.spec = first;
  entry.first_dims = std::move(agreed.first_dims);
  entry.split_matrix = std::move(agreed.split_matrix);
  assign_cache_id(&entry);
  Response resp;
  resp.kind = first.kind;
  resp.entries.push_back(std::move(entry));
  return resp;
}

std::string joined_refusal(CollectiveKind kind, const std::string& name, const std::vector<int>& joined) {
  return std::string(collective_name(kind)) + " '" + name + "' cannot run while rank(s) " + rank_list(joined) +
         " have joined; only allreduce continues until every rank has joined";
}

Response Coordinator::refused_while_joined(const std::string& name, const RequestSpec& first) const {
  std::vector<int> joined;
  for (int r = 0; r < options_.size; ++r) {
    if (joined_[r]) joined.push_back(r);
  }
  return error_response(first.kind, ErrorKind::kInvalidArgument, joined_refusal(first.kind, name, joined), first);
}

void Coordinator::assign_cache_id(ResponseEntry* entry) {
  std::string signature = signature_of(entry->spec);
  auto cached = cache_ids_.find(signature);
  if (cached != cache_ids_.end()) {
    entry->cache_id = cached->second;
  } else if (cache_by_id_.size() < options_.cache_capacity) {
    entry->cache_id = int32_t(cache_by_id_.size());
    cache_ids_.emplace(signature, entry->cache_id);
    cache_by_id_.push_back(entry->spec);
  }
}

void Coordinator::append_fused(std::vector<Response>& out, Response resp) {
  if (options_.fusion_threshold_bytes > 0 && !out.empty() && resp.entries.size() == 1 && fuses_small(resp) &&
      fuses_small(out.back()) && fusible(out.back(), resp)) {
    size_t total = 0;
    for (const auto& e : out.back().entries) total += call_bytes(e.spec);
    for (const auto& e : resp.entries) total += call_bytes(e.spec);
    bool grouped = resp.entries.front().spec.group >= 0 || out.back().entries.front().spec.group >= 0;
    if (!grouped && total <= options_.fusion_threshold_bytes) {
      for (auto& e : resp.entries) out.back().entries.push_back(std::move(e));
      return;
    }
  }
  out.push_back(std::move(resp));
}

// The stall inspector: names the ranks that have not submitted what others are waiting on.
void Coordinator::inspect_stalls(Clock::time_point now, std::vector<Response>* out,
                                 std::vector<std::string>* warnings) {
  for (auto it = table_.begin(); it != table_.end();) {
    Pending& p = it->second;
    double waited = std::chrono::duration<double>(now - p.first_seen).count();
    std::vector<int> absent = missing(p);
    std::vector<int> have = submitters(p);
    const RequestSpec& spec = p.by_rank[have.empty() ? 0 : have.front()];
    std::string what = std::string(collective_name(spec.kind)) + " '" + it->first + "'";
    if (options_.stall_shutdown_s > 0 && waited >= options_.stall_shutdown_s && !absent.empty()) {
      out->push_back(error_response(spec.kind, ErrorKind::kTimeout,
                                    what + " stalled: rank(s) " + rank_list(have) + " submitted it but rank(s) " +
                                        rank_list(absent) + " did not within " +
                                        std::to_string(int(options_.stall_shutdown_s)) + " s",
                                    spec));
      out->back().error_rank = absent.front();  // the first rank everyone waits on
      it = table_.erase(it);
      continue;
    }
    if (options_.stall_check_s > 0 && waited >= options_.stall_check_s && !p.warned && !absent.empty()) {
      p.warned = true;
      warnings->push_back("stall: " + what + " was submitted by rank(s) " + rank_list(have) + " but not by rank(s) " +
                          rank_list(absent) + " for " + std::to_string(int(waited)) + " s");
    }
    ++it;
  }
}

void Coordinator::finish_join(std::vector<Response>* out) {
  if (!std::all_of(joined_.begin(), joined_.end(), [](bool j) { return j; })) return;
  Response done;
  done.type = ResponseType::kJoinDone;
  done.kind = CollectiveKind::kJoin;
  done.last_joined = last_joined_;
  out->push_back(std::move(done));
  joined_.assign(options_.size, false);
  last_joined_ = -1;
}

bool Coordinator::ready(const Pending& p) const {
  bool any = false;
  for (int r = 0; r < options_.size; ++r) {
    if (p.submitted[r]) {
      any = true;
    } else if (!joined_[r]) {
      return false;
    }
  }
  return any;
}

std::vector<int> Coordinator::submitters(const Pending& p) const {
  std::vector<int> ranks;
  for (int r = 0; r < options_.size; ++r) {
    if (p.submitted[r]) ranks.push_back(r);
  }
  return ranks;
}

std::vector<int> Coordinator::missing(const Pending& p) const {
  std::vector<int> ranks;
  for (int r = 0; r < options_.size; ++r) {
    if (!p.submitted[r] && !joined_[r]) ranks.push_back(r);
  }
  return ranks;
}

}  // namespace shvd

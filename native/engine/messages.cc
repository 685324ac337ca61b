#include "engine/messages.h"

#include "engine/wire.h"

namespace shvd {
namespace {

constexpr uint64_t kRankMagic = 0x4b4e4152444e4853ull;      // "SHNDRANK"
constexpr uint64_t kResponseMagic = 0x5053455244444e53ull;  // "SNDDRESP"

void put_spec(ByteWriter& w, const RequestSpec& s) {
  w.put<uint8_t>(uint8_t(s.kind));
  w.put_string(s.name);
  w.put<int32_t>(int32_t(s.dtype));
  w.put_ints(s.shape);
  w.put<int32_t>(int32_t(s.op));
  w.put<int32_t>(s.root);
  w.put<double>(s.prescale);
  w.put<double>(s.postscale);
  w.put_ints(s.splits);
  w.put<int32_t>(s.group);
  w.put<int32_t>(s.group_size);
}

RequestSpec get_spec(ByteReader& r) {
  RequestSpec s;
  uint8_t kind = r.get<uint8_t>();
  if (!is_collective_kind(kind)) fail(ErrorKind::kPeerFailure, "bad request kind");
  s.kind = CollectiveKind(kind);
  s.name = r.get_string();
  int32_t dtype = r.get<int32_t>();
  if (!is_dtype(dtype)) fail(ErrorKind::kPeerFailure, "bad dtype in request");
  s.dtype = DType(dtype);
  s.shape = r.get_ints();
  int32_t op = r.get<int32_t>();
  if (!is_reduce_op(op)) fail(ErrorKind::kPeerFailure, "bad op in request");
  s.op = ReduceOp(op);
  s.root = r.get<int32_t>();
  s.prescale = r.get<double>();
  s.postscale = r.get<double>();
  s.splits = r.get_ints();
  s.group = r.get<int32_t>();
  s.group_size = r.get<int32_t>();
  return s;
}

void put_frame_header(ByteWriter& w, uint64_t magic) {
  w.put<uint64_t>(magic);
  w.put<uint64_t>(0);  // total length, patched by finish()
}

std::vector<uint8_t> finish(ByteWriter& w) {
  uint64_t total = w.bytes().size();
  std::memcpy(w.bytes().data() + 8, &total, 8);
  return std::move(w.bytes());
}

ByteReader open_frame(const uint8_t* data, size_t len, uint64_t magic) {
  ByteReader r(data, len);
  if (r.get<uint64_t>() != magic || r.get<uint64_t>() != len) {
    fail(ErrorKind::kPeerFailure, "corrupt negotiation message");
  }
  return r;
}

}  // namespace

std::string signature_of(const RequestSpec& spec) {
  ByteWriter w;
  put_spec(w, spec);
  return std::string(w.bytes().begin(), w.bytes().end());
}

std::vector<uint8_t> encode(const RankMessage& m) {
  ByteWriter w;
  put_frame_header(w, kRankMagic);
  w.put<uint8_t>(m.shutdown ? 1 : 0);
  w.put<uint32_t>(uint32_t(m.requests.size()));
  for (const auto& s : m.requests) put_spec(w, s);
  w.put<uint32_t>(uint32_t(m.cached.size()));
  for (uint32_t id : m.cached) w.put<uint32_t>(id);
  return finish(w);
}

RankMessage decode_rank_message(const uint8_t* data, size_t len) {
  ByteReader r = open_frame(data, len, kRankMagic);
  RankMessage m;
  m.shutdown = r.get<uint8_t>() != 0;
  uint32_t n = r.get<uint32_t>();
  for (uint32_t i = 0; i < n; ++i) m.requests.push_back(get_spec(r));
  uint32_t c = r.get<uint32_t>();
  for (uint32_t i = 0; i < c; ++i) m.cached.push_back(r.get<uint32_t>());
  return m;
}

std::vector<uint8_t> encode(const ResponseList& list) {
  ByteWriter w;
  put_frame_header(w, kResponseMagic);
  w.put<uint8_t>(list.shutdown ? 1 : 0);
  w.put<int32_t>(list.shutdown_rank);
  w.put<uint8_t>(list.every_rank_waiting ? 1 : 0);
  w.put<uint32_t>(uint32_t(list.responses.size()));
  for (const Response& resp : list.responses) {
    w.put<uint8_t>(uint8_t(resp.type));
    w.put<uint8_t>(uint8_t(resp.kind));
    w.put<int32_t>(int32_t(resp.error_kind));
    w.put<int32_t>(resp.error_rank);
    w.put_string(resp.error);
    w.put<int32_t>(resp.last_joined);
    w.put<uint32_t>(uint32_t(resp.entries.size()));
    for (const ResponseEntry& e : resp.entries) {
      put_spec(w, e.spec);
      w.put<int32_t>(e.cache_id);
      w.put_ints(e.first_dims);
      w.put_ints(e.split_matrix);
    }
  }
  return finish(w);
}

ResponseList decode_response_list(const uint8_t* data, size_t len) {
  ByteReader r = open_frame(data, len, kResponseMagic);
  ResponseList list;
  list.shutdown = r.get<uint8_t>() != 0;
  list.shutdown_rank = r.get<int32_t>();
  list.every_rank_waiting = r.get<uint8_t>() != 0;
  uint32_t n = r.get<uint32_t>();
  for (uint32_t i = 0; i < n; ++i) {
    Response resp;
    resp.type = ResponseType(r.get<uint8_t>());
    resp.kind = CollectiveKind(r.get<uint8_t>());
    resp.error_kind = ErrorKind(r.get<int32_t>());
    resp.error_rank = r.get<int32_t>();
    resp.error = r.get_string();
    resp.last_joined = r.get<int32_t>();
    uint32_t entries = r.get<uint32_t>();
    for (uint32_t j = 0; j < entries; ++j) {
      ResponseEntry e;
      e.spec = get_spec(r);
      e.cache_id = r.get<int32_t>();
      e.first_dims = r.get_ints();
      e.split_matrix = r.get_ints();
      resp.entries.push_back(std::move(e));
    }
    list.responses.push_back(std::move(resp));
  }
  return list;
}

}  // namespace shvd

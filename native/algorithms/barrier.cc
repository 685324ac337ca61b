// Barrier: returns once every rank has entered it. Nobody's descriptor (or negotiation message) can
// arrive before its sender entered the barrier, so agreeing on the call is the whole barrier.
#include "algorithms/collective_op.h"

namespace shvd {

namespace {

OwnedResult run_nothing(OpContext&, const CallInfo&, void*, const Agreed&) { return {}; }

}  // namespace

const CollectiveOp kBarrierOp{agree_on(0), kCacheable, kInPlace, nullptr, offer_nothing, run_nothing};

}  // namespace shvd

// collective._native: the module, registered area by area.
#include "bindings/bindings.h"

NB_MODULE(_native, m) {
  m.doc() = "spark-hvd native core: transports, collectives, the engine and the reduction kernels.";
  // Bumped whenever a binding's signature changes, so a stale build fails at import with a clear message.
  m.attr("ABI_VERSION") = 9;
  // The contracts first: every later signature names their types.
  shvd::register_contracts(m);
  shvd::register_errors(m);
  shvd::register_communicator(m);
  shvd::register_engine(m);
  shvd::register_kernels(m);
  shvd::register_nccl(m);
}

#include "nccl/loader.h"

#include <dlfcn.h>

#include "common/error.h"

namespace shvd {

DynamicLibrary::DynamicLibrary(const std::vector<std::string>& candidates, const std::string& what,
                               const std::string& install_hint)
    : what_(what) {
  std::string tried;
  for (const std::string& candidate : candidates) {
    if (candidate.empty()) continue;
    // RTLD_LOCAL keeps NCCL's symbols out of the global namespace (torch may bring its own copy).
    handle_ = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ != nullptr) {
      path_ = candidate;
      return;
    }
    const char* why = dlerror();
    tried += "\n  " + candidate + ": " + (why ? why : "not found");
  }
  fail(ErrorKind::kInvalidArgument, what + " could not be loaded; tried:" + (tried.empty() ? " nothing" : tried) +
                                        "\n" + install_hint);
}

DynamicLibrary::~DynamicLibrary() {
  if (handle_ != nullptr) dlclose(handle_);
}

void* DynamicLibrary::symbol(const char* name) const {
  dlerror();
  void* address = dlsym(handle_, name);
  if (address == nullptr) {
    fail(ErrorKind::kInvalidArgument, what_ + " at " + path_ + " has no symbol " + name + " (too old a version?)");
  }
  return address;
}

}  // namespace shvd

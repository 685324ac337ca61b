// Opens a shared library with dlopen from a list of candidates, and looks up its symbols.
#pragma once
#include <string>
#include <vector>

namespace shvd {

class DynamicLibrary {
 public:
  // Tries each candidate (a path, or a bare soname for the system's search) in order; throws
  // kInvalidArgument listing every attempt and its dlerror when none opens. `what` names the library
  // and `install_hint` says how to get it, for that message.
  DynamicLibrary(const std::vector<std::string>& candidates, const std::string& what, const std::string& install_hint);
  ~DynamicLibrary();
  DynamicLibrary(const DynamicLibrary&) = delete;
  DynamicLibrary& operator=(const DynamicLibrary&) = delete;

  // The symbol's address; throws naming the symbol and library when it is missing.
  void* symbol(const char* name) const;
  const std::string& path() const { return path_; }

 private:
  void* handle_ = nullptr;
  std::string path_;
  std::string what_;
};

}  // namespace shvd

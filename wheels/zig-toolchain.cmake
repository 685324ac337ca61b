# Toolchain for the manylinux wheels (`make wheel`): zig's clang and its bundled libc++, linked against the
# symbol versions of glibc SHVD_GLIBC, so the extension loads on every distribution with that glibc or newer,
# built on this machine without a manylinux container. 2.26 (manylinux_2_26: Amazon Linux 2 and EMR, RHEL 8,
# Ubuntu 18.04 and later) is as old as the sources allow: getrandom needs glibc 2.25.
# libc++ is linked statically (zig's default), so the wheel needs no libstdc++ of any particular age.
set(SHVD_GLIBC "2.26" CACHE STRING "oldest glibc the wheel supports")
set(_zig "${CMAKE_CURRENT_LIST_DIR}/zig")
set(CMAKE_C_COMPILER "${_zig}/zig-cc")
set(CMAKE_CXX_COMPILER "${_zig}/zig-c++")
set(CMAKE_AR "${_zig}/zig-ar" CACHE FILEPATH "" FORCE)
set(CMAKE_RANLIB "${_zig}/zig-ranlib" CACHE FILEPATH "" FORCE)
set(CMAKE_C_COMPILER_TARGET "x86_64-linux-gnu.${SHVD_GLIBC}")
set(CMAKE_CXX_COMPILER_TARGET "x86_64-linux-gnu.${SHVD_GLIBC}")

# The reduce kernels' run-time dispatch (__builtin_cpu_supports) needs __cpu_model, which zig's compiler-rt
# lacks; libgcc.a has it (hidden, self-contained: cpuid only, no glibc symbol). Linked statically, so the
# wheel does not need gcc where it runs.
execute_process(COMMAND gcc -print-libgcc-file-name OUTPUT_VARIABLE _libgcc OUTPUT_STRIP_TRAILING_WHITESPACE
                RESULT_VARIABLE _libgcc_found)
if(NOT _libgcc_found EQUAL 0 OR NOT EXISTS "${_libgcc}")
  message(FATAL_ERROR "the wheel build needs gcc's libgcc.a for __cpu_model (apt-get install gcc)")
endif()
set(CMAKE_CXX_STANDARD_LIBRARIES_INIT "${_libgcc}")

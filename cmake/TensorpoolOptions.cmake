# SPDX-License-Identifier: Apache-2.0
# Warnings are errors on our code; sanitizers apply to every target we build (library, tests, tools).
#
# Beyond -Wall -Wextra: -Wconversion (a conversion that may change a value, -Wfloat-conversion included: a
# narrowing the code means is a static_cast); casts written as C++ casts, nullptr for null, no cast dropping
# const; duplicated conditions and branches, suspicious logical operators, stray semicolons; [[fallthrough]]
# as the only way to fall through a case; every external function declared in a header first (or internal);
# override stated; format strings checked.
# Left out on purpose: -Wsign-conversion flags every signed std::int64_t index into a std::vector or
# std::array (the tree counts elements in std::int64_t, as shapes do); -Wuseless-cast flags the
# std::size_t <-> std::uint64_t casts that are needed where the two types differ; -Wdouble-promotion and
# -Warith-conversion flag conversions that are exact.

# -Werror is for our own builds (make, CI); a package build (pip install ., pyproject.toml) turns it off, so a
# compiler newer than ours that warns about something new still builds the package.
option(TP_WARNINGS_AS_ERRORS "Treat warnings on tensorpool's own code as errors" ON)

function(tp_apply_warnings target)
  # GCC's names; clang knows these checks under other flags or not at all.
  set(gcc_only "")
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    set(gcc_only -Wduplicated-cond -Wduplicated-branches -Wlogical-op -Wimplicit-fallthrough=5)
  endif()
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
                                           -Wcast-align -Wunused -Woverloaded-virtual -Wnull-dereference
                                           -Wconversion -Wold-style-cast -Wzero-as-null-pointer-constant
                                           -Wcast-qual -Wextra-semi -Wmissing-declarations -Wredundant-decls
                                           -Wsuggest-override -Wformat=2 ${gcc_only})
  if(TP_WARNINGS_AS_ERRORS)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

# The linker. Every test executable links the whole static library, so a build links about a hundred large
# executables: lld does each several times faster than GNU ld. "auto" takes lld when the compiler can link
# with it (scripts/install-deps installs it) and the toolchain's default linker otherwise; "default" keeps
# the default; any other value is a -fuse-ld= name and must work. Applies to the targets of this project only
# (the exported targets carry no linker choice).
set(TP_LINKER "auto" CACHE STRING "Linker for tensorpool's executables: auto (lld when usable), default, or a -fuse-ld= name")
if(NOT TP_LINKER STREQUAL "default")
  include(CheckLinkerFlag)
  set(tp_linker_name "${TP_LINKER}")
  if(TP_LINKER STREQUAL "auto")
    set(tp_linker_name lld)
  endif()
  check_linker_flag(CXX "-fuse-ld=${tp_linker_name}" TP_LINKER_${tp_linker_name}_WORKS)
  if(TP_LINKER_${tp_linker_name}_WORKS)
    add_link_options("-fuse-ld=${tp_linker_name}")
  elseif(NOT TP_LINKER STREQUAL "auto")
    message(FATAL_ERROR "TP_LINKER='${TP_LINKER}': the compiler cannot link with -fuse-ld=${TP_LINKER};"
                        " install it or configure with -DTP_LINKER=default")
  else()
    message(STATUS "tensorpool: lld not found; linking with the default linker (apt-get install lld links faster)")
  endif()
endif()

set(TP_SANITIZER_FLAGS "")
if(TP_SANITIZE)
  string(REPLACE "," ";" tp_sanitizers "${TP_SANITIZE}")
  foreach(sanitizer IN LISTS tp_sanitizers)
    if(NOT sanitizer MATCHES "^(address|thread|undefined)$")
      message(FATAL_ERROR "TP_SANITIZE='${TP_SANITIZE}': '${sanitizer}' is not one of address, thread, undefined")
    endif()
  endforeach()
  if("thread" IN_LIST tp_sanitizers AND "address" IN_LIST tp_sanitizers)
    message(FATAL_ERROR "TP_SANITIZE='${TP_SANITIZE}': thread and address sanitizers cannot be combined")
  endif()
  set(TP_SANITIZER_FLAGS -fsanitize=${TP_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
endif()

function(tp_apply_sanitizers target)
  if(TP_SANITIZER_FLAGS)
    target_compile_options(${target} PRIVATE ${TP_SANITIZER_FLAGS})
    target_link_options(${target} PUBLIC ${TP_SANITIZER_FLAGS})
  endif()
endfunction()

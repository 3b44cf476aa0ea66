# SPDX-License-Identifier: Apache-2.0
# The Python package: the nanobind extension tensorpool._tensorpool (src/python/) over the library, and the
# pure-Python package (python/tensorpool/). In a build tree both are assembled under
# ${PROJECT_BINARY_DIR}/python/tensorpool, so PYTHONPATH=build/python imports the package the tests test;
# `pip install .` (scikit-build-core, pyproject.toml) runs this same CMake and installs them into the wheel.
#
# TP_WITH_PYTHON: auto builds the package when a Python with development headers and nanobind is found (the
# Makefile points Python_EXECUTABLE at the venv scripts/python-env makes), ON requires it, OFF skips it.
set(TP_WITH_PYTHON "auto" CACHE STRING "Build the Python package: auto (when Python and nanobind are found), ON, OFF")
set_property(CACHE TP_WITH_PYTHON PROPERTY STRINGS auto ON OFF)
if(NOT TP_WITH_PYTHON MATCHES "^(auto|ON|OFF)$")
  message(FATAL_ERROR "TP_WITH_PYTHON='${TP_WITH_PYTHON}' is not auto, ON or OFF")
endif()
if(SKBUILD)
  set(TP_WITH_PYTHON ON)
endif()

set(TP_PYTHON_BUILT OFF)
if(NOT TP_WITH_PYTHON STREQUAL "OFF")
  if(TP_WITH_PYTHON STREQUAL "ON")
    find_package(Python 3.9 REQUIRED COMPONENTS Interpreter Development.Module)
  else()
    find_package(Python 3.9 COMPONENTS Interpreter Development.Module)
  endif()
  if(Python_FOUND)
    execute_process(COMMAND ${Python_EXECUTABLE} -m nanobind --cmake_dir OUTPUT_VARIABLE tp_nanobind_dir
                    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE tp_nanobind_result)
    if(tp_nanobind_result EQUAL 0)
      find_package(nanobind CONFIG PATHS ${tp_nanobind_dir} NO_DEFAULT_PATH)
    endif()
  endif()
  if(Python_FOUND AND nanobind_FOUND)
    set(TP_PYTHON_BUILT ON)
  elseif(TP_WITH_PYTHON STREQUAL "ON")
    message(FATAL_ERROR "TP_WITH_PYTHON=ON: nanobind is not installed for ${Python_EXECUTABLE}"
                        " (scripts/python-env makes a venv with it)")
  else()
    message(STATUS "tensorpool: no Python package (needs Python development headers and nanobind;"
                   " `make configure` makes a venv with them through scripts/python-env)")
  endif()
endif()

if(TP_PYTHON_BUILT)
  # The extension module links the static library into a shared object.
  set_target_properties(tensorpool PROPERTIES POSITION_INDEPENDENT_CODE ON)
  file(GLOB TP_PYTHON_BINDING_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/python/*.cpp)
  nanobind_add_module(_tensorpool NB_STATIC ${TP_PYTHON_BINDING_SOURCES})
  target_link_libraries(_tensorpool PRIVATE tensorpool fmt::fmt nlohmann_json::nlohmann_json)
  target_include_directories(_tensorpool PRIVATE ${PROJECT_SOURCE_DIR}/src)
  # nanobind's and Python's headers are third-party: our warnings (errors) are for our code only.
  target_include_directories(_tensorpool SYSTEM PRIVATE ${tp_nanobind_dir}/../include ${Python_INCLUDE_DIRS})
  tp_apply_warnings(_tensorpool)
  set(tp_python_package_dir ${PROJECT_BINARY_DIR}/python/tensorpool)
  set_target_properties(_tensorpool PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${tp_python_package_dir})
  # The pure-Python files, copied next to the extension at every build (a copy, not a link, so the build tree
  # is what an installed package looks like).
  file(GLOB_RECURSE TP_PYTHON_FILES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/python/tensorpool/*.py)
  set(tp_python_copies "")
  foreach(file IN LISTS TP_PYTHON_FILES)
    file(RELATIVE_PATH relative ${PROJECT_SOURCE_DIR}/python/tensorpool ${file})
    add_custom_command(OUTPUT ${tp_python_package_dir}/${relative}
                       COMMAND ${CMAKE_COMMAND} -E copy_if_different ${file} ${tp_python_package_dir}/${relative}
                       DEPENDS ${file} VERBATIM)
    list(APPEND tp_python_copies ${tp_python_package_dir}/${relative})
  endforeach()
  add_custom_target(tensorpool_python ALL DEPENDS _tensorpool ${tp_python_copies})
  if(SKBUILD)
    install(TARGETS _tensorpool LIBRARY DESTINATION tensorpool)
  endif()
endif()

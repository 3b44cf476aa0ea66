# SPDX-License-Identifier: Apache-2.0
# The CUDA backend (src/backend/cuda/): cuda:N devices. TP_WITH_CUDA=auto builds it when nvcc and the CUDA
# toolkit (cudart, cuBLASLt) are found, ON requires them, OFF leaves them out; without it the build links
# src/backend/no_cuda/ (no cuda devices, and a reason that says how to get them).
#
# The library links the static CUDA runtime and no libcuda: the runtime loads the driver when the first CUDA
# call is made, and the driver API functions (virtual memory management) are looked up through it
# (cuda_driver.hpp). So the library, its tests and the CLI load and run on a machine without the NVIDIA
# driver, where every cuda test reports SKIPPED ("no CUDA device"). cuBLASLt, a shared library of the
# toolkit, is loaded only when a product on a GPU first needs it.
#
# The kernels (src/backend/cuda/kernels/*.cu) are compiled by nvcc for TP_CUDA_ARCHITECTURES (CMake's
# CUDA_ARCHITECTURES syntax: "90" is sm_90 machine code plus compute_90 PTX that newer GPUs compile at load).
# They see only plain C++ (pointers, sizes, cudaStream_t), never tensorpool's headers.
set(TP_WITH_CUDA "auto" CACHE STRING "Build the CUDA backend: auto (when nvcc and the toolkit are found), ON, OFF")
set_property(CACHE TP_WITH_CUDA PROPERTY STRINGS auto ON OFF)
if(NOT TP_WITH_CUDA MATCHES "^(auto|ON|OFF)$")
  message(FATAL_ERROR "TP_WITH_CUDA='${TP_WITH_CUDA}' is not auto, ON or OFF")
endif()
set(TP_CUDA_ARCHITECTURES "90" CACHE STRING "GPU architectures of the CUDA kernels (CMake CUDA_ARCHITECTURES syntax)")

set(tp_cuda_found OFF)
if(NOT TP_WITH_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    find_package(CUDAToolkit QUIET)
    if(CUDAToolkit_FOUND AND TARGET CUDA::cudart_static AND TARGET CUDA::cublasLt)
      set(tp_cuda_found ON)
    endif()
  endif()
  if(NOT tp_cuda_found)
    set(tp_cuda_reason "the CUDA toolkit (nvcc, cudart, cuBLASLt) was not found; install it under /usr/local/cuda")
    if(TP_WITH_CUDA STREQUAL "ON")
      message(FATAL_ERROR "TP_WITH_CUDA=ON: ${tp_cuda_reason}")
    endif()
    message(STATUS "tensorpool: ${tp_cuda_reason}; no cuda devices")
  endif()
else()
  message(STATUS "tensorpool: TP_WITH_CUDA is OFF; no cuda devices")
endif()
set(TP_WITH_CUDA_BACKEND ${tp_cuda_found})

if(TP_WITH_CUDA_BACKEND)
  set(CMAKE_CUDA_ARCHITECTURES ${TP_CUDA_ARCHITECTURES})
  enable_language(CUDA)
  # CMake 3.25 does not know nvcc's C++20 flag: the library's cxx_std_20 feature then fails the generate step
  # ("requires the language dialect CUDA20") once the library holds CUDA objects. nvcc >= 12 takes -std=c++20.
  if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION OR CMAKE_CUDA20_STANDARD_COMPILE_OPTION STREQUAL "")
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  message(STATUS "tensorpool: CUDA backend with CUDA ${CUDAToolkit_VERSION}, architectures ${TP_CUDA_ARCHITECTURES}")
  file(GLOB TP_CUDA_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/backend/cuda/*.cpp)
  file(GLOB TP_CUDA_KERNEL_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/backend/cuda/kernels/*.cu)
else()
  file(GLOB TP_CUDA_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/backend/no_cuda/*.cpp)
  set(TP_CUDA_KERNEL_SOURCES "")
endif()

# After add_library(tensorpool): the kernels as an object library of their own (nvcc's flags, not the C++
# warning set, which nvcc does not take), folded into the library.
function(tp_link_cuda_backend target)
  if(NOT TP_WITH_CUDA_BACKEND)
    return()
  endif()
  if(TP_CUDA_KERNEL_SOURCES)
    add_library(tp_cuda_kernels OBJECT ${TP_CUDA_KERNEL_SOURCES})
    set_target_properties(tp_cuda_kernels PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON
                                                     POSITION_INDEPENDENT_CODE ON)
    target_include_directories(tp_cuda_kernels PRIVATE ${PROJECT_SOURCE_DIR}/src)
    set(tp_cuda_warnings -Xcompiler=-Wall,-Wextra)
    if(TP_WARNINGS_AS_ERRORS)
      list(APPEND tp_cuda_warnings --Werror=all-warnings -Xcompiler=-Werror)
    endif()
    target_compile_options(tp_cuda_kernels PRIVATE ${tp_cuda_warnings} --expt-relaxed-constexpr)
    target_sources(${target} PRIVATE $<TARGET_OBJECTS:tp_cuda_kernels>)
  endif()
  # cuBLASLt (the products and its status names) and NCCL (the collectives) are loaded with dlopen when first
  # needed (cublaslt_library.hpp, nccl_library.hpp): no libcublasLt or libnccl link, so a process that uses no
  # GPU never maps them. cuBLASLt's headers come with the toolkit's include folder; the folder its library was
  # found in is the last place the loader tries.
  target_link_libraries(${target} PRIVATE CUDA::cudart_static ${CMAKE_DL_LIBS})
  get_target_property(tp_cublaslt_location CUDA::cublasLt IMPORTED_LOCATION)
  get_filename_component(tp_cublaslt_dir "${tp_cublaslt_location}" DIRECTORY)
  set_property(SOURCE ${PROJECT_SOURCE_DIR}/src/backend/cuda/cublaslt_library.cpp APPEND PROPERTY
               COMPILE_DEFINITIONS TP_CUDA_TOOLKIT_LIBRARY_DIR="${tp_cublaslt_dir}")
endfunction()

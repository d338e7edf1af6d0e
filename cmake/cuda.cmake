# Optional CUDA backend (kernels/cuda). AUTO builds it when nvcc, cuBLAS and
# cuDNN are all found; ON makes their absence an error; OFF skips it.
#
# sd_cuda implements the sd_backend_i vtable declared in
# kernels/backend_impl.h and calls back into the dispatch in sd_kernels
# (sd_backend_fail, sd_bt_numel), while the registry there
# (kernels/backends.c) names sd_cuda_backend_init: the two static libraries
# depend on each other. Both directions are declared, so CMake repeats the pair on
# every link line that needs it (its rule for static library cycles).
set(SDFLOW_CUDA_ENABLED OFF)
if(NOT SDFLOW_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  set(_cuda_ok FALSE)
  if(CMAKE_CUDA_COMPILER)
    find_package(CUDAToolkit QUIET)
    find_library(CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/lib/x86_64-linux-gnu)
    find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/include)
    file(GLOB _cuda_src CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/kernels/cuda/*.cu
                                         ${CMAKE_SOURCE_DIR}/kernels/cuda/*.c)
    if(CUDAToolkit_FOUND AND TARGET CUDA::cublas AND CUDNN_LIBRARY AND CUDNN_INCLUDE_DIR AND _cuda_src)
      set(_cuda_ok TRUE)
    endif()
  endif()
  if(_cuda_ok)
    # Ampere and Hopper machine code, plus compute_90 PTX that the driver can
    # JIT for newer GPUs. Set before enable_language so CMake does not probe
    # for a GPU (there is none on most project machines).
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES "80-real;90-real;90-virtual")
    endif()
    # One CUDA runtime, the shared one that CUDA::cudart names too (CMake
    # would otherwise add the static one to every link that involves CUDA).
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    enable_language(CUDA)
    set(SDFLOW_CUDA_ENABLED ON)
    # Libraries made before CUDA was enabled have no architectures; the ones
    # linking sd_cuda must have some (policy CMP0104), harmless for the rest.
    get_directory_property(_old_targets DIRECTORY ${CMAKE_SOURCE_DIR} BUILDSYSTEM_TARGETS)
    foreach(_t ${_old_targets})
      set_target_properties(${_t} PROPERTIES CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}")
    endforeach()
    add_library(sd_cuda STATIC ${_cuda_src})
    # The directory's compile options (warnings, sanitizers) are GCC flags
    # that nvcc rejects: keep them for the C files only.
    get_target_property(_opts sd_cuda COMPILE_OPTIONS)
    if(_opts)
      set(_c_opts "")
      foreach(_o ${_opts})
        list(APPEND _c_opts "$<$<COMPILE_LANGUAGE:C>:${_o}>")
      endforeach()
      set_target_properties(sd_cuda PROPERTIES COMPILE_OPTIONS "${_c_opts}")
    endif()
    target_include_directories(sd_cuda PUBLIC ${CMAKE_SOURCE_DIR} ${CUDNN_INCLUDE_DIR})
    target_link_libraries(sd_cuda PUBLIC sd_kernels sd_core CUDA::cudart CUDA::cublas
                          ${CUDNN_LIBRARY})
    set_target_properties(sd_cuda PROPERTIES
      CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON CUDA_RUNTIME_LIBRARY Shared
      CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}"
      POSITION_INDEPENDENT_CODE ON)
    # The project's C warning flags are GCC's; hand them to nvcc's host
    # compiler rather than to nvcc itself.
    target_compile_options(sd_cuda PRIVATE
      $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wno-unused-parameter>)
    target_compile_definitions(sd_kernels PUBLIC SDFLOW_HAVE_CUDA=1)
    target_link_libraries(sd_kernels PUBLIC sd_cuda)
    # Executables are C: link them with the C driver (cudart is a shared
    # library, and no .cu file needs device linking), so that their C flags
    # (sanitizers, clang's runtimes) stay on the link line.
    set_target_properties(sd_cuda PROPERTIES LINKER_LANGUAGE C)
    set(CMAKE_CUDA_LINKER_PREFERENCE_PROPAGATES 0)
    message(STATUS "sdflow: CUDA backend enabled (${CMAKE_CUDA_ARCHITECTURES})")
  elseif(SDFLOW_CUDA STREQUAL "ON")
    message(FATAL_ERROR "SDFLOW_CUDA=ON but nvcc, cuBLAS, cuDNN or kernels/cuda sources were not found")
  else()
    message(STATUS "sdflow: CUDA backend not built (nvcc/cuBLAS/cuDNN not all found)")
  endif()
endif()

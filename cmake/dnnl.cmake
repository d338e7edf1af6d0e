# Optional oneDNN (Debian libdnnl-dev) for the CPU backend's bf16 compute
# path (kernels/cpu/dnnl_*.c): AUTO uses it when found, ON makes its absence
# an error, OFF builds without it. Without it the CPU backend has no bf16
# path and says so (sd_backend_supports_precision, and an op error naming
# this option) instead of silently computing in f32.
#
# Debian's libdnnl2 is built with the OpenMP runtime (DNNL_CPU_RUNTIME OMP in
# dnnl_config.h): dnnl_ops.c sets the OpenMP thread count of the calling
# thread, so libgomp is linked explicitly.
#
# The library and header are found directly, not through Debian's
# dnnl-config.cmake: that file calls find_package(OpenCL REQUIRED), and the
# OpenCL development files are only a Recommends of libdnnl-dev, so on a
# machine without them an *optional* dependency would abort configure.
set(SDFLOW_DNNL_ENABLED OFF)
if(NOT SDFLOW_DNNL STREQUAL "OFF")
  find_path(DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.h)
  find_library(DNNL_LIBRARY NAMES dnnl)
  find_library(DNNL_GOMP_LIBRARY NAMES gomp libgomp.so.1)
  if(DNNL_INCLUDE_DIR AND DNNL_LIBRARY AND DNNL_GOMP_LIBRARY)
    set(SDFLOW_DNNL_ENABLED ON)
    target_compile_definitions(sd_kernels PUBLIC SDFLOW_HAVE_DNNL=1)
    target_include_directories(sd_kernels PRIVATE ${DNNL_INCLUDE_DIR})
    target_link_libraries(sd_kernels PUBLIC ${DNNL_LIBRARY} ${DNNL_GOMP_LIBRARY})
    message(STATUS "sdflow: oneDNN enabled (${DNNL_LIBRARY}; CPU bf16 compute path)")
  elseif(SDFLOW_DNNL STREQUAL "ON")
    message(FATAL_ERROR "SDFLOW_DNNL=ON but oneDNN was not found (apt-get install libdnnl-dev)")
  else()
    message(STATUS "sdflow: oneDNN not found: no CPU bf16 compute path (apt-get install libdnnl-dev)")
  endif()
endif()

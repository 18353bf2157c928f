# libbpf for the tracer: the system's when it is >= 1.3 (bpf_program__attach_uprobe_multi, PT_REGS_PARM6 and the
# BPF_UPROBE macros), else upstream 1.7.0 from the vendored archive, built static in the build folder so the
# binary carried to the GPU machines needs no libbpf there. Defines the target stackscope::libbpf (library and
# headers) and LIBBPF_INCLUDE_DIR (headers for the BPF programs' compile) and LIBBPF_BUILD_TARGET (to depend on).
set(STACKSCOPE_VENDOR_DIR "${CMAKE_SOURCE_DIR}/../shared/vendor" CACHE PATH
    "Folder holding libbpf-1.7.0.tar.gz (used when the system libbpf is older than 1.3)")
option(STACKSCOPE_VENDORED_LIBBPF "Build the vendored libbpf even when the system one is recent enough" OFF)

pkg_check_modules(SYSTEM_LIBBPF QUIET libbpf)
find_library(ELF_STATIC NAMES libelf.a REQUIRED)
add_library(stackscope_libbpf INTERFACE)
add_library(stackscope::libbpf ALIAS stackscope_libbpf)
if(SYSTEM_LIBBPF_FOUND AND SYSTEM_LIBBPF_VERSION VERSION_GREATER_EQUAL 1.3 AND NOT STACKSCOPE_VENDORED_LIBBPF)
  find_library(BPF_STATIC NAMES libbpf.a REQUIRED)
  set(LIBBPF_INCLUDE_DIR "")
  set(LIBBPF_BUILD_TARGET "")
  target_link_libraries(stackscope_libbpf INTERFACE ${BPF_STATIC} ${ELF_STATIC} ${Z_STATIC} ${ZSTD_STATIC})
  message(STATUS "libbpf: system ${SYSTEM_LIBBPF_VERSION}")
else()
  set(_archive "${STACKSCOPE_VENDOR_DIR}/libbpf-1.7.0.tar.gz")
  if(NOT EXISTS "${_archive}")
    message(FATAL_ERROR
      "libbpf: the system libbpf is ${SYSTEM_LIBBPF_VERSION} (older than 1.3: no uprobe_multi) and the vendored "
      "archive is missing: ${_archive}\n"
      "Put libbpf-1.7.0.tar.gz there (the shared/ folder beside the repository), or point "
      "-DSTACKSCOPE_VENDOR_DIR=<folder> at it, or build with -DSTACKSCOPE_BPF=OFF.")
  endif()
  set(_root ${CMAKE_BINARY_DIR}/libbpf-1.7.0)
  if(NOT EXISTS ${_root}/src/Makefile)
    file(ARCHIVE_EXTRACT INPUT "${_archive}" DESTINATION ${CMAKE_BINARY_DIR})
  endif()
  set(_install ${CMAKE_BINARY_DIR}/libbpf-install)
  set(BPF_STATIC ${_install}/usr/lib/libbpf.a)
  set(LIBBPF_INCLUDE_DIR ${_install}/usr/include)
  file(MAKE_DIRECTORY ${LIBBPF_INCLUDE_DIR})
  set(_cc ${CMAKE_C_COMPILER})
  if(CCACHE_PROGRAM)
    set(_cc "${CCACHE_PROGRAM} ${CMAKE_C_COMPILER}")
  endif()
  file(GLOB _libbpf_sources ${_root}/src/*.c ${_root}/src/*.h)
  add_custom_command(OUTPUT ${BPF_STATIC} ${LIBBPF_INCLUDE_DIR}/bpf/bpf_helpers.h
    COMMAND make -s -C ${_root}/src -j2 BUILD_STATIC_ONLY=1 "CC=${_cc}" OBJDIR=${CMAKE_BINARY_DIR}/libbpf-obj
            DESTDIR=${_install} PREFIX=/usr LIBDIR=/usr/lib install
    DEPENDS ${_libbpf_sources}
    COMMENT "Building vendored libbpf 1.7.0 (static)")
  add_custom_target(libbpf_vendored DEPENDS ${BPF_STATIC} ${LIBBPF_INCLUDE_DIR}/bpf/bpf_helpers.h)
  set(LIBBPF_BUILD_TARGET libbpf_vendored)
  add_dependencies(stackscope_libbpf libbpf_vendored)
  # Before /usr/include, so <bpf/libbpf.h> is 1.7's and not Debian's 1.1.
  target_include_directories(stackscope_libbpf BEFORE INTERFACE ${LIBBPF_INCLUDE_DIR})
  target_link_libraries(stackscope_libbpf INTERFACE ${BPF_STATIC} ${ELF_STATIC} ${Z_STATIC} ${ZSTD_STATIC})
  message(STATUS "libbpf: system ${SYSTEM_LIBBPF_VERSION} is older than 1.3: vendored 1.7.0 from ${_archive}")
endif()

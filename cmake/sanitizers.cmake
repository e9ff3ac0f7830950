# Sanitizer builds (IWEMU_SANITIZE, included from the top CMakeLists.txt).
#
#   address  ASan + UBSan; every UBSan finding is fatal
#   thread   TSan
#
# With address, the runtime is a shared library (clang: -shared-libasan; gcc's
# libasan is shared by default): the integration tests load the sanitized
# shim, provider and emulator into the distro's uninstrumented programs, which
# works only when the ASan runtime is the first object in the process.
# iwemu-run therefore preloads IWEMU_SANITIZER_RUNTIME ahead of the shim
# (IWEMU_PRELOAD_FIRST, baked in by kmod-shim/CMakeLists.txt), and our own
# test executables find the same runtime through their build RPATH.
set(IWEMU_SANITIZER_RUNTIME "" CACHE INTERNAL "sanitizer runtime iwemu-run preloads first")

if(IWEMU_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    add_link_options(-shared-libasan)
    set(runtime_name libclang_rt.asan-${CMAKE_SYSTEM_PROCESSOR}.so)
  else()
    set(runtime_name libasan.so)
  endif()
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=${runtime_name}
                  OUTPUT_VARIABLE runtime OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT IS_ABSOLUTE "${runtime}" OR NOT EXISTS "${runtime}")
    message(FATAL_ERROR "IWEMU_SANITIZE=address: ${CMAKE_CXX_COMPILER} has no ${runtime_name}")
  endif()
  get_filename_component(runtime "${runtime}" REALPATH)
  set(IWEMU_SANITIZER_RUNTIME "${runtime}" CACHE INTERNAL "")
  get_filename_component(runtime_dir "${runtime}" DIRECTORY)
  list(APPEND CMAKE_BUILD_RPATH "${runtime_dir}")
elseif(IWEMU_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
elseif(IWEMU_SANITIZE)
  message(FATAL_ERROR "IWEMU_SANITIZE=${IWEMU_SANITIZE}: use address or thread")
endif()

# Called at the end of a tests/ directory whose tests run programs under
# iwemu-run: in the address build, any ASan or UBSan report ends the process
# with a non-zero status (which the test scripts check), and so does a leak,
# except those tests/lsan.supp attributes to the distro's programs and
# libraries (see docs/testing.md).
function(iwemu_sanitizer_test_environment)
  if(NOT IWEMU_SANITIZER_RUNTIME)
    return()
  endif()
  get_property(tests DIRECTORY PROPERTY TESTS)
  if(tests)
    set_property(TEST ${tests} APPEND PROPERTY ENVIRONMENT
      # verify_asan_link_order=0: iwemu-run (itself sanitized) is started
      # with foreign LD_PRELOADs by check_launcher.sh; the programs it runs
      # always get the runtime first.  fast_unwind_on_malloc=0: full stacks
      # through the distro's frame-pointer-less code, for lsan.supp.
      "ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:exitcode=1:verify_asan_link_order=0:fast_unwind_on_malloc=0"
      "UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1"
      "LSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/lsan.supp:print_suppressions=0")
  endif()
endfunction()

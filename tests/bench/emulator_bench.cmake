# Emulator vs raw TCP benchmark (tests/bench/emulator_bench.cpp).  Plain
# program (no Google Benchmark: it needs two endpoints and their threads).
# Included from tests/bench/CMakeLists.txt:  include(emulator_bench.cmake)
if(TARGET iwemu_emulator)
  add_executable(emulator_bench ${CMAKE_CURRENT_LIST_DIR}/emulator_bench.cpp)
  target_link_libraries(emulator_bench PRIVATE iwemu_emulator)
  add_test(NAME emulator_bench_smoke COMMAND emulator_bench 0.2 --rounds=1)
  set_tests_properties(emulator_bench_smoke PROPERTIES LABELS bench TIMEOUT 120)
endif()

# Connected without rdma_cm (included from tests/integration/CMakeLists.txt):
# unmodified perftest (no -R) and ibv_rc_pingpong connect their QPs with
# ibv_modify_qp INIT/RTR/RTS; iwemu dials the peer QP (docs/oob-connect.md).
# Server and client in separate processes, each bounded by `timeout`.
set(OOB_HERE ${CMAKE_CURRENT_LIST_DIR})

function(iwemu_oob_test name)
  add_test(NAME integration.oob.${name} COMMAND timeout 120 ${ARGN})
  set_tests_properties(integration.oob.${name} PROPERTIES
    LABELS integration TIMEOUT 120 SKIP_RETURN_CODE 77)
endfunction()

foreach(bench ib_send_bw ib_write_bw ib_read_bw ib_send_lat ib_write_lat ib_read_lat)
  foreach(size 2 65536)
    iwemu_oob_test(perftest_${bench}_${size}
      ${OOB_HERE}/oob_perftest.sh $<TARGET_FILE:iwemu_run> ${bench} 127.0.0.1 -s ${size} -n 500)
  endforeach()
endforeach()
iwemu_oob_test(perftest_ib_write_bw_q8
  ${OOB_HERE}/oob_perftest.sh $<TARGET_FILE:iwemu_run> ib_write_bw 127.0.0.1 -q 8 -n 500)
iwemu_oob_test(perftest_ib_send_bw_nonloopback
  ${OOB_HERE}/oob_perftest.sh $<TARGET_FILE:iwemu_run> ib_send_bw nonloopback -n 500)
iwemu_oob_test(ibv_rc_pingpong ${OOB_HERE}/oob_pingpong.sh $<TARGET_FILE:iwemu_run> ibv_rc_pingpong 127.0.0.1)
# No privilege is needed (as nobody when run as root; skipped otherwise).
iwemu_oob_test(ibv_rc_pingpong.unprivileged
  ${OOB_HERE}/as_nobody.sh ${OOB_HERE}/oob_pingpong.sh $<TARGET_FILE:iwemu_run> ibv_rc_pingpong 127.0.0.1)
iwemu_oob_test(ibv_rc_pingpong_64k
  ${OOB_HERE}/oob_pingpong.sh $<TARGET_FILE:iwemu_run> ibv_rc_pingpong 127.0.0.1 -s 65536 -n 1000)
# -e: each side sleeps in ibv_get_cq_event for its completions.
iwemu_oob_test(ibv_rc_pingpong_events
  ${OOB_HERE}/oob_pingpong.sh $<TARGET_FILE:iwemu_run> ibv_rc_pingpong 127.0.0.1 -e)
# 16 QPs sharing one SRQ (its receive completions name the QP), and with -e.
iwemu_oob_test(ibv_srq_pingpong
  ${OOB_HERE}/oob_pingpong.sh $<TARGET_FILE:iwemu_run> ibv_srq_pingpong 127.0.0.1)
iwemu_oob_test(ibv_srq_pingpong_events
  ${OOB_HERE}/oob_pingpong.sh $<TARGET_FILE:iwemu_run> ibv_srq_pingpong 127.0.0.1 -e)

# Ordering, active/active, error paths and QPN space in one process (short
# timeouts so that every failure case is reported within a few seconds).
add_executable(oob_connect_test ${OOB_HERE}/oob_connect_test.cpp)
target_link_libraries(oob_connect_test PRIVATE ${IBVERBS_LIBRARY})
add_dependencies(oob_connect_test iwemu_run iwemu_shim iwemu_provider)
iwemu_oob_test(connect env IWEMU_OOB_TIMEOUT_MS=1000 IWEMU_MPA_TIMEOUT_MS=1000
  $<TARGET_FILE:iwemu_run> $<TARGET_FILE:oob_connect_test>)

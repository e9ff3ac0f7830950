# rdma_cm integration tests (included from tests/integration/CMakeLists.txt):
# the distro's librdmacm and rdmacm-utils over the emulated /dev/infiniband/rdma_cm,
# server and client in separate processes, each bounded by `timeout`.
find_library(RDMACM_LIBRARY rdmacm REQUIRED)

add_executable(rdmacm_api_test ${CMAKE_CURRENT_LIST_DIR}/rdmacm_api_test.cpp)
target_link_libraries(rdmacm_api_test PRIVATE ${RDMACM_LIBRARY} ${IBVERBS_LIBRARY} Threads::Threads)
add_dependencies(rdmacm_api_test iwemu_run iwemu_shim iwemu_provider)

set(RDMACM_HERE ${CMAKE_CURRENT_LIST_DIR})

add_executable(rdmacm_churn_memory ${CMAKE_CURRENT_LIST_DIR}/rdmacm_churn_memory.cpp)
target_link_libraries(rdmacm_churn_memory PRIVATE ${RDMACM_LIBRARY} ${IBVERBS_LIBRARY})
add_dependencies(rdmacm_churn_memory iwemu_run iwemu_shim iwemu_provider)

# The id state machine and table on their own (no emulator, no librdmacm).
add_executable(ucma_id_state_test ${RDMACM_HERE}/ucma_id_state_test.cpp
  ${PROJECT_SOURCE_DIR}/kmod-shim/ucma_ids.cpp)
target_include_directories(ucma_id_state_test PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(ucma_id_state_test PRIVATE GTest::gtest_main Threads::Threads)
add_test(NAME integration.rdmacm.id_state COMMAND timeout 60 $<TARGET_FILE:ucma_id_state_test>)
set_tests_properties(integration.rdmacm.id_state PROPERTIES LABELS integration TIMEOUT 60)

function(iwemu_rdmacm_test name)
  add_test(NAME integration.rdmacm.${name} COMMAND timeout 120 ${ARGN})
  set_tests_properties(integration.rdmacm.${name} PROPERTIES
    LABELS integration TIMEOUT 120 SKIP_RETURN_CODE 77)
endfunction()

# The same, and again as nobody when run as root (no privilege is needed).
function(iwemu_rdmacm_test_both name)
  iwemu_rdmacm_test(${name} ${ARGN})
  iwemu_rdmacm_test(${name}.unprivileged ${RDMACM_HERE}/as_nobody.sh ${ARGN})
endfunction()

iwemu_rdmacm_test_both(api $<TARGET_FILE:iwemu_run> $<TARGET_FILE:rdmacm_api_test>)
# 5,000 connect/Send/disconnect/destroy cycles in one process: heap and RSS
# flat (issue 25 item 2: a CM record and its QP's memory per connection).
iwemu_rdmacm_test(churn_memory $<TARGET_FILE:iwemu_run> $<TARGET_FILE:rdmacm_churn_memory> 5000)
# Heap and RSS figures mean nothing under ASan (its allocator and quarantine):
# the release stage only (label memory, not integration).
set_tests_properties(integration.rdmacm.churn_memory PROPERTIES LABELS memory)
iwemu_rdmacm_test(udaddy_fails_cleanly ${RDMACM_HERE}/rdmacm_udaddy.sh $<TARGET_FILE:iwemu_run>)
iwemu_rdmacm_test_both(ucmatose ${RDMACM_HERE}/rdmacm_ucmatose.sh $<TARGET_FILE:iwemu_run> 127.0.0.1 10)
iwemu_rdmacm_test(ucmatose_migrate
  ${RDMACM_HERE}/rdmacm_ucmatose.sh $<TARGET_FILE:iwemu_run> 127.0.0.1 4 -m)
iwemu_rdmacm_test(ucmatose_nonloopback
  ${RDMACM_HERE}/rdmacm_ucmatose.sh $<TARGET_FILE:iwemu_run> nonloopback 10 -C 100 -S 4096)
iwemu_rdmacm_test_both(rdma_server_client
  ${RDMACM_HERE}/rdmacm_rdma_server_client.sh $<TARGET_FILE:iwemu_run> 127.0.0.1)

# rping: RDMA Read + Write + Send, every ping's data verified (-V).  rping
# itself refuses -S above 65535.
iwemu_rdmacm_test_both(rping ${RDMACM_HERE}/rdmacm_rping.sh $<TARGET_FILE:iwemu_run> 127.0.0.1 2000 65535)
iwemu_rdmacm_test(rping_nonloopback
  ${RDMACM_HERE}/rdmacm_rping.sh $<TARGET_FILE:iwemu_run> nonloopback 200 4096)

# cmtime: connect, then disconnect and destroy the QP at once; every side
# still gets DISCONNECTED (20 runs each, a race: issue 24 item 1).
iwemu_rdmacm_test(cmtime_c1 ${RDMACM_HERE}/rdmacm_cmtime.sh $<TARGET_FILE:iwemu_run> 20 1)
iwemu_rdmacm_test(cmtime_c50 ${RDMACM_HERE}/rdmacm_cmtime.sh $<TARGET_FILE:iwemu_run> 20 50)
# riostream (rsockets' riowrite, both sides spinning on memory the peer's
# Write fills): -C 1 -I 100 ten times, and the default run: a latency phase,
# then on a second connection a bandwidth phase with rsockets' inline set to
# 0, which iwemu grants as 256 (over kernel siw, which grants the 0, rsockets
# refuses that phase; docs/limits.md).  The default run takes 10-40 s (up to
# 80 s under ASan), nearly all of it two processes spinning: alone, and
# bounded at 280 s.
iwemu_rdmacm_test(riostream_pingpong ${RDMACM_HERE}/rdmacm_riostream.sh $<TARGET_FILE:iwemu_run> pingpong 10)
add_test(NAME integration.rdmacm.riostream_default
  COMMAND timeout 280 ${RDMACM_HERE}/rdmacm_riostream.sh $<TARGET_FILE:iwemu_run> default)
set_tests_properties(integration.rdmacm.riostream_default PROPERTIES
  LABELS integration TIMEOUT 300 RUN_SERIAL ON)

# perftest with -R: control channel and test QPs through rdma_cm.
foreach(bench ib_send_bw ib_write_bw ib_read_bw ib_send_lat ib_write_lat ib_read_lat)
  iwemu_rdmacm_test(perftest_${bench}
    ${RDMACM_HERE}/rdmacm_perftest.sh $<TARGET_FILE:iwemu_run> ${bench} 127.0.0.1 -n 500)
endforeach()
# A connection reset right after its MPA Request (a forwarder for a server
# re-creating its listener) is made again (issue 23 (a)).
foreach(bench ib_read_bw ib_write_lat)
  iwemu_rdmacm_test(perftest_${bench}_reset_before_reply
    ${RDMACM_HERE}/rdmacm_reset_before_reply.sh $<TARGET_FILE:iwemu_run> ${bench})
endforeach()
# Issue 4's matrix: each benchmark at 2 B, 4 KiB and 64 KiB; one -a sweep of
# each bw test (2 B .. 8 MiB, so few iterations); ib_write_bw over four QPs.
# Not here: ib_write_lat -e, refused by perftest's own parser ("Events
# feature not available on WRITE verb").  ib_send_bw -e with equal arguments
# deadlocks in perftest about one run in three: on iWARP the receiver returns
# send credits by RDMA Write, which completes nothing at the sender, so a
# client that has run out of credits and sleeps in ibv_get_cq_event with no
# signaled Send outstanding is never woken; it runs below with a client
# window those credits never close (rdmacm_send_bw_events.sh).
foreach(bench ib_send_bw ib_write_bw ib_read_bw ib_send_lat ib_write_lat ib_read_lat)
  foreach(size 2 4096 65536)
    iwemu_rdmacm_test(perftest_${bench}_s${size}
      ${RDMACM_HERE}/rdmacm_perftest.sh $<TARGET_FILE:iwemu_run> ${bench} 127.0.0.1 -s ${size} -n 200)
  endforeach()
endforeach()
foreach(bench ib_send_bw ib_write_bw ib_read_bw)
  iwemu_rdmacm_test(perftest_${bench}_all_sizes
    ${RDMACM_HERE}/rdmacm_perftest.sh $<TARGET_FILE:iwemu_run> ${bench} 127.0.0.1 -a -n 20)
endforeach()
iwemu_rdmacm_test(perftest_ib_write_bw_4qps
  ${RDMACM_HERE}/rdmacm_perftest.sh $<TARGET_FILE:iwemu_run> ib_write_bw 127.0.0.1 -q 4 -n 200)
iwemu_rdmacm_test(perftest_ib_send_bw_nonloopback
  ${RDMACM_HERE}/rdmacm_perftest.sh $<TARGET_FILE:iwemu_run> ib_send_bw nonloopback -n 500)

# perftest's closing exchange under CPU load (issue 25 item 1): 15 runs
# here (about 4 s each under load; the failure was 1 run in ~25, so this
# catches a regression about every other CI run; 200 runs are in the
# commit's evidence).
add_test(NAME integration.rdmacm.perftest_teardown_under_load
  COMMAND timeout 280 ${RDMACM_HERE}/rdmacm_perftest_teardown.sh $<TARGET_FILE:iwemu_run> 15)
set_tests_properties(integration.rdmacm.perftest_teardown_under_load PROPERTIES
  LABELS integration TIMEOUT 300 SKIP_RETURN_CODE 77)

# qperf -cm1: the server forks a child per test, which binds port 0 and
# publishes the port before rdma_listen.  rc_bw and the rc_rdma_write_*
# tests (Write with Immediate) are registered on their own below.
iwemu_rdmacm_test(qperf ${RDMACM_HERE}/rdmacm_qperf.sh $<TARGET_FILE:iwemu_run> 127.0.0.1
  rc_lat rc_rdma_read_lat rc_rdma_write_poll_lat)
iwemu_rdmacm_test(qperf_rc_rdma_read_bw
  ${RDMACM_HERE}/rdmacm_qperf.sh $<TARGET_FILE:iwemu_run> 127.0.0.1 rc_rdma_read_bw)

# qperf -cm1 rc_bw streams Sends with no flow control, relying on IB's RNR
# retry; iwemu's RNR wait (a Send that finds no receive stalls the stream
# until one is posted, docs/limits.md) makes it run.
iwemu_rdmacm_test(qperf_rc_bw
  ${RDMACM_HERE}/rdmacm_qperf.sh $<TARGET_FILE:iwemu_run> 127.0.0.1 rc_bw)
# ... and its end (the receiver parked on a Send when both disconnect) does
# not wait for rnr_wait_ms: three runs, each far under a 20 s RNR wait.
iwemu_rdmacm_test(qperf_rc_bw_close
  ${RDMACM_HERE}/rdmacm_qperf_close.sh $<TARGET_FILE:iwemu_run> 3 12)
# ib_read_lat -e polls once per event: an event for completions already in
# the CQ when it re-arms ran it one event ahead until its send queue was
# full ("Couldn't post send: scnt=8").  Arming asks for the next completion
# only, as kernel siw does.  ib_send_lat -e beside it.
iwemu_rdmacm_test(perftest_ib_read_lat_events
  ${RDMACM_HERE}/rdmacm_perftest.sh $<TARGET_FILE:iwemu_run> ib_read_lat 127.0.0.1 -e -n 1000)
iwemu_rdmacm_test(perftest_ib_send_lat_events
  ${RDMACM_HERE}/rdmacm_perftest.sh $<TARGET_FILE:iwemu_run> ib_send_lat 127.0.0.1 -e -n 1000)
# ib_send_bw -e (completion events): see the script for perftest's credit deadlock.
iwemu_rdmacm_test(perftest_ib_send_bw_events
  ${RDMACM_HERE}/rdmacm_send_bw_events.sh $<TARGET_FILE:iwemu_run>)
# RFC 7306 Immediate Data: qperf's RDMA Write latency test posts Write with
# Immediate, answered with a receive completion (docs/limits.md).
iwemu_rdmacm_test(qperf_rc_rdma_write_lat
  ${RDMACM_HERE}/rdmacm_qperf.sh $<TARGET_FILE:iwemu_run> 127.0.0.1 rc_rdma_write_lat)
# ... and its bandwidth test streams them like rc_bw streams Sends: it needs
# the RNR wait too (each Immediate Data consumes a receive).
iwemu_rdmacm_test(qperf_rc_rdma_write_bw
  ${RDMACM_HERE}/rdmacm_qperf.sh $<TARGET_FILE:iwemu_run> 127.0.0.1 rc_rdma_write_bw)
# RFC 7306 atomics: qperf's CmpSwap and FetchAdd message rates (the QP's
# REMOTE_ATOMIC right comes from rdma_init_qp_attr, docs/limits.md).
iwemu_rdmacm_test(qperf_rc_atomics
  ${RDMACM_HERE}/rdmacm_qperf.sh $<TARGET_FILE:iwemu_run> 127.0.0.1 rc_compare_swap_mr rc_fetch_add_mr)

# rdma_reject / rdma_accept with private data and exit() right after: the
# peer sees the answer every time (issue 24.4, the MPA Reply flushed at exit).
add_executable(rdmacm_answer_exit ${RDMACM_HERE}/rdmacm_answer_exit.c)
target_link_libraries(rdmacm_answer_exit PRIVATE ${RDMACM_LIBRARY} ${IBVERBS_LIBRARY})
add_dependencies(rdmacm_answer_exit iwemu_run iwemu_shim iwemu_provider)
# With _exit() no exit handler runs: the answer is on the wire when the call
# returns (rdma-core's test_rdmacm_async_reject_traffic leaves by os._exit).
foreach(answer reject accept)
  iwemu_rdmacm_test(${answer}_then_exit ${RDMACM_HERE}/rdmacm_answer_exit.sh
    $<TARGET_FILE:iwemu_run> $<TARGET_FILE:rdmacm_answer_exit> ${answer} 50)
  iwemu_rdmacm_test(${answer}_then__exit ${RDMACM_HERE}/rdmacm_answer_exit.sh
    $<TARGET_FILE:iwemu_run> $<TARGET_FILE:rdmacm_answer_exit> ${answer} 50 _exit)
endforeach()

# rdma_xserver / rdma_xclient over RC: the client posts 16 octets inline on a
# QP created with max_inline_data 0 (inline is bounded by the device, as siw
# checks it).
iwemu_rdmacm_test(rdma_xserver_xclient
  ${RDMACM_HERE}/rdmacm_rdma_xserver_xclient.sh $<TARGET_FILE:iwemu_run>)
# rstream (rsockets): its default run (latency tests, then bandwidth tests
# with rsockets' inline set to 0), a latency and a bandwidth test with every
# transfer verified (-T v).
iwemu_rdmacm_test(rstream ${RDMACM_HERE}/rdmacm_rstream.sh $<TARGET_FILE:iwemu_run>)
iwemu_rdmacm_test(rstream_latency_verified
  ${RDMACM_HERE}/rdmacm_rstream.sh $<TARGET_FILE:iwemu_run> -S 4096 -C 1 -I 1000 -T v)
iwemu_rdmacm_test(rstream_bandwidth_verified
  ${RDMACM_HERE}/rdmacm_rstream.sh $<TARGET_FILE:iwemu_run> -S 65536 -C 500 -I 1 -T v)

# MPA Rev 0 (RDMA Consortium, RFC 5044 Appendix C): one side forced to
# mpa_rev = 0, both roles, rping -V and perftest -R; mpa_rev0 = off refuses;
# a raw-socket Rev 0 Request against rping -s (issue 29).
add_test(NAME integration.rdmacm.rdmac_rev0
  COMMAND timeout 280 ${RDMACM_HERE}/rdmac_rev0.sh $<TARGET_FILE:iwemu_run>)
set_tests_properties(integration.rdmacm.rdmac_rev0 PROPERTIES LABELS integration TIMEOUT 280)

# draft-03 Start Key startup (seed 000 §8.1): one side in mpa_startup =
# startkey, both roles, rping -V and perftest -R; raw-socket draft-03 peers
# (good key, RFC 5044-shaped variant, invalid key = error 4) against rping -s
# (issue 29).
add_test(NAME integration.rdmacm.rdmac_startkey
  COMMAND timeout 280 ${RDMACM_HERE}/rdmac_startkey.sh $<TARGET_FILE:iwemu_run> $<TARGET_FILE:iwemu>)
set_tests_properties(integration.rdmacm.rdmac_startkey PROPERTIES LABELS integration TIMEOUT 280)
# The same mode through librdmacm: private data is EINVAL (draft-03 has none in MPA).
add_test(NAME integration.rdmacm.startkey_private_data
  COMMAND env IWEMU_MPA_STARTUP=startkey timeout 60 $<TARGET_FILE:iwemu_run> $<TARGET_FILE:rdmacm_api_test> startkey)
set_tests_properties(integration.rdmacm.startkey_private_data PROPERTIES LABELS integration TIMEOUT 60)

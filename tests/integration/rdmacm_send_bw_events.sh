#!/bin/bash
# ib_send_bw -e -R (completion events instead of polling) between two
# processes, with a client window that perftest's own iWARP flow control
# can never close.
#
# Why not the same arguments on both sides: on iWARP, perftest 4.5 sends
# credits back as RDMA Writes into the client's credit buffer
# (send_bw.c: send_rcredit = 1 for IBV_TRANSPORT_IWARP; the server's credit
# Write in run_iter_bw_server).  A Write completes nothing at its target.
# run_iter_bw stops posting when `scnt + 1 - credit_buf >= rx_depth` and then,
# with -e, sleeps in ibv_get_cq_event (ctx_notify_events) on its send CQ.
# When all its signaled Sends have already completed, the credit that comes
# later wakes nobody: the client sleeps for ever, the server waits for the
# rest of the messages (one run in three to seven with equal arguments; the
# stack, socket queues and counters of such a run are in the rnr report).
# The window closes when the server lags rx_depth messages behind; it can lag
# by its posted receives (its rx_depth) plus a credit interval (rx_depth/3)
# plus what TCP and the client's SQ hold.  A client rx_depth (and -n, which
# caps it) far above that sum never stops on credits; the extra Sends it
# may have in flight beyond the server's posted receives simply wait in TCP
# (iwemu's RNR wait, docs/limits.md).
# It still stops one message short if no credit was ever placed (credit 0:
# the window is rx_depth = iters): that was iwemu's, when the client's engine
# thread waited for the send lock of the QP the client posted on for a whole
# run, holding the receive lock, and the client, always posting, never
# received itself (1 run in ~150 under load; emulator/qp/rx_post_assist.cpp,
# QueuePair::on_timer).
#
# usage: rdmacm_send_bw_events.sh IWEMU_RUN [ITERS]   (ITERS >= 4000)
set -u
here=$(dirname "$0")
. "$here/rdmacm_lib.sh"
run=$1
iters=${2:-4000}
perftest_pair "$run" ib_send_bw 127.0.0.1 -e -R -n "$iters" -- --rx-depth="$iters"
if [ $client_rc -ne 0 ] || [ $server_rc -ne 0 ] || ! echo "$result" | grep -Eq "^ *[0-9]+ +$iters "; then
    show "$dir/server.log" "$dir/client.log"
    fail "ib_send_bw -e -R: client rc=$client_rc server rc=$server_rc"
fi
echo "ib_send_bw -e -R 127.0.0.1:$port:$result"

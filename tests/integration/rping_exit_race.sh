# rping's own exit race (sourced by the rping tests: integration, valgrind,
# conformance, package).
# rping's CM thread goes back into rdma_get_cm_event after acking
# DISCONNECTED while main may already have closed the event channel: then the
# thread sees EBADF and exit()s 255 after the whole run succeeded.  The kernel
# has the same race (a read() on a closed fd is EBADF there too), so it is
# rping's, not iwemu's; exactly that ending is accepted.
rping_exit_race() {  # RC LOG
    [ "$1" = 255 ] && grep -q 'DISCONNECT EVENT' "$2" && grep -q 'rdma_get_cm_event: Bad file descriptor' "$2"
}

# ROLE RC LOG: prints RC, or 0 (with a note on stderr) when RC is exactly that race.
rping_rc() {
    if rping_exit_race "$2" "$3"; then
        echo "note: rping $1 hit its own exit race (EBADF after DISCONNECTED)" >&2
        echo 0
    else
        echo "$2"
    fi
}

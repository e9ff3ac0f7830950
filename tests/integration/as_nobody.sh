#!/bin/sh
# Runs a command as an unprivileged user when we are root (nobody/nogroup,
# no supplementary groups, no XDG_RUNTIME_DIR of root's), as is otherwise.
if [ "$(id -u)" = 0 ]; then
    exec env -u XDG_RUNTIME_DIR setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"
fi
exec "$@"

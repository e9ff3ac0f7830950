#!/bin/sh
# The generated sysfs tree is reused, not rewritten: the ibdev directory's
# mtime (libibverbs' device identity across re-scans) and every value file
# keep their timestamps across launches.
# usage: check_sysfs_stable.sh IWEMU_RUN
set -u
run="$1"
env_out=$("$run" --env) || { echo "FAIL: iwemu-run --env"; exit 1; }
sysfs=$(echo "$env_out" | sed -n "s/^export SYSFS_PATH='\(.*\)'$/\1/p")
[ -d "$sysfs/class/infiniband/iwemu0" ] || { echo "FAIL: no tree at '$sysfs'"; exit 1; }
before=$(find "$sysfs" -exec stat -c '%n %Y.%y' {} + | sort)
sleep 1.1
"$run" ibv_devices >/dev/null || { echo "FAIL: ibv_devices"; exit 1; }
"$run" --env >/dev/null
after=$(find "$sysfs" -exec stat -c '%n %Y.%y' {} + | sort)
if [ "$before" != "$after" ]; then
    echo "FAIL: the tree changed between launches"
    echo "$before" > /tmp/iwemu-sysfs-before.$$; echo "$after" > /tmp/iwemu-sysfs-after.$$
    diff /tmp/iwemu-sysfs-before.$$ /tmp/iwemu-sysfs-after.$$; rm -f /tmp/iwemu-sysfs-*.$$
    exit 1
fi
for f in class/infiniband_verbs/abi_version class/infiniband_verbs/uverbs0/dev class/infiniband/iwemu0/node_type \
         class/misc/rdma_cm/abi_version class/infiniband/iwemu0/ports/1/gids/0; do
    [ -f "$sysfs/$f" ] || { echo "FAIL: $f missing"; exit 1; }
done
[ "$(cat "$sysfs/class/infiniband/iwemu0/node_type")" = "4: RNIC" ] || { echo "FAIL: node_type"; exit 1; }
echo "sysfs tree at $sysfs stable"

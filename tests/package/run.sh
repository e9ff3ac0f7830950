#!/bin/bash
# The Debian package, end to end: build it with dpkg-buildpackage from a copy
# of the tree (the source tree stays clean), check it with lintian, install it
# with apt, run ibv_devinfo, rping and ib_send_bw -R through the installed
# /usr/bin/iwemu-run only (build tree out of reach, clean environment), as
# root and as nobody, then purge it and check that none of its files is left.
#
#   tests/package/run.sh [--keep]     --keep: leave the work directory
#
# Needs root (apt-get install/purge; re-executes itself with sudo if it can).
# Last line: "package: N passed, M failed"; exit status 1 if anything failed.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
. "$top/tests/integration/rping_exit_race.sh"
keep=0
[ "${1:-}" = --keep ] && keep=1

if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null && exec sudo -- "$0" "$@"
    echo "tests/package/run.sh: needs root (apt-get install/purge)" >&2
    echo "package: 0 passed, 1 failed"
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
ma=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
arch=$(dpkg --print-architecture)
sys_path=/usr/sbin:/usr/bin:/sbin:/bin
passed=0
failed=0
installed=0
work=$(mktemp -d /tmp/iwemu-package.XXXXXX)
chmod 755 "$work"  # nobody writes nothing here, but reads the logs' parent

cleanup() {
    if [ "$installed" -eq 1 ]; then
        timeout 120 apt-get purge -y -qq iwemu >/dev/null 2>&1
    fi
    if [ "$keep" -eq 1 ]; then echo "work directory kept: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM  # interrupted: still purge and clean up

ok() { passed=$((passed + 1)); echo "ok   $*"; }
bad() { failed=$((failed + 1)); echo "FAIL $*"; }
show() { for f in "$@"; do echo "----- $f"; tail -n 40 "$f"; done; }
finish() {
    echo "package: $passed passed, $failed failed"
    [ "$failed" -eq 0 ]
    exit
}

# A TCP port nothing uses, in any state (rdma_cm ports are TCP ports here).
free_port() {
    local p
    for _ in $(seq 1 50); do
        p=$((20000 + RANDOM % 12000))
        ss -Htan "sport = :$p" | grep -q . || { echo "$p"; return 0; }
    done
    return 1
}

# wait_listen PORT PID: up to 20 s for a TCP listener; stops if PID exits.
wait_listen() {
    for _ in $(seq 1 200); do
        ss -Hltn "sport = :$1" | grep -q . && return 0
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

# as USER CMD...: CMD with only the installed iwemu-run's environment, from /.
as() {
    local user=$1 home=/root
    shift
    if [ "$user" = root ]; then
        (cd / && env -i PATH=$sys_path HOME=$home "$@")
    else
        (cd / && setpriv --reuid="$user" --regid=nogroup --clear-groups \
            env -i PATH=$sys_path HOME=/nonexistent "$@")
    fi
}

# ---------------------------------------------------------------- build
echo "=== package: build (dpkg-buildpackage -b) in $work"
src=$work/iwemu
mkdir -p "$src"
# (Only debian/ is compared: other work may go on in the tree meanwhile.)
status_before=$(git -C "$top" status --porcelain --ignored -- debian 2>/dev/null)
if git -C "$top" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    # Tracked and new files, not what .gitignore excludes (build trees).
    (cd "$top" && git ls-files -z -co --exclude-standard | tar --null -T - -cf -) | tar -C "$src" -xf -
else
    tar -C "$top" --exclude='./build*' --exclude='./debian/build' -cf - . | tar -C "$src" -xf -
fi
if (cd "$src" && DEB_BUILD_OPTIONS="nocheck parallel=2" timeout 420 \
        dpkg-buildpackage -b -us -uc -Pnocheck) > "$work/build.log" 2>&1; then
    ok "dpkg-buildpackage -b -us -uc"
else
    show "$work/build.log"; bad "dpkg-buildpackage -b -us -uc"; finish
fi
[ "$(git -C "$top" status --porcelain --ignored -- debian 2>/dev/null)" = "$status_before" ] \
    && ok "source tree untouched by the build" || bad "the build changed the source tree"
deb=$(ls "$work"/iwemu_*_"$arch".deb)
changes=$(ls "$work"/iwemu_*_"$arch".changes)

# ---------------------------------------------------------------- lintian
if command -v lintian >/dev/null; then
    timeout 120 lintian --allow-root --fail-on error,warning "$changes" > "$work/lintian.log" 2>&1
    rc=$?
    if [ $rc -eq 0 ] && ! grep -Eq '^[EW]: ' "$work/lintian.log"; then
        ok "lintian: no errors, no warnings"
    else
        cat "$work/lintian.log"; bad "lintian (rc=$rc)"
    fi
else
    bad "lintian is not installed (scripts/install-deps installs it)"
fi

# ---------------------------------------------------------------- contents
dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\.||' > "$work/contents"
missing=""
for f in /usr/lib/$ma/libibverbs/libiwemu-rdmav34.so /etc/libibverbs.d/iwemu.driver \
         /usr/lib/$ma/iwemu/libiwemu-shim.so /usr/lib/$ma/iwemu/libiwemu-emulator.so \
         /usr/bin/iwemu-run /usr/bin/iwemu /usr/share/man/man1/iwemu-run.1.gz \
         /usr/share/man/man1/iwemu.1.gz /usr/share/man/man7/iwemu.7.gz; do
    grep -qx "$f" "$work/contents" || missing+=" $f"
done
[ -z "$missing" ] && ok "package contents" || bad "package lacks:$missing"
depends=$(dpkg-deb -f "$deb" Depends)
if grep -q 'libibverbs1 (>= 34' <<<"$depends" && grep -q 'libibverbs1 (<< ' <<<"$depends" \
        && grep -q 'libisal' <<<"$depends"; then
    ok "Depends: $depends"
else
    bad "Depends lacks the shlibs or the private ABI 34 range: $depends"
fi

# ---------------------------------------------------------------- install
if dpkg-query -W -f='${db:Status-Status}' iwemu 2>/dev/null | grep -qv not-installed; then
    bad "iwemu is installed already: purge it before running this test"; finish
fi
if timeout 180 apt-get install -y -qq "$deb" > "$work/install.log" 2>&1; then
    installed=1; ok "apt-get install ./$(basename "$deb")"
else
    show "$work/install.log"; bad "apt-get install"; finish
fi
rm -rf "$src"  # the build tree is gone: everything below uses /usr only
dpkg -L iwemu | grep -vx '/\.' | sort > "$work/files"
grep -qx 'driver iwemu' /etc/libibverbs.d/iwemu.driver && ok "iwemu.driver names the provider" \
    || bad "/etc/libibverbs.d/iwemu.driver"

env_out=$(as root /usr/bin/iwemu-run --env)
if grep -q "^export IWEMU_PROVIDER='/usr/lib/$ma/libibverbs/libiwemu-rdmav34.so'$" <<<"$env_out" \
        && grep -q "^export LD_PRELOAD='/usr/lib/$ma/iwemu/libiwemu-shim.so'$" <<<"$env_out"; then
    ok "iwemu-run --env points at the system paths"
else
    echo "$env_out"; bad "iwemu-run --env"
fi
# Every iwemu object a verbs program loads (or the dynamic linker even looks
# for) comes from the system directories.
as root /usr/bin/iwemu-run env LD_DEBUG=files,libs timeout 30 ibv_devices > "$work/ld.log" 2>&1
loaded=$(grep -o 'file=[^ ]*iwemu[^ ]*' "$work/ld.log" | sort -u)
if grep -qx "file=/usr/lib/$ma/libibverbs/libiwemu-rdmav34.so" <<<"$loaded" \
        && grep -qx "file=/usr/lib/$ma/iwemu/libiwemu-emulator.so" <<<"$loaded" \
        && grep -qx "file=/usr/lib/$ma/iwemu/libiwemu-shim.so" <<<"$loaded" \
        && ! grep -v -e "^file=/usr/lib/$ma/" -e "^file=libiwemu-emulator.so$" <<<"$loaded" | grep -q .; then
    ok "provider, shim and emulator load from /usr/lib/$ma"
else
    echo "$loaded"; bad "unexpected iwemu objects loaded"
fi

# Installed, iwemu stays out of programs not started by iwemu-run.
as root env LD_DEBUG=files timeout 30 ibv_devices > "$work/plain.log" 2>&1
if ! grep -q 'file=[^ ]*iwemu' "$work/plain.log"; then
    ok "ibv_devices without iwemu-run loads nothing of iwemu"
else
    grep 'file=[^ ]*iwemu' "$work/plain.log" | head -n 5; bad "iwemu loaded without iwemu-run"
fi

# ---------------------------------------------------------------- programs
for user in root nobody; do
    log=$work/$user
    if as "$user" timeout 30 /usr/bin/iwemu-run ibv_devinfo > "$log.devinfo" 2>&1 \
            && grep -q 'hca_id:.*iwemu0' "$log.devinfo" && grep -q 'PORT_ACTIVE' "$log.devinfo"; then
        ok "$user: ibv_devinfo shows iwemu0, port active"
    else
        show "$log.devinfo"; bad "$user: ibv_devinfo"
    fi

    port=$(free_port)
    as "$user" timeout 60 /usr/bin/iwemu-run rping -s -a 127.0.0.1 -p "$port" -C 200 -S 4096 -V \
        > "$log.rping-server" 2>&1 &
    server=$!
    if wait_listen "$port" $server; then
        as "$user" timeout 50 /usr/bin/iwemu-run rping -c -a 127.0.0.1 -p "$port" -C 200 -S 4096 -V -v \
            > "$log.rping-client" 2>&1
        crc=$?
    else
        crc=listen
        kill $server 2>/dev/null
    fi
    wait $server
    src_rc=$?
    # rping's own exit race, accepted exactly as the integration test does.
    crc=$(rping_rc client "$crc" "$log.rping-client")
    src_rc=$(rping_rc server $src_rc "$log.rping-server")
    pings=$(grep -c '^ping data:' "$log.rping-client" 2>/dev/null)
    if [ "$crc" = 0 ] && [ $src_rc -eq 0 ] && [ "${pings:-0}" -eq 200 ]; then
        ok "$user: rping server + client, 200 pings verified"
    else
        show "$log.rping-server" "$log.rping-client"
        bad "$user: rping (client rc=$crc, server rc=$src_rc, ${pings:-0} of 200 pings)"
    fi

    port=$(free_port)
    as "$user" timeout 60 /usr/bin/iwemu-run ib_send_bw -R -p "$port" > "$log.bw-server" 2>&1 &
    server=$!
    if wait_listen "$port" $server; then
        as "$user" timeout 50 /usr/bin/iwemu-run ib_send_bw -R -p "$port" 127.0.0.1 > "$log.bw-client" 2>&1
        crc=$?
    else
        crc=listen
        kill $server 2>/dev/null
    fi
    wait $server
    src_rc=$?
    result=$(grep -A1 '#bytes' "$log.bw-client" 2>/dev/null | tail -n 1)
    if [ "$crc" = 0 ] && [ $src_rc -eq 0 ] && grep -Eq '^ *[0-9]+ +[0-9]+ ' <<<"$result"; then
        ok "$user: ib_send_bw -R:$(echo "$result" | tr -s ' ')"
    else
        show "$log.bw-server" "$log.bw-client"
        bad "$user: ib_send_bw -R (client rc=$crc, server rc=$src_rc)"
    fi
done

# ---------------------------------------------------------------- purge
if timeout 120 apt-get purge -y -qq iwemu > "$work/purge.log" 2>&1; then
    installed=0; ok "apt-get purge iwemu"
else
    show "$work/purge.log"; bad "apt-get purge iwemu"; finish
fi
status=$(dpkg-query -W -f='${db:Status-Status}' iwemu 2>/dev/null)
[ -z "$status" ] || [ "$status" = not-installed ] && ok "dpkg knows no trace of iwemu" \
    || bad "iwemu still has dpkg status '$status'"
left=""
while read -r f; do
    [ -e "$f" ] || [ -L "$f" ] || continue
    # A directory may stay if another package still owns it.
    if [ -d "$f" ] && ! [ -L "$f" ] && dpkg -S "$f" >/dev/null 2>&1; then continue; fi
    left+=" $f"
done < "$work/files"
[ ! -e /etc/libibverbs.d/iwemu.driver ] || left+=" /etc/libibverbs.d/iwemu.driver"
[ ! -e /usr/lib/$ma/iwemu ] || left+=" /usr/lib/$ma/iwemu"
[ -z "$left" ] && ok "purge left nothing of the $(wc -l < "$work/files") package paths" \
    || bad "left behind after purge:$left"

finish

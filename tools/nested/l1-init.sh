#!/bin/bash
# PID 1 of L1 after the initramfs' switch_root (not run on this machine).
# run-l1.sh copies it, l1-lib.sh, the script (as script.sh) and an env file
# into the run directory, named on the kernel command line
# (nested.run=runs/<id>). It runs script.sh in a subshell with
# l1-lib.sh's helpers, writes its exit code to $RUN/rc and powers L1 off.

# One function, so bash has read all of it before the 9p root goes away
# at power-off.
main() {
    export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
    export HOME=/root LANG=C.UTF-8 TERM=dumb NESTED=/nested
    RUN=$NESTED/$(sed -n 's/.*nested\.run=\([^ ]*\).*/\1/p' /proc/cmdline)
    export RUN
    # Else it is "(none)", which oslo.config rejects as a host name.
    hostname nested-l1
    mount -t tmpfs -o mode=755 tmpfs /run
    mkdir -p /dev/pts /dev/shm
    mount -t devpts devpts /dev/pts
    mount -t tmpfs tmpfs /dev/shm
    . "$RUN/env"
    . "$RUN/l1-lib.sh"
    t "userspace up, kernel $(uname -r), devices $NESTED_DEVICES"
    (cd / && . "$RUN/script.sh")
    local rc=$?
    t "script exit code $rc, powering off"
    echo $rc > "$RUN/rc"
    sync
    echo o > /proc/sysrq-trigger
    # Shell builtins only from here on.
    while :; do read -r -t 10 _ < /dev/console; done
}
main

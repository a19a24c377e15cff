#!/bin/sh
# corral-entrypoint: the image's entrypoint; runs /usr/local/bin/corral with
# the container's arguments (default: serve).
#
# On cgroup v2 with a private cgroup namespace (Kubernetes on cgroup v2
# nodes), the container's processes sit in the namespace's root cgroup, and a
# cgroup with processes cannot enable controllers for its children ("no
# internal processes"): runc could then give no sandbox its memory, cpu and
# pids limits. Move this process into a leaf (init) and enable every
# controller for the rest, as Docker's dind does; sandboxes then nest under
# the pod's cgroup beside it. Nothing is touched on cgroup v1 or when the
# cgroup namespace is the host's (the path is then not "/").
set -eu
if [ -f /sys/fs/cgroup/cgroup.controllers ] && [ "$(cat /proc/self/cgroup)" = "0::/" ]; then
	mkdir -p /sys/fs/cgroup/init
	xargs -rn1 </sys/fs/cgroup/cgroup.procs >/sys/fs/cgroup/init/cgroup.procs 2>/dev/null || :
	sed -e 's/ / +/g' -e 's/^/+/' </sys/fs/cgroup/cgroup.controllers >/sys/fs/cgroup/cgroup.subtree_control
fi
exec /usr/local/bin/corral "$@"

# Process bookkeeping for the cluster daemons. Source, don't execute.
# Each daemon runs in its own session, output to $LOG_DIR/<name>.log, pid in
# $RUN_DIR/<name>.pid. Only those pids (and the container shims bound to our
# containerd socket) are ever signalled.

COMPONENTS_START_ORDER=(etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet kube-proxy kube-router registry)
# The worker (tests/cluster/worker) has no registry of its own: images reach it by import.
if [[ $HARNESS_CLUSTER_ROLE == worker ]]; then
	COMPONENTS_START_ORDER=(etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet kube-proxy kube-router)
fi

# pid_of NAME: prints the pid if the recorded process is alive and is ours.
pid_of() {
	local f="$RUN_DIR/$1.pid" pid
	[[ -s $f ]] || return 1
	pid="$(<"$f")"
	[[ -r /proc/$pid/cmdline ]] || return 1
	# Guard against pid reuse: argv[0] must end in the component's name.
	[[ "$(tr '\0' '\n' <"/proc/$pid/cmdline" | head -1)" == *"$1" ]] || return 1
	echo "$pid"
}

start_proc() {
	local name=$1; shift
	if pid_of "$name" >/dev/null; then
		return 0
	fi
	log "starting $name"
	mkdir -p "$LOG_DIR" "$RUN_DIR"
	# Every descriptor above stderr is closed first: a daemon that inherited a lock (our updown lock, or
	# a caller's `flock FILE tests/cluster/up`) would hold it for as long as the cluster runs.
	(
		for fd in /proc/"$BASHPID"/fd/*; do
			fd=${fd##*/}
			((fd > 2)) && eval "exec $fd>&-" 2>/dev/null
		done
		exec setsid "$@" >>"$LOG_DIR/$name.log" 2>&1 </dev/null
	) &
	echo $! >"$RUN_DIR/$name.pid"
}

# stop_proc NAME [TIMEOUT]: SIGTERM, then SIGKILL after TIMEOUT seconds.
stop_proc() {
	local name=$1 timeout=${2:-20} pid
	pid="$(pid_of "$name")" || { rm -f "$RUN_DIR/$name.pid"; return 0; }
	log "stopping $name (pid $pid)"
	kill -TERM "$pid" 2>/dev/null || true
	local deadline=$((SECONDS + timeout))
	while [[ -e /proc/$pid ]] && ((SECONDS < deadline)); do sleep 0.2; done
	if [[ -e /proc/$pid ]]; then
		log "$name did not exit, SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
		while [[ -e /proc/$pid ]]; do sleep 0.1; done
	fi
	rm -f "$RUN_DIR/$name.pid"
}

# pids of containerd shims started by OUR containerd (matched on the exact
# socket path in their command line).
our_shim_pids() {
	local p
	for p in /proc/[0-9]*; do
		[[ -r $p/cmdline ]] || continue
		local cmd
		cmd="$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null)" || continue
		if [[ $cmd == "/usr/bin/containerd-shim-runc-v2 "*"-address $CONTAINERD_SOCK "* ]]; then
			echo "${p#/proc/}"
		fi
	done
}

cluster_healthy() {
	local n
	for n in "${COMPONENTS_START_ORDER[@]}"; do
		pid_of "$n" >/dev/null || return 1
	done
	[[ -s $PKI_DIR/admin.crt ]] || return 1
	# A kubelet started by an older tree lacks cluster DNS: `up` must then rewrite its config and restart it.
	grep -q "^clusterDNS: \[$DNS_SERVICE_IP\]" "$HARNESS_CLUSTER_STATE/kubelet/config.yaml" 2>/dev/null || return 1
	curl -sf --max-time 5 --cacert "$PKI_DIR/ca.crt" --cert "$PKI_DIR/admin.crt" --key "$PKI_DIR/admin.key" \
		"https://127.0.0.1:$APISERVER_PORT/readyz" >/dev/null || return 1
	curl -sf --max-time 5 "http://127.0.0.1:10248/healthz" >/dev/null || return 1
	local ready
	ready="$(curl -sf --max-time 5 --cacert "$PKI_DIR/ca.crt" --cert "$PKI_DIR/admin.crt" --key "$PKI_DIR/admin.key" \
		"https://127.0.0.1:$APISERVER_PORT/api/v1/nodes/$NODE_NAME" |
		python3 -c 'import json,sys; c=json.load(sys.stdin)["status"]["conditions"]; print([x["status"] for x in c if x["type"]=="Ready"][0])' 2>/dev/null)" || return 1
	[[ $ready == True ]]
}

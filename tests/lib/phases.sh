# shellcheck shell=bash
# Phase timing for the CI log. `phase NAME CMD...` runs CMD and, when HARNESS_PHASES_FILE is set,
# appends "NAME SECONDS EXIT" to it; `phases_report` prints what was recorded, one phase a line.
phase() {
	local name=$1 start=$SECONDS rc=0
	shift
	"$@" || rc=$?
	if [[ -n ${HARNESS_PHASES_FILE:-} ]]; then
		printf '%s %s %s\n' "$name" "$((SECONDS - start))" "$rc" >>"$HARNESS_PHASES_FILE"
	fi
	return "$rc"
}

phases_report() {
	[[ -s ${HARNESS_PHASES_FILE:-} ]] || return 0
	echo "phases (seconds):"
	awk '{ printf "  %-12s %6d%s\n", $1, $2, ($3 == "0" ? "" : "  (exit " $3 ")") }' "$HARNESS_PHASES_FILE"
}

#!/usr/bin/env bash
# Holding a lock across several steps of a bash script. A lock lives as
# long as its connection, so the script keeps one open in a coprocess and
# talks to it a line at a time; the steps between LOCK and UNLOCK run
# while the key is held, and if the script dies, the lock goes with it.
# Usage: KEYLOCK_SERVER=host:port examples/bash-coproc.sh
# (Without nc, bash's own `exec {fd}<>/dev/tcp/HOST/PORT` gives the same
# connection for TCP.)
set -euo pipefail
server=${KEYLOCK_SERVER:-127.0.0.1:7711}
if [[ $server == */* ]]; then
	nc_args=(-U "$server")
else
	nc_args=("${server%:*}" "${server##*:}")
fi
coproc KL { exec nc "${nc_args[@]}"; }
# bash forgets KL once nc exits: keep what the script needs.
# shellcheck disable=SC2153 # coproc sets KL_PID
kl_pid=$KL_PID kl_to=${KL[1]} kl_from=${KL[0]}

# kl REQUEST: send one line, leave the value of "OK value" in $value; an
# "ERR CODE text" reply fails the script with the server's reason.
kl() {
	local reply
	printf '%s\n' "$1" >&"$kl_to"
	IFS= read -r -t 10 reply <&"$kl_from" || {
		echo "bash-coproc.sh: no reply to $1" >&2
		exit 1
	}
	if [[ $reply != OK* ]]; then
		echo "bash-coproc.sh: $1: $reply" >&2
		exit 1
	fi
	value=${reply#OK}
	value=${value# }
}

kl "NAME deploy-script"
kl "LOCK deploy:web timeout=5000"
token=$value
echo "step 1: holding deploy:web, fencing token $token"

# Step 2 runs under the lock; another client cannot get in meanwhile.
other=$(printf 'TRYLOCK deploy:web\n' | nc -N "${nc_args[@]}")
[[ $other == "ERR LOCKED deploy:web"* ]] || {
	echo "bash-coproc.sh: another client got: $other" >&2
	exit 1
}
echo "step 2: another client is told: $other"

kl "INFO deploy:web"
[[ $value == *'"name":"deploy-script"'* ]] || exit 1
echo "step 3: the server shows the holder: $value"

kl "UNLOCK deploy:web"
echo "step 4: released ($value key)"
kl "QUIT"
exec {kl_to}>&-		# nc exits once its input is closed too
wait "$kl_pid" 2>/dev/null || true

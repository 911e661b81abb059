#!/bin/sh
# getp on the same requests by one process over a host's GPUs and by MPI ranks sharing them
# (docs/getp.md#ranks-under-mpi): each run's JSON line (--json of gptoss run), then its TPS
# and whether its output file is the one process's, byte for byte.
#   examples/bench_getp_mpi.sh [MODEL [REQUESTS [STEPS [GPUS [RANKS [run's options...]]]]]]
# (run's options are words without blanks, such as --weights mxfp4)
# MODEL (default 20b, synthetic), REQUESTS (2048, bench_getp's questions), STEPS (the
# course's -n, 1024), GPUS (2: the first GPUS GPUs, through CUDA_VISIBLE_DEVICES; "cpu" runs
# a CPU replica a process instead), RANKS (the rank counts to run, "2 1"-style; default
# GPUS, a rank a GPU). Every run partitions by the requests' work (--partition balanced),
# so that a rank of one GPU runs what that GPU runs in the one process. On the GPU machine:
#   make gpu-machine-run COMMAND="examples/bench_getp_mpi.sh 20b 2048 1024 2"
set -eu
root=$(dirname "$(readlink -f -- "$0")")/..
model=${1:-20b} requests=${2:-2048} steps=${3:-1024} gpus=${4:-2}
ranks=${5:-$gpus}
if [ $# -gt 5 ]; then shift 5; else shift $#; fi
if [ "$gpus" = cpu ]; then
  set -- --device cpu "$@"
else
  CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((gpus - 1)))
  export CUDA_VISIBLE_DEVICES
fi
# mpirun refuses root unless told
as_root=
if [ "$(id -u)" = 0 ]; then as_root=--allow-run-as-root; fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$root/gptoss" bench_getp "$model" --requests "$requests" --write-requests "$work/requests.txt"

# run NAME [launcher words...]: gptoss run under the launcher, its JSON line kept
run() {
  name=$1
  shift
  echo "== $name" >&2
  "$@" "$root/gptoss" run "$model" -m getp -i "$work/requests.txt" -o "$work/$name.txt" -n "$steps" \
    --partition balanced --json $options >"$work/$name.out"
  tail -n 1 "$work/$name.out" | tee "$work/$name.json"
}
options="$*"
run one-process
for n in $ranks; do
  run "ranks-$n" mpirun $as_root --oversubscribe -np "$n"
done

echo "== summary: $requests requests, -n $steps, GPUs: $gpus"
for name in one-process $(for n in $ranks; do echo "ranks-$n"; done); do
  tps=$(sed -n 's/.*"tok_per_s":\([0-9.e+]*\).*/\1/p' "$work/$name.json")
  if cmp -s "$work/one-process.txt" "$work/$name.txt"; then same=identical; else same=DIFFERENT; fi
  echo "$name: $tps tok/s, output $same to one process's"
done

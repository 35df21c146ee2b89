#!/usr/bin/env bash
# The distributed tests that need root and more than CI gives (docs/distributed.md):
#   two-hosts  two "hosts" on this machine: network namespaces joined by a veth
#              pair, each rank under its own hostname and temp dir, Open MPI
#              reaching the second through an rsh agent, over TCP. Data
#              parallelism across them equals one process; a link taken down
#              mid-run ends the job and `tessera launch` restarts it from the
#              newest checkpoint, ending where an uninterrupted run ends.
#   slurm      a local Slurm (munge, slurmctld and slurmd in a temp dir): the
#              same training under `srun --mpi=pmix` through `tessera launch`,
#              and a rank killed mid-run restarted.
#   scripts/test_distributed.sh [two-hosts|slurm|all] [BUILD_DIR]
# Needs: root, iproute2 and util-linux (unshare); slurm: slurm-wlm and munge
# (installed here if missing). Takes about two minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
want=${1:-all}
build=$(realpath "${2:-build}")
T=$build/apps/tessera
[ -x "$T" ] || { echo "test_distributed.sh: build first ($T is missing)"; exit 1; }
[ "$(id -u)" = 0 ] || { echo "test_distributed.sh: run as root (network namespaces, Slurm's daemons)"; exit 1; }
config=$PWD/examples/configs/fashion_mnist_mlp.yaml
work=$(mktemp -d /tmp/tessera-dist-test-XXXXXX)
pids=()
started_slurm=0
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  if [ $started_slurm = 1 ]; then
    scontrol shutdown >/dev/null 2>&1 || true
    pkill -x munged 2>/dev/null || true
  fi
  ip netns del ts-a 2>/dev/null || true
  ip netns del ts-b 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

# A short MLP run; its final weights are compared with python3 (no numpy).
train_args() {  # OUT STEPS
  echo train "$config" --output "$1" --plain --set "train.steps=$2" --set train.checkpoint_every=5 \
    --set train.eval_batches=2 --set train.num_workers=0 --set train.log_every=1 --set train.keep_checkpoints=50
}
compare() {  # RUN_A RUN_B STEP: the largest |a-b| / (1+|a|) over every weight
  python3 - "$1" "$2" "$3" <<'EOF'
import json, struct, sys
def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n)); base = 8 + n; data = f.read()
    out = {}
    for k, v in head.items():
        if k == "__metadata__" or v["dtype"] != "F32": continue
        a, b = v["data_offsets"]
        out[k] = struct.unpack("<%df" % ((b - a) // 4), data[a:b])
    return out
step = "step-%09d" % int(sys.argv[3])
A = load(f"{sys.argv[1]}/checkpoints/{step}/model.safetensors")
B = load(f"{sys.argv[2]}/checkpoints/{step}/model.safetensors")
assert A.keys() == B.keys(), "different tensors"
print(max(abs(x - y) / (1 + abs(x)) for k in A for x, y in zip(A[k], B[k])))
EOF
}
# A field of a rank's status record (include/tessera/distributed/status.h): step at byte 80 (i64), pid at 12 (i32).
record_field() { [ -f "$1" ] && od -An -t "$3" -j "$2" -N "${3#d}" "$1" 2>/dev/null | tr -d ' ' || true; }
within() { python3 -c "import sys; sys.exit(0 if float('$1') < float('$2') else 1)"; }

echo "== reference: one process"
# shellcheck disable=SC2046
OMP_NUM_THREADS=1 "$T" $(train_args "$work/one" 20) >"$work/one.log" 2>&1 || { cat "$work/one.log"; fail "one process"; }

two_hosts() {
  echo "== two hosts: network namespaces ts-a (10.77.0.1) and ts-b (10.77.0.2)"
  ip netns add ts-a
  ip netns add ts-b
  ip link add ts-va type veth peer name ts-vb
  ip link set ts-va netns ts-a
  ip link set ts-vb netns ts-b
  ip -n ts-a addr add 10.77.0.1/24 dev ts-va
  ip -n ts-b addr add 10.77.0.2/24 dev ts-vb
  for ns in ts-a ts-b; do ip -n $ns link set lo up; done
  ip -n ts-a link set ts-va up
  ip -n ts-b link set ts-vb up
  mkdir -p "$work/host-a" "$work/host-b"
  printf '10.77.0.1 slots=2\n10.77.0.2 slots=2\n' >"$work/hosts"
  # Open MPI's rsh agent: "agent HOST COMMAND..." runs COMMAND on that "host".
  cat >"$work/agent" <<EOF
#!/usr/bin/env bash
host=\$1; shift
case \$host in 10.77.0.1) ns=ts-a name=host-a ;; 10.77.0.2) ns=ts-b name=host-b ;; *) echo "agent: unknown host \$host" >&2; exit 1 ;; esac
exec ip netns exec \$ns unshare --uts bash -c "hostname \$name; export TMPDIR=$work/\$name; \$*"
EOF
  chmod +x "$work/agent"
  on_host_a() {  # runs a command as host-a
    ip netns exec ts-a unshare --uts env OMPI_MCA_plm_rsh_agent="$work/agent" OMPI_MCA_btl=self,vader,tcp \
      OMPI_MCA_btl_tcp_if_include=10.77.0.0/24 OMPI_MCA_oob_tcp_if_include=10.77.0.0/24 TMPDIR="$work/host-a" \
      TESSERA_DIST_TIMEOUT=10 bash -c "hostname host-a; $*"
  }
  echo "-- data parallel over 4 ranks on two hosts equals one process"
  on_host_a "$T launch -n 4 --hostfile $work/hosts -- tessera $(train_args "$work/two" 20)" >"$work/two.log" 2>&1 ||
    { cat "$work/two.log"; fail "training across two hosts"; }
  grep -q "data parallel over 4 ranks" "$work/two.log" || fail "not 4 ranks"
  d=$(compare "$work/one" "$work/two" 20)
  within "$d" 1e-5 || fail "two hosts differ from one process by $d"
  echo "   weights within $d of one process"

  echo "-- the link cut mid-run: the job ends, the launcher restarts it, the run ends the same"
  mkdir -p "$work/status"
  on_host_a "TESSERA_DIST_STATUS_DIR=$work/status $T launch -n 4 --hostfile $work/hosts --max-restarts 1 \
    --kill-timeout 10 --restart-delay 8 -- tessera $(train_args "$work/cut" 20) --set train.log_every=1" \
    >"$work/cut.log" 2>&1 &
  local launcher=$!
  pids+=("$launcher")
  # Rank 2 runs on host-b: cut the link once its record shows step 12.
  for _ in $(seq 1 600); do
    step=$(record_field "$work/status/rank-2.status" 80 d8)
    [ -n "$step" ] && [ "$step" -ge 12 ] && break
    sleep 0.01
  done
  ip -n ts-b link set ts-vb down
  echo "   link down at rank 2's step ${step:-?}"
  for _ in $(seq 1 120); do grep -q "restarting from the newest checkpoint" "$work/cut.log" && break; sleep 1; done
  grep -q "restarting from the newest checkpoint" "$work/cut.log" || { cat "$work/cut.log"; fail "no restart after the cut"; }
  ip -n ts-b link set ts-vb up
  echo "   the job ended; link up again"
  wait "$launcher" || { cat "$work/cut.log"; fail "the restarted job failed"; }
  grep -q "resumed at step" "$work/cut.log" || fail "the restart did not resume"
  d=$(compare "$work/one" "$work/cut" 20)
  within "$d" 1e-5 || fail "the restarted run differs by $d"
  echo "   $(grep -o 'resumed at step [0-9]*' "$work/cut.log" | head -1); weights within $d of one process"
}

slurm() {
  echo "== Slurm: munge, slurmctld and slurmd in $work/slurm"
  for p in slurm-wlm munge; do dpkg -s $p >/dev/null 2>&1 || need+=" $p"; done
  if [ -n "${need:-}" ]; then apt-get install -y -qq --no-install-recommends $need >/dev/null; fi
  local s=$work/slurm
  mkdir -p "$s/spool" "$s/state" "$s/log"
  cat >"$s/slurm.conf" <<EOF
ClusterName=tessera
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$s/state
SlurmdSpoolDir=$s/spool
SlurmctldPidFile=$s/slurmctld.pid
SlurmdPidFile=$s/slurmd.pid
SlurmctldLogFile=$s/log/slurmctld.log
SlurmdLogFile=$s/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SlurmdParameters=config_overrides
MpiDefault=pmix
ReturnToService=2
NodeName=localhost CPUs=4 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
  export SLURM_CONF=$s/slurm.conf
  mkdir -p /run/munge /etc/munge
  [ -f /etc/munge/munge.key ] || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null
  chmod 400 /etc/munge/munge.key
  started_slurm=1
  munged --force 2>/dev/null
  slurmctld
  slurmd
  for _ in $(seq 1 30); do sinfo -h -o %T 2>/dev/null | grep -q idle && break; sleep 1; done
  sinfo -h -o %T | grep -q idle || fail "Slurm did not come up: $(cat "$s"/log/*.log | tail -20)"
  echo "-- data parallel over 4 ranks under srun equals one process"
  salloc -n 4 --overcommit "$T" launch -n 4 -- tessera $(train_args "$work/slurm-run" 20) >"$work/slurm.log" 2>&1 ||
    { cat "$work/slurm.log"; fail "training under Slurm"; }
  grep -q "launch: 4 ranks in the Slurm allocation with srun" "$work/slurm.log" || { cat "$work/slurm.log"; fail "not srun"; }
  grep -q "data parallel over 4 ranks" "$work/slurm.log" || { cat "$work/slurm.log"; fail "not 4 ranks under srun"; }
  d=$(compare "$work/one" "$work/slurm-run" 20)
  within "$d" 1e-5 || fail "Slurm run differs by $d"
  echo "   weights within $d of one process"

  echo "-- examples/slurm/train.sbatch under sbatch"
  TESSERA=$T sbatch --wait --overcommit -o "$work/sbatch.log" examples/slurm/train.sbatch "$config" \
    $(train_args "$work/sbatch-run" 20 | cut -d' ' -f3-) >/dev/null || { cat "$work/sbatch.log"; fail "sbatch"; }
  d=$(compare "$work/one" "$work/sbatch-run" 20)
  within "$d" 1e-5 || fail "the sbatch run differs by $d"
  echo "   weights within $d of one process"

  echo "-- rank 1 killed at step 12 of 200 under srun: restarted from the newest checkpoint, the run ends the same"
  # shellcheck disable=SC2046
  OMP_NUM_THREADS=1 "$T" $(train_args "$work/one200" 200) >"$work/one200.log" 2>&1 || fail "one process, 200 steps"
  mkdir -p "$work/slurm-status"
  TESSERA_DIST_STATUS_DIR=$work/slurm-status salloc -n 4 --overcommit "$T" launch -n 4 --max-restarts 1 \
    -- tessera $(train_args "$work/slurm-kill" 200) >"$work/slurm-kill.log" 2>&1 &
  local launcher=$!
  pids+=("$launcher")
  killed=""
  for _ in $(seq 1 1200); do
    step=$(record_field "$work/slurm-status/rank-1.status" 80 d8)
    pid=$(record_field "$work/slurm-status/rank-1.status" 12 d4)
    # A live rank (a finished one lingers as a zombie until srun reaps it).
    if [ -n "${step:-}" ] && [ "$step" -ge 12 ] && [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]; then
      kill -9 "$pid" && killed=$step
      break
    fi
    sleep 0.01
  done
  [ -n "$killed" ] || fail "rank 1 never reached step 12"
  wait "$launcher" || { cat "$work/slurm-kill.log"; fail "the restarted job failed"; }
  grep -q "restart 1 of 1" "$work/slurm-kill.log" || { grep -v "step" "$work/slurm-kill.log" | head -60; fail "no restart"; }
  d=$(compare "$work/one200" "$work/slurm-kill" 200)
  within "$d" 1e-5 || fail "the restarted Slurm run differs by $d"
  grep -E "^launch|srun: error: .*task" "$work/slurm-kill.log" | sed "s/^/   /"
  echo "   killed when its record showed step $killed (the kill lands a few steps later); $(grep -o 'resumed at step [0-9]*' "$work/slurm-kill.log" | head -1); weights within $d"
}

case $want in
  two-hosts) two_hosts ;;
  slurm) slurm ;;
  all) two_hosts; slurm ;;
  *) echo "usage: $0 [two-hosts|slurm|all] [BUILD_DIR]"; exit 2 ;;
esac
echo "test_distributed.sh: passed"

#!/usr/bin/env bash
# A real single-node Slurm (munged, slurmctld and slurmd from Debian, configured here in a scratch
# directory, stopped by pid at the end) and ltrain under it as users run it:
#   1. srun --ntasks=2 ltrain train ...: two ranks that find each other from Slurm's own variables
#      (SLURM_STEP_TASKS_PER_NODE, not SLURM_NTASKS_PER_NODE, which srun leaves unset here), one
#      intra-op thread each on this 2-CPU node, and a logs/rank_N.log per rank;
#   2. sbatch --wait scripts/slurm/train.sbatch: the example script trains to completion;
#   3. scancel --signal=TERM on a running sbatch job: it checkpoints and stops (exit 143), and the
#      same sbatch again resumes and completes.
# Exit 77 (CTest: skipped) with the reason when the daemons cannot start here.
#   tests/slurm/real_slurm_test.sh LTRAIN_BINARY SOURCE_DIR
set -uo pipefail
bin=${1:?usage: real_slurm_test.sh LTRAIN_BINARY SOURCE_DIR}
src=${2:?usage: real_slurm_test.sh LTRAIN_BINARY SOURCE_DIR}
work=$(mktemp -d /tmp/ltrain-slurm-XXXXXX)
passed=0 failed=0
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null
  done
  [ -n "${LTRAIN_KEEP_SLURM_TEST:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
skip() { echo "SKIPPED: $*"; exit 77; }
check() {  # check NAME COMMAND...
  local name=$1; shift
  if "$@"; then passed=$((passed + 1)); echo "ok: $name"; else failed=$((failed + 1)); echo "FAILED: $name"; fi
}

for t in munged slurmctld slurmd srun sbatch scancel squeue; do
  command -v "$t" >/dev/null || skip "$t is not installed (scripts/setup.sh installs slurm-wlm and munge)"
done
[ "$(id -u)" -eq 0 ] || skip "the daemons are started as root here, and this is not root"
host=$(hostname -s)
port=$((20000 + $$ % 20000))
mkdir -p "$work"/{state,spool,munge}
cp /etc/munge/munge.key "$work/munge/key" 2>/dev/null || skip "no /etc/munge/munge.key"
chmod 600 "$work/munge/key"
cat >"$work/slurm.conf" <<CONF
ClusterName=ltrain-test
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
AuthInfo=socket=$work/munge/socket
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=$host CPUs=$(nproc) State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$work/slurm.conf
munged -f --key-file="$work/munge/key" --socket="$work/munge/socket" \
  --pid-file="$work/munge/pid" --log-file="$work/munge/log" --seed-file="$work/munge/seed" ||
  skip "munged would not start"
pids+=("$(cat "$work/munge/pid")")
setsid slurmctld -D -i >"$work/slurmctld.out" 2>&1 &
pids+=($!)
sleep 1
setsid slurmd -D >"$work/slurmd.out" 2>&1 &
pids+=($!)
for _ in $(seq 100); do sinfo -h -o %T 2>/dev/null | grep -q idle && break; sleep 0.1; done
sinfo -h -o %T 2>/dev/null | grep -q idle || { tail -5 "$work"/slurm*.out; skip "slurmctld/slurmd did not come up"; }
echo "slurm up on $host (port $port)"

cat >"$work/c.yaml" <<'YAML'
data: {dataset: synthetic, synthetic_shape: [1, 6, 6], synthetic_train_samples: 640,
       synthetic_test_samples: 64, batch_size: 16}
model: {hidden: [16]}
train: {epochs: 2, log_every: 5}
YAML
cd "$work"

# 1. srun --ntasks=2, no ltrain launcher.
timeout 120 srun --ntasks=2 "$bin" train c.yaml --output-dir srun-run >srun.out 2>&1
rc=$?
check "srun --ntasks=2 trains (exit $rc)" test $rc -eq 0
check "two ranks, one node: world 2" grep -q '"world_size":2' srun-run/summary.json
check "each rank one intra-op thread on 2 CPUs" grep -q "2 process(es) of 1 thread(s)" srun.out
check "each rank says its rank" grep -q "^\[rank 0\] " srun.out
check "logs/rank_0.log and rank_1.log" test -s srun-run/logs/rank_0.log -a -e srun-run/logs/rank_1.log
check "the store listened on the job's own host only" bash -c "! grep -q 'listens on all' srun.out"

# 2. sbatch --wait of the example script.
export LTRAIN_BIN=$bin LTRAIN_NPROC=2
LTRAIN_OUTPUT_DIR=$work/sbatch-run timeout 180 sbatch --wait -o sbatch.out \
  "$src/scripts/slurm/train.sbatch" c.yaml >/dev/null 2>&1
rc=$?
check "sbatch --wait of train.sbatch completes (exit $rc)" test $rc -eq 0
check "its summary says completed" grep -q '"status":"completed"' sbatch-run/summary.json

# 3. Preempted with scancel --signal=TERM, resumed by the same sbatch. Long enough (40000 steps,
# several seconds) that the signal lands mid-run on a fast machine too: 64000 examples once
# finished in under a second, before it.
long=(c.yaml data.synthetic_train_samples=1280000 train.epochs=1 train.checkpoint_every=100000)
LTRAIN_OUTPUT_DIR=$work/pre-run sbatch -o pre1.out "$src/scripts/slurm/train.sbatch" \
  "${long[@]}" >job.txt 2>&1
job=$(grep -o '[0-9]\+' job.txt | tail -1)
for _ in $(seq 300); do [ -s pre-run/metrics.jsonl ] && break; sleep 0.1; done
sleep 0.5
scancel --signal=TERM "$job"  # the job's steps: srun's agent, which stops its workers
for _ in $(seq 300); do squeue -h -j "$job" 2>/dev/null | grep -q . || break; sleep 0.2; done
check "SIGTERM: rank 0 checkpointed" bash -c "ls pre-run/checkpoints/step-*.pt >/dev/null 2>&1"
check "SIGTERM: summary says interrupted" grep -q '"status":"interrupted"' pre-run/summary.json
LTRAIN_OUTPUT_DIR=$work/pre-run timeout 300 sbatch --wait -o pre2.out \
  "$src/scripts/slurm/train.sbatch" "${long[@]}" >/dev/null 2>&1
rc=$?
check "the same sbatch resumes and completes (exit $rc)" test $rc -eq 0
check "it resumed" grep -q "resuming from" pre2.out
check "completed" grep -q '"status":"completed"' pre-run/summary.json

[ $failed -gt 0 ] && for f in srun.out sbatch.out pre1.out pre2.out; do echo "--- $f"; tail -15 "$f" 2>/dev/null; done
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]

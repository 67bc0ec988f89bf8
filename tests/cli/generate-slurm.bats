#!/usr/bin/env bats
# generate --batch on a real Slurm: a one-node cluster (munged, slurmctld,
# slurmd on localhost, configured in the test's temporary folder, with its
# own key, socket, ports and state) runs the array job script of
# man/generate.1 (SCALING OUT), taken from the page as it stands, with 4
# tasks on the tiny fixture model; task 2 is killed with SIGKILL half way
# through its shard and the array is submitted again; the merged results
# equal a one-process run, request for request.  All daemons and jobs are
# stopped in teardown, also after a failure.
#
# Skipped, with one line, where Slurm cannot run here (not root, packages
# missing, daemons that do not start); with CI=true that is a failure.

load common

TINY="$TOP/tests/fixtures/tiny-llama-f16.gguf"

# no_slurm REASON : skip, or fail under CI
no_slurm() {
    if [ "${CI:-}" = true ]; then
        echo "slurm: $1 (CI=true: this test must run, not skip)"
        return 1
    fi
    skip "slurm: $1"
}

# free_ports N : N TCP ports free on 127.0.0.1 now
free_ports() {
    python3 - "$1" <<'EOF'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

node_idle() {
    [ "$(sinfo -h -n llmkit0 -o %t 2>/dev/null)" = idle ]
}

# task_state JOB_TASK : the JobState scontrol reports (empty when unknown)
task_state() {
    scontrol -o show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | head -n 1 | cut -d= -f2
}

# task_ended JOB_TASK : ended, and its processes gone (no longer in the
# queue, where it stays while COMPLETING)
task_ended() {
    case $(task_state "$1") in
    COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | PREEMPTED) ;;
    *) return 1 ;;
    esac
    [ -z "$(squeue -h -j "$1" -o %i 2>/dev/null)" ]
}

queue_empty() {
    [ -z "$(squeue -h -o %i 2>/dev/null)" ]
}

# slurm_start : munged, slurmctld and slurmd in $S, the node idle;
# SLURM_CONF exported for sbatch, squeue, scontrol and scancel
slurm_start() {
    local b p1 p2 host
    [ "$(id -u)" = 0 ] || no_slurm "needs root (slurmd starts jobs as their user)"
    for b in munged slurmctld slurmd sbatch squeue sinfo scontrol scancel; do
        command -v $b >/dev/null || no_slurm "$b not found (scripts/install-deps installs slurm-wlm and munge)"
    done
    S=$BATS_TEST_TMPDIR/slurm
    mkdir -p "$S/munge" "$S/state" "$S/spool" "$S/log"
    chmod 700 "$S/munge"
    head -c 1024 /dev/urandom >"$S/munge/munge.key"
    chmod 600 "$S/munge/munge.key"
    munged --force --socket="$S/munge/munge.sock" --key-file="$S/munge/munge.key" \
        --log-file="$S/log/munged.log" --pid-file="$S/munge/munged.pid" \
        --seed-file="$S/munge/munged.seed" 2>>"$S/log/munged.log" ||
        no_slurm "munged did not start: $(tail -n 1 "$S/log/munged.log")"
    read -r p1 p2 < <(free_ports 2)
    host=$(hostname -s)
    cat >"$S/slurm.conf" <<EOF
ClusterName=llmkit-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$p1
SlurmdPort=$p2
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$S/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd.log
PlugStackConfig=$S/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
MailProg=/bin/true
SlurmdParameters=config_overrides
NodeName=llmkit0 NodeHostname=$host NodeAddr=127.0.0.1 CPUs=16 RealMemory=65536 State=UNKNOWN
PartitionName=test Nodes=llmkit0 Default=YES MaxTime=INFINITE State=UP
EOF
    : >"$S/plugstack.conf"
    export SLURM_CONF=$S/slurm.conf
    slurmctld -f "$SLURM_CONF" 2>>"$S/log/slurmctld.log" ||
        no_slurm "slurmctld did not start: $(tail -n 1 "$S/log/slurmctld.log")"
    slurmd -f "$SLURM_CONF" -N llmkit0 2>>"$S/log/slurmd.log" ||
        no_slurm "slurmd did not start: $(tail -n 1 "$S/log/slurmd.log")"
    wait_until 60 "idle Slurm node" node_idle >/dev/null ||
        no_slurm "the node did not come up: $(tail -n 1 "$S/log/slurmd.log")"
}

# stop PIDFILE : TERM, then KILL after 10 s, the process the file names
stop() {
    local pid i
    [ -s "$1" ] || return 0
    pid=$(cat "$1")
    kill -TERM "$pid" 2>/dev/null || return 0
    for ((i = 0; i < 200; i++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.05
    done
    kill -KILL "$pid" 2>/dev/null || true
}

slurm_stop() {
    [ -n "${S:-}" ] || return 0
    if [ -s "$S/slurmctld.pid" ]; then
        # the jobs first, so that no job step outlives its slurmd
        scancel --signal=KILL --full --user="$(id -un)" 2>/dev/null || true
        scancel --user="$(id -un)" 2>/dev/null || true
        wait_until 30 "empty queue" queue_empty >/dev/null || true
    fi
    stop "$S/slurmd.pid"
    stop "$S/slurmctld.pid"
    stop "$S/munge/munged.pid"
}

teardown() {
    slurm_stop
}

@test "Slurm: the man page's array job, a task killed and resubmitted, merged = one run" {
    slurm_start
    cd "$BATS_TEST_TMPDIR"
    # the script exactly as man/generate.1 shows it
    sed -n '/^\.\\" begin slurm-array-job$/,/^\.\\" end slurm-array-job$/p' "$TOP/man/generate.1" |
        sed -e '/^\.\\"/d' -e '/^\.Bd /d' -e '/^\.Ed$/d' -e 's/\\e/\\/g' >llm-batch.sh
    [ "$(head -n 1 llm-batch.sh)" = '#!/bin/sh' ]
    grep -q -- '^#SBATCH --array=0-3$' llm-batch.sh
    grep -q -- '--shard "$SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT"' llm-batch.sh
    run -1 grep -q '^\.' llm-batch.sh
    sh -n llm-batch.sh
    # the installed name
    mkdir bin
    ln -s "$LLMKIT_BIN/generate" bin/llm-generate
    export PATH="$PWD/bin:$PATH"
    # half greedy, half sampled with a seed of their own
    mkreqs 64 plain.jsonl
    jq -c '(.id | ltrimstr("r") | tonumber) as $k |
        if $k % 2 == 0 then .temperature = 0 else .temperature = 0.8 | .seed = $k * 7 end' \
        plain.jsonl >req.jsonl
    generate -q -m "$TINY" --batch req.jsonl -o single.jsonl
    results_by_line single.jsonl >want.txt
    export MODEL=$TINY RESULTS=$PWD/results
    # the script's node-local copy of the model goes under here (a killed
    # task leaves it behind)
    mkdir node-tmp
    export TMPDIR=$PWD/node-tmp

    # First submission.  The tasks read a FIFO and run one at a time (%1 on
    # the command line; the script is unchanged), so that each gets the
    # requests from here, and task 2 can be held with only part of them:
    # the first 19 lines hold its first 5 requests (k = 2, 6, 10, 14, 18),
    # and once their results are in its file it has read every line given
    # and waits for more; it is killed there.  The FIFO stays open from
    # here (fd 7, read-write: never blocks) until a task has had all its
    # input, and is closed then: the task sees the end of its input.
    mkfifo in.fifo
    export REQUESTS=$PWD/in.fifo
    job=$(sbatch --parsable --array=0-3%1 llm-batch.sh)
    exec 7<>in.fifo
    for t in 0 1 2 3; do
        if [ $t = 2 ]; then
            head -n 19 req.jsonl >&7
            wait_until 120 "5 results from task 2" has_lines results/results.2.jsonl 5
            # SIGKILL to the task's processes (the shell and llm-generate),
            # by their ids: scancel would cancel the job, which sends TERM
            # first, and llm-generate would drain and end cleanly
            id=$(squeue -h -j "${job}_2" -o %A)
            pids=$(scontrol listpids "$id" | awk 'NR > 1 && $1 ~ /^[0-9]+$/ { print $1 }')
            [ -n "$pids" ]
            echo "task 2 = job $id, processes $pids"
            kill -KILL $pids
            # the FIFO stays open, empty, for task 3, which cannot start
            # reading before task 2 is gone
            wait_until 60 "the end of task 2" task_ended "${job}_2"
            continue
        fi
        cat req.jsonl >&7
        wait_until 120 "16 results from task $t" has_lines results/results.$t.jsonl 16
        exec 7>&-
        wait_until 60 "the end of task $t" task_ended "${job}_$t"
        [ $t = 3 ] || exec 7<>in.fifo
    done
    for t in 0 1 3; do
        [ "$(task_state "${job}_$t")" = COMPLETED ]
    done
    [ "$(task_state "${job}_2")" != COMPLETED ]
    [ "$(wc -l <results/results.2.jsonl)" -eq 5 ]
    # killed: no statistics at the end
    run -1 grep -q "requests" llm-batch-${job}_2.log
    # and as if its node had died while writing a line
    printf '{"schema":"generate/1","type":"completion","id":"r4' >>results/results.2.jsonl
    md5sum results/results.[013].jsonl >done.md5

    # Second submission: the script as it is, all 4 tasks, the request file
    export REQUESTS=$PWD/req.jsonl
    run -0 timeout 300 sbatch --parsable --wait llm-batch.sh
    job2=${output##*$'\n'}
    for t in 0 1 2 3; do
        [ "$(task_state "${job2}_$t")" = COMPLETED ]
    done
    md5sum -c --quiet done.md5
    grep -q "cut off its torn last line" llm-batch-${job2}_2.log
    grep -q "16 requests (48 more in other shards): 11 completed, 0 errors, 5 done before" \
        llm-batch-${job2}_2.log
    grep -q "0 completed, 0 errors, 16 done before" llm-batch-${job2}_0.log

    run -0 --separate-stderr llm-generate --merge req.jsonl -o all.jsonl results/results.*.jsonl
    [[ "$stderr" == *"64 requests, 64 results (0 errors) from 4 files"* ]]
    results_by_line all.jsonl | diff want.txt -
}

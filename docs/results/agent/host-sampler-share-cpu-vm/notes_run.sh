# The node host sampler's reads beside a traced job, before and after sharing it with the job.
# Run from the repo root with /tmp/agentcut-before and /tmp/agentcut-after holding the two stackscope-agent binaries (and
# the before stackscope), LD_LIBRARY_PATH at the fake NVML (build/tests/progs/fake_nvml) so the job leaves the idle schedule.
set -u
cp workloads/cpu_train.py /tmp/notesjob_agentcut.py
for label in before after; do
  data=/tmp/agentcut-notes-$label; rm -rf $data; mkdir -p $data
  /tmp/agentcut-$label/stackscope-agent agent --data-dir $data --listen 127.0.0.1:0 --set discovery.command_filter=notesjob_agentcut >$data.log 2>&1 &
  a=$!
  sleep 5
  /usr/bin/python3 /tmp/notesjob_agentcut.py --seconds 50 >/dev/null 2>&1 &
  j=$!
  sleep 20
  echo "$label ss-procfs threads during the job: $(cat /proc/$a/task/*/comm | grep -c '^ss-procfs$')"
  sleep 20
  kill $j; wait $j 2>/dev/null
  sleep 3
  kill -TERM $a; wait $a
  for f in $(find $data/node -name '*.sdb' | sort); do
    /tmp/agentcut-before/stackscope info --json $f | python3 -c '
import json,sys
for n in json.load(sys.stdin).get("notes",[]):
    if n.get("source")=="procfs" and "host families" in n["text"]: print(sys.argv[1], n["text"])' $label
  done
done

#!/usr/bin/env bash
# Session 9, GPU step F (2 GPUs): stragglers from real 2-rank NCCL recordings with the new step detection
# (eval/stragglers/gpu_ddp.sh, 2 runs per class, 600 steps), then the node agent beside a 2-rank DDP job
# (bench/agent/gpu_agent.sh: CPU, RSS, scrape time).
set -u
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
timeout 280 bash eval/stragglers/gpu_ddp.sh $OUT/strag 2 600 4 > $OUT/strag.log 2>&1
cat $OUT/strag/score.txt 2>/dev/null | head -30
rm -rf $OUT/strag/reports/*.info.txt
IDLE_S=30 JOB_S=60 OUT=$OUT/agent timeout 250 bash bench/agent/gpu_agent.sh > $OUT/agent.log 2>&1
tail -30 $OUT/agent.log

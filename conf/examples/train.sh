#!/bin/bash
#SBATCH -J train
#SBATCH --gres=gpu:1
#SBATCH -t 10
# An array task of the README's tour: one GPU each, its index from SLURM_ARRAY_TASK_ID.
echo "task ${SLURM_ARRAY_TASK_ID:-none} of job ${SLURM_ARRAY_JOB_ID:-$SLURM_JOB_ID} on $(hostname)"
echo "GPUs: $CUDA_VISIBLE_DEVICES"
sleep 20

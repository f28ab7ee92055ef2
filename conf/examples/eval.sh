#!/bin/bash
#SBATCH --gres=gpu:1
#SBATCH -t 5
# The README's tour runs this after every task of train.sh ended well (--dependency=afterok).
echo "evaluating on $(hostname), GPUs: $CUDA_VISIBLE_DEVICES"

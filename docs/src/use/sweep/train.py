"""A sweep trial with a known optimum: the loss is lowest at lr = 0.01 and
3 layers. W&B's default command runs it as `train.py --layers=3 --lr=0.01`."""

import argparse
import math
import time

import gpuplane

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, required=True)
parser.add_argument("--layers", type=int, required=True)
args = parser.parse_args()

run = gpuplane.init()
gap = (math.log10(args.lr) + 2) ** 2 + 0.1 * (args.layers - 3) ** 2
for step in range(1, 21):
    run.log({"loss": gap + 1.0 / step}, step=step)
    time.sleep(0.05)
run.finish()

#!/usr/bin/env bash
# tests/models_recipe_test.sh - the seed recipes of recipes/ (resnet50_imagenet,
# efficientnet_b4, bert_large, swin_b) parse, validate and train a few steps at
# reduced size through `ctrain train --recipe R --set ...`: every key of the
# recipe stays (optimizer, schedule with warm-up epochs, label smoothing,
# precision and loss scaling, accumulation), only the size and the data change.
# The image recipes read an ImageFolder at data/imagenet (RandomResizedCrop +
# flip, ImageNet's mean/std); here they run on a 64-image Fashion-MNIST PNG
# folder (scripts/export_imagefolder.py, 3x32x32) with widths / 16, one block
# per stage (resnet: the CIFAR stem), swin_b at its 224x224 input. Also the
# Fashion-MNIST recipes of examples/fashion_vision.sh and Swin's window key.
# usage: tests/models_recipe_test.sh path/to/ctrain
set -u
CT=${1:-build/ctrain}
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ ! -f data/mnist/train-images-idx3-ubyte ] || [ ! -f data/text/moby-dick.txt ]; then
  bad data_missing "data/mnist or data/text/moby-dick.txt is missing: run scripts/setup.sh"
  summary "models recipes"
  exit 1
fi
mnist_subset "$tmp/mn" train 64
mnist_subset "$tmp/mn" t10k 16
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
if ! $PY scripts/export_imagefolder.py --out "$tmp/fm" --train-count 64 --val-count 40 > "$tmp/export.log" 2>&1; then
  bad export_imagefolder "$(cat "$tmp/export.log")"
fi
small=(--set data_dir="$tmp/fm" --set image_size=32 --set resize_size=0 --set width_div=16 --set max_blocks=1
       --set batch_size=8 --set epochs=2 --threads 2)
# resnet50: SGD + linear LR scaling, 5 warm-up epochs (of 2 steps here: 64 images / 8 / accumulate 4) then cosine,
# label smoothing, BF16 autocast, accumulation with bn_stats_once; a checkpoint at the end
expect resnet50_imagenet 0 "resnet50 on .*precision bf16.*done: 4 steps.*test accuracy" -- \
  "$CT" train --recipe recipes/resnet50_imagenet.json "${small[@]}" --set cifar_stem=true --set save_dir="$tmp/r50"
[ -f "$tmp/r50/latest" ] || ls "$tmp/r50" | grep -q step && ok resnet50_checkpoint || bad resnet50_checkpoint "$(ls -R "$tmp/r50" 2>&1)"
# the recipe key channels_last (default true) reaches the ResNet: its convolutions on (N, H, W, C) maps, or NCHW
gsmall=("${small[@]:0:12}") # small's model and data keys (graph takes no --threads)
expect resnet50_channels_last 0 "conv2d +conv1 +\[8, 32, 32, 4\]" -- \
  "$CT" graph --recipe recipes/resnet50_imagenet.json "${gsmall[@]}" --set cifar_stem=true
expect resnet50_nchw 0 "conv2d +conv1 +\[8, 4, 32, 32\]" -- \
  "$CT" graph --recipe recipes/resnet50_imagenet.json "${gsmall[@]}" --set cifar_stem=true --set channels_last=false
expect resume_keeps_width 1 "--resume: this run's model .*width_div 8.* differs from the checkpoint's .*width_div 16" -- \
  "$CT" train --resume "$tmp/r50" --set width_div=8
# efficientnet_b4: RMSprop, FP16 with the dynamic loss scaler, stochastic depth 0.2, dropout 0.4, prefetch 4
expect efficientnet_b4 0 "efficientnet_b4 on .*precision fp16.*dynamic.*done: 16 steps.*test accuracy" -- \
  "$CT" train --recipe recipes/efficientnet_b4.json "${small[@]}" --set save_dir=
# channels_last reaches the EfficientNet too: the stem convolution on (N, H, W, C), or NCHW
expect efficientnet_channels_last 0 "conv2d +features\.0\.0 +\[8, 16, 16, 8\]" -- \
  "$CT" graph --recipe recipes/efficientnet_b4.json "${gsmall[@]}"
expect efficientnet_nchw 0 "conv2d +features\.0\.0 +\[8, 8, 16, 16\]" -- \
  "$CT" graph --recipe recipes/efficientnet_b4.json "${gsmall[@]}" --set channels_last=false
# bert_large: LAMB, BF16 autocast, accumulation; 2 layers of width 64 instead of 24 of 1024
expect bert_large 0 "bert \(2 layers.*precision bf16.*done: 2 steps" -- \
  "$CT" train --recipe recipes/bert_large.json --set n_layer=2 --set n_head=2 --set d_model=64 --set context=32 \
  --set batch_size=2 --set accumulate_steps=2 --set max_steps=2 --set eval_every=2 --set eval_batches=1 \
  --set warmup_steps=1 --set save_dir= --threads 2
# a preset's name is a model: "model": "bert-large" is bert with its preset bert-large (16 heads, d_model 1024; the
# README and recipes/bert_large.json name it), 2 of its 24 layers here
printf '{"model": "bert-large", "dataset": "moby-dick"}\n' > "$tmp/bert_large_name.json"
expect model_is_a_preset_name 0 "bert \(2 layers, 16 heads, d_model 1024.*\"preset\":\"bert-large\".*done: 2 steps" -- \
  "$CT" train --recipe "$tmp/bert_large_name.json" --set n_layer=2 --set context=32 --set batch_size=2 \
  --set max_steps=2 --set eval_every=2 --set eval_batches=1 --set save_dir= --threads 2
# swin_b: AdamW, 20 warm-up epochs + cosine to min_lr, clipping, BF16 (its drop path declines BF16 I/O: it ran on
# BF16 data as FP32 and gave NaN before). At 32x32 its maps (8x8, 4x4, 2x2, 1x1) are padded to the window 7 as
# torchvision pads them; 224x224 (the folder's images resized) needs no padding
expect swin_b_32_padded 0 "swin_b on imagefolder .*3x32x32.*precision bf16.*done: 2 steps.*test accuracy" -- \
  "$CT" train --recipe recipes/swin_b.json "${small[@]}" --set batch_size=4 --set max_steps=2 --set epochs=1 \
  --set save_dir=
expect swin_b 0 "swin_b on imagefolder .*3x224x224.*precision bf16.*done: 2 steps.*test accuracy" -- \
  "$CT" train --recipe recipes/swin_b.json "${small[@]}" --set image_size=224 --set batch_size=4 --set max_steps=2 \
  --set epochs=1 --set save_dir=
# the Fashion-MNIST recipes of examples/fashion_vision.sh (resnet18 with the CIFAR stem, efficientnet_b0, a reduced
# swin_t at 64x64 with window 2): two steps each on the small folder, narrower for speed
fm=(--set data_dir="$tmp/fm" --set batch_size=4 --set max_steps=2 --set epochs=1 --set log_every=1 --threads 2)
expect fashion_resnet18 0 "resnet18 on imagefolder .*3x32x32.*done: 8 steps.*test accuracy" -- \
  "$CT" train --recipe recipes/fashion_resnet18.json "${fm[@]}" --set width_div=16 --set max_steps=8 --set log_every=4
expect fashion_efficientnet_b0 0 "efficientnet_b0 on imagefolder .*3x32x32.*done: 2 steps.*test accuracy" -- \
  "$CT" train --recipe recipes/fashion_efficientnet_b0.json "${fm[@]}" --set width_div=8
expect fashion_swin_t 0 "swin_t on imagefolder .*3x64x64.*done: 2 steps.*test accuracy" -- \
  "$CT" train --recipe recipes/fashion_swin_t.json "${fm[@]}" --set width_div=8
# torchvision's window 7 on the 16x16, 8x8, 4x4, 2x2 maps of 64x64 images: padded to 21x21, 14x14, 7x7, 7x7
expect swin_window_7_padded 0 "swin_t on imagefolder .*3x64x64.*done: 2 steps.*test accuracy" -- \
  "$CT" train --recipe recipes/fashion_swin_t.json "${fm[@]}" --set width_div=8 --set window=0
# the model section of a recipe and its errors
printf '{"model": {"type": "resnet18", "cifar_stem": true, "width_div": 3}}\n' > "$tmp/bad_div.json"
expect width_div_must_divide_64 1 "width_div.*3 does not divide 64" -- "$CT" train --recipe "$tmp/bad_div.json"
printf '{"model": {"type": "efficientnet_b0", "cifar_stem": true}}\n' > "$tmp/bad_stem.json"
expect cifar_stem_is_resnet_only 1 "cifar_stem.*does not apply to model 'efficientnet_b0'" -- "$CT" train --recipe "$tmp/bad_stem.json"
printf '{"model": {"type": "resnet18", "depth": 3}}\n' > "$tmp/bad_key.json"
expect unknown_model_key 1 "unknown recipe key 'model.depth'" -- "$CT" train --recipe "$tmp/bad_key.json"
expect num_classes_too_few 1 "num_classes.*5 is fewer than the dataset's 10" -- \
  "$CT" train --model resnet18 --set num_classes=5 --set width_div=16 --data-dir "$tmp/mn" --batch-size 8 --max-steps 1
# linear (logistic regression), the model added with one line of the model table and src/models/linear.c: a recipe
# trains it on MNIST for 100 steps (about 89% test accuracy), its keys are the image family's only
printf '{"model": "linear", "dataset": "mnist", "batch_size": 64, "epochs": 1, "max_steps": 100,\n "optimizer": {"name": "sgd", "lr": 0.01, "momentum": 0.9}, "schedule": "constant"}\n' > "$tmp/linear.json"
out=$("$CT" train --recipe "$tmp/linear.json" --threads 2 2>&1)
acc=$(printf '%s' "$out" | sed -n 's/^done: 100 steps.*test accuracy \([0-9.]*\)%.*/\1/p')
[ -n "$acc" ] && printf '%s' "$out" | grep -q "linear on mnist (60000 train" && awk "BEGIN{exit !($acc > 85)}" &&
  ok "linear_recipe ($acc% test accuracy)" || bad linear_recipe "$out"
expect linear_no_hidden 1 "recipe key 'hidden' does not apply to model 'linear' \(it applies to mlp\)" -- \
  "$CT" train --recipe "$tmp/linear.json" --hidden 32
summary "models recipes"

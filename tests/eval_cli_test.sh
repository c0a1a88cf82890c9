#!/usr/bin/env bash
# tests/eval_cli_test.sh - `ctrain eval` and `ctrain predict` on image
# checkpoints (ctrain/infer.h). An MLP and a CNN trained for a few steps on a
# 2000 / 500 image MNIST subset, and an MLP on a small Fashion-MNIST PNG image
# folder (scripts/export_imagefolder.py): eval's accuracy equals the test
# accuracy the trainer printed and stored, exactly (the same correct count);
# the 500 test images written as PNG files (28 x 28 gray, and RGB with the gray
# value in each channel; 56 x 56, resized) and predicted one by one give
# eval's confusion matrix exactly; the image folder's class names come from the checkpoint
# (classes.txt: predict needs no data); errors: a GPT checkpoint
# (use ctrain sample), corrupt / missing / non-image files (the other files are
# still predicted, exit 1), a missing dataset, bad flags.
# usage: tests/eval_cli_test.sh path/to/ctrain
set -u
CT=${1:-build/ctrain}
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
PY=python3
command -v $PY > /dev/null || PY=/usr/bin/python3

mnist_subset "$tmp/mn" train 2000
mnist_subset "$tmp/mn" t10k 500

# the IDX test images as PNG files: 8-bit gray (color type 0) and RGB (2), from the standard library only
$PY - "$tmp/mn" "$tmp/png" <<'EOF'
import os, struct, sys, zlib
src, out = sys.argv[1], sys.argv[2]
img = open(os.path.join(src, "t10k-images-idx3-ubyte"), "rb").read()[16:]
lab = open(os.path.join(src, "t10k-labels-idx1-ubyte"), "rb").read()[8:]
def png(rows, w, ctype):
    ch = lambda k, b: struct.pack(">I", len(b)) + k + b + struct.pack(">I", zlib.crc32(k + b) & 0xFFFFFFFF)
    return (b"\x89PNG\r\n\x1a\n" + ch(b"IHDR", struct.pack(">IIBBBBB", w, len(rows), 8, ctype, 0, 0, 0)) +
            ch(b"IDAT", zlib.compress(b"".join(b"\0" + r for r in rows))) + ch(b"IEND", b""))
os.makedirs(out + "/gray"); os.makedirs(out + "/rgb"); os.makedirs(out + "/big")
with open(out + "/labels.txt", "w") as f:
    for i in range(len(lab)):
        rows = [img[i * 784 + y * 28: i * 784 + y * 28 + 28] for y in range(28)]
        open("%s/gray/%03d.png" % (out, i), "wb").write(png(rows, 28, 0))
        if i < 20:
            open("%s/rgb/%03d.png" % (out, i), "wb").write(png([bytes(v for v in r for _ in range(3)) for r in rows], 28, 2))
            big = [bytes(v for v in r for _ in range(2)) for r in rows for _ in range(2)]  # 56 x 56, each pixel 2 x 2
            open("%s/big/%03d.png" % (out, i), "wb").write(png(big, 56, 0))
        f.write("%d\n" % lab[i])
EOF
[ "$(ls "$tmp/png/gray" | wc -l)" -eq 500 ] && ok png_export || bad png_export

# eval's JSON against the trainer: the accuracy stored in the checkpoint (bit for bit), the printed one, the count
check_eval() { # name, train log, eval log, eval json
  local got
  got=$($PY - "$2" "$3" "$4" <<'EOF'
import json, re, sys
tr, ev, js = open(sys.argv[1]).read(), open(sys.argv[2]).read(), json.load(open(sys.argv[3]))
printed = re.search(r"done: .*test accuracy ([0-9.]+)%", tr).group(1)
W = len(js["confusion"])
ok = (js["accuracy"] == js["trained_accuracy"] and js["loss"] == js["trained_loss"] and js["count"] == 500 and
      js["correct"] == round(float(printed) * 5) and "test accuracy %s%% (%d / 500)" % (printed, js["correct"]) in ev
      and sum(map(sum, js["confusion"])) == 500 and sum(js["confusion"][k][k] for k in range(W)) == js["correct"]
      and "(same)" in ev)
print("same" if ok else "differs: trainer %s%%, eval %r / trained %r, count %d" %
      (printed, js["accuracy"], js["trained_accuracy"], js["count"]))
EOF
)
  [ "$got" = same ] && ok "$1" || bad "$1" "$got"
}

# predict on every test PNG: its top-1 per image, counted into a confusion matrix, equals eval's
check_predict() { # name, checkpoint, eval json, dir of PNGs, labels file
  local got
  "$CT" predict --checkpoint "$2" --top-k 1 "$4"/*.png > "$tmp/pred.txt" 2>&1
  got=$($PY - "$3" "$tmp/pred.txt" "$5" <<'EOF'
import json, re, sys
js = json.load(open(sys.argv[1]))
labels = [int(l) for l in open(sys.argv[3])]
top = [int(m.group(1)) for m in re.finditer(r"^ +[0-9.]+%  +([0-9]+)  ", open(sys.argv[2]).read(), re.M)]
W = len(js["confusion"])
conf = [[0] * W for _ in range(W)]
for l, p in zip(labels, top):
    conf[l][p] += 1
print("same" if len(top) == len(labels) and conf == js["confusion"] else
      "differs: %d predictions for %d labels, %s vs eval %s" % (len(top), len(labels), conf, js["confusion"]))
EOF
)
  [ "$got" = same ] && ok "$1" || bad "$1" "$got"
}

MN=(--dataset mnist --data-dir "$tmp/mn" --batch-size 64 --threads 2)
"$CT" train --model mlp --hidden 64 "${MN[@]}" --max-steps 25 --save-dir "$tmp/mlp" > "$tmp/mlp.log" 2>&1 \
  && ok mlp_trains || bad mlp_trains "$(cat "$tmp/mlp.log")"
"$CT" eval --checkpoint "$tmp/mlp" --json "$tmp/mlp.json" > "$tmp/mlp_eval.log" 2>&1 \
  && ok mlp_eval_runs || bad mlp_eval_runs "$(cat "$tmp/mlp_eval.log")"
check_eval mlp_eval_equals_trainer "$tmp/mlp.log" "$tmp/mlp_eval.log" "$tmp/mlp.json"
grep -qE "per-class accuracy:" "$tmp/mlp_eval.log" && grep -qE "^ +7 7 +[0-9.]+%  \([0-9]+ / [0-9]+\)" "$tmp/mlp_eval.log" \
  && grep -q "confusion matrix (rows: true class" "$tmp/mlp_eval.log" && ok mlp_eval_per_class_and_matrix \
  || bad mlp_eval_per_class_and_matrix "$(cat "$tmp/mlp_eval.log")"
check_predict mlp_predict_matches_eval "$tmp/mlp" "$tmp/mlp.json" "$tmp/png/gray" "$tmp/png/labels.txt"
# RGB files of the same images: converted to gray (PIL's L of (v, v, v) is v), the same probabilities
a=$("$CT" predict --checkpoint "$tmp/mlp" "$tmp"/png/gray/00*.png 2>&1 | grep -v png)
b=$("$CT" predict --checkpoint "$tmp/mlp" "$tmp"/png/rgb/00*.png 2>&1 | grep -v png)
[ -n "$a" ] && [ "$a" = "$b" ] && [ "$(printf '%s\n' "$a" | wc -l)" -eq 50 ] && ok predict_rgb_as_gray_top5 \
  || bad predict_rgb_as_gray_top5 "gray: $a / rgb: $b"
# 56 x 56 files: Resize(28) + CenterCrop(28) (bilinear: the mean of each 2 x 2 block, the original pixel)
a=$("$CT" predict --checkpoint "$tmp/mlp" --top-k 1 "$tmp"/png/gray/0[01]*.png 2>&1 | grep -v png | awk '{print $2}')
b=$("$CT" predict --checkpoint "$tmp/mlp" --top-k 1 "$tmp"/png/big/0[01]*.png 2>&1 | grep -v png | awk '{print $2}')
[ -n "$a" ] && [ "$a" = "$b" ] && [ "$(printf '%s\n' "$a" | wc -l)" -eq 20 ] && ok predict_56px_resized_same_top1 \
  || bad predict_56px_resized_same_top1 "28 px: $a / 56 px: $b"
# the same checkpoint through a step directory, --top-k 3
expect predict_step_dir_top3 0 "000.png +[0-9.]+% +[0-9] +[0-9] +[0-9.]+% +[0-9] +[0-9] +[0-9.]+% +[0-9] +[0-9]$" -- \
  "$CT" predict --checkpoint "$tmp/mlp/step-000025" --top-k 3 "$tmp/png/gray/000.png"

"$CT" train --model cnn --channels 8,16 "${MN[@]}" --max-steps 12 --save-dir "$tmp/cnn" > "$tmp/cnn.log" 2>&1 \
  && ok cnn_trains || bad cnn_trains "$(cat "$tmp/cnn.log")"
"$CT" eval --checkpoint "$tmp/cnn" --json "$tmp/cnn.json" > "$tmp/cnn_eval.log" 2>&1 \
  && ok cnn_eval_runs || bad cnn_eval_runs "$(cat "$tmp/cnn_eval.log")"
check_eval cnn_eval_equals_trainer "$tmp/cnn.log" "$tmp/cnn_eval.log" "$tmp/cnn.json"
check_predict cnn_predict_matches_eval "$tmp/cnn" "$tmp/cnn.json" "$tmp/png/gray" "$tmp/png/labels.txt"

# an image folder (RGB PNG, 32 x 32): class names from the checkpoint's classes.txt
if $PY scripts/export_imagefolder.py --out "$tmp/fm" --train-count 300 --val-count 100 > "$tmp/export.log" 2>&1; then
  FM=(--model mlp --hidden 32 --dataset imagefolder --data-dir "$tmp/fm" --batch-size 32 --threads 2)
  "$CT" train "${FM[@]}" --max-steps 8 --set mean=0.286 --set std=0.353 --save-dir "$tmp/fmm" > "$tmp/fm.log" 2>&1
  "$CT" eval --checkpoint "$tmp/fmm" --json "$tmp/fm.json" > "$tmp/fm_eval.log" 2>&1
  $PY - "$tmp/fm.log" "$tmp/fm.json" <<'EOF' && ok folder_eval_equals_trainer || bad folder_eval_equals_trainer "$(cat "$tmp/fm.log" "$tmp/fm_eval.log")"
import json, re, sys
printed = float(re.search(r"done: .*test accuracy ([0-9.]+)%", open(sys.argv[1]).read()).group(1))
js = json.load(open(sys.argv[2]))
sys.exit(not (js["count"] == 100 and js["correct"] == round(printed) and js["accuracy"] == js["trained_accuracy"]
              and js["loss"] == js["trained_loss"] and js["classes"][3] == "3-dress"))
EOF
  # ResNet-50 (batch norm's running statistics, BF16 autocast, accumulation), narrowed: the same loss, bit for bit
  "$CT" train --recipe recipes/resnet50_imagenet.json --set data_dir="$tmp/fm" --set image_size=32 --set resize_size=0 \
    --set width_div=16 --set max_blocks=1 --set batch_size=8 --set epochs=1 --set warmup_epochs=0 --set num_classes=10 \
    --set cifar_stem=true --threads 2 --save-dir "$tmp/r50" > "$tmp/r50.log" 2>&1
  "$CT" eval --checkpoint "$tmp/r50" --json "$tmp/r50.json" > "$tmp/r50_eval.log" 2>&1
  $PY - "$tmp/r50.json" <<'EOF' && ok resnet50_bf16_eval_equals_trainer || bad resnet50_bf16_eval_equals_trainer "$(cat "$tmp/r50.log" "$tmp/r50_eval.log")"
import json, sys
js = json.load(open(sys.argv[1]))
sys.exit(not (js["count"] == 100 and js["loss"] == js["trained_loss"] and js["accuracy"] == js["trained_accuracy"]
              and js["model"] == "resnet50" and len(js["confusion"]) == 10))
EOF
  [ "$(head -n 2 "$tmp/fmm/latest/classes.txt" 2>/dev/null || head -n 2 "$tmp"/fmm/step-*/classes.txt)" = "$(printf '0-t-shirt\n1-trouser')" ] \
    && ok folder_classes_txt_saved || bad folder_classes_txt_saved "$(ls "$tmp"/fmm/step-*)"
  find "$tmp/fm/val" -name '*.png' | sort > "$tmp/fmfiles"
  mkdir -p "$tmp/fmval"
  i=0
  while read -r f; do cp "$f" "$tmp/fmval/$(printf %03d $i).png"; basename "$(dirname "$f")" | cut -d- -f1; i=$((i + 1)); done \
    < "$tmp/fmfiles" > "$tmp/fmlabels"
  mv "$tmp/fm" "$tmp/fm-moved" # predict needs no data: the names are in the checkpoint
  check_predict folder_predict_matches_eval "$tmp/fmm" "$tmp/fm.json" "$tmp/fmval" "$tmp/fmlabels"
  expect folder_predict_class_names 0 "000.png +[0-9.]+% +[0-9] +[0-9]-[a-z-]+ " -- \
    "$CT" predict --checkpoint "$tmp/fmm" "$tmp/fmval/000.png"
else
  bad export_imagefolder "$(cat "$tmp/export.log")"
fi

# errors
head -c 100 "$tmp/png/gray/001.png" > "$tmp/trunc.png"
echo "not an image" > "$tmp/text.png"
expect predict_bad_files_named 1 "002.png.*[0-9.]+%.*trunc.png.*(truncated|not a decodable).*text.png is not a JPEG or PNG image.*give a readable JPEG or PNG.*cannot read image '[^']*nothere.png'" -- \
  "$CT" predict --checkpoint "$tmp/mlp" "$tmp/png/gray/002.png" "$tmp/trunc.png" "$tmp/text.png" "$tmp/nothere.png"
"$CT" train --model gpt --set dataset=moby-dick --set n_layer=1 --set d_model=32 --set n_head=2 --set context=32 \
  --batch-size 4 --max-steps 1 --set eval_every=1 --set eval_batches=1 --threads 2 --save-dir "$tmp/gpt" > "$tmp/gpt.log" 2>&1
expect eval_gpt_says_sample 1 "holds a text model \(gpt\).*ctrain sample" -- "$CT" eval --checkpoint "$tmp/gpt"
expect predict_gpt_says_sample 1 "holds a text model \(gpt\).*ctrain sample" -- \
  "$CT" predict --checkpoint "$tmp/gpt" "$tmp/png/gray/000.png"
expect eval_no_checkpoint 1 "error:.*$tmp/none" -- "$CT" eval --checkpoint "$tmp/none"
expect eval_missing_data 1 "nowhere.*(scripts/setup.sh|data_dir)" -- "$CT" eval --checkpoint "$tmp/mlp" --data-dir "$tmp/nowhere"
expect eval_needs_checkpoint 2 "--checkpoint DIR is required" -- "$CT" eval
expect eval_stray_argument 2 "unexpected argument 'x.png'" -- "$CT" eval --checkpoint "$tmp/mlp" x.png
expect predict_needs_image 2 "no IMAGE given" -- "$CT" predict --checkpoint "$tmp/mlp"
expect predict_bad_top_k 2 "--top-k: '0' must be an integer >= 1" -- "$CT" predict --checkpoint "$tmp/mlp" --top-k 0 a.png
expect help_lists_eval_predict 0 "eval .*confusion matrix.*predict .*top-k classes" -- "$CT" help
expect eval_help 0 "usage: ctrain eval --checkpoint DIR" -- "$CT" eval --help

summary "eval cli"

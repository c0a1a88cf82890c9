#!/usr/bin/env bash
# tests/fuzz/make_corpus.sh - writes the seed corpora tests/fuzz/corpus/<target>/
# from real files: the first image and labels of MNIST's t10k split (plain
# and gzipped), the recipes in recipes/, the GPT-2 files cut to their first
# merges, Moby-Dick, and the metrics log, Chrome trace, weights and train
# states of three short real `ctrain train` runs (SGD; fp16 with a loss
# scale that overflows, AdamW and clipping; plateau schedule with early
# stopping), and small images (tests/fuzz/make_image_corpus.py).
# Hand-written edge cases and the regression inputs of fixed bugs (named
# regress-*) are added beside them. Inputs that libFuzzer found
# and that are worth keeping are merged in by hand (docs/fuzzing.md), so the
# corpus in git is this script's output plus those.
# Needs build/ctrain, data/ (scripts/setup.sh) and python3.
# usage: tests/fuzz/make_corpus.sh [ctrain binary]
set -euo pipefail
cd "$(dirname "$0")/../.."
CT=${1:-build/ctrain}
C=tests/fuzz/corpus
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for t in idx recipe safetensors checkpoint bpe text trace report; do mkdir -p "$C/$t"; done

# ---- three short real runs ------------------------------------------------------------
common=(--max-steps 4 --epochs 1 --batch-size 32 --hidden 1 --threads 1 --quiet)
"$CT" train "${common[@]}" --optimizer sgd --report "$tmp/r1" --set save_dir="$tmp/c1" \
  --set profile_dir="$tmp/p1" > /dev/null
"$CT" train "${common[@]}" --set precision=fp16 --set loss_scale.init_scale=3e38 --set clip_grad_norm=1 \
  --report "$tmp/r2" --set save_dir="$tmp/c2" --set profile_dir="$tmp/p2" > /dev/null
"$CT" train "${common[@]}" --optimizer sgd --momentum 0.9 --schedule plateau --set early_stop_patience=2 \
  --set save_dir="$tmp/c3" > /dev/null
cp "$tmp"/c1/step-000004/train_state.safetensors "$C/checkpoint/sgd.safetensors"
cp "$tmp"/c2/step-000004/train_state.safetensors "$C/checkpoint/fp16-adamw-scaler.safetensors"
cp "$tmp"/c3/step-000004/train_state.safetensors "$C/checkpoint/plateau-early-stop.safetensors"
cp "$tmp"/c1/step-000004/model.safetensors "$C/safetensors/mlp-784-1-10.safetensors"
cp "$tmp"/r1/metrics.jsonl "$C/report/sgd.jsonl"
cp "$tmp"/r2/metrics.jsonl "$C/report/fp16-amp-gradnorm.jsonl"
cp "$tmp"/p1/trace.json "$C/trace/mlp.json"
cp "$tmp"/p2/trace.json "$C/trace/fp16-amp.json"

python3 - "$C" "$tmp" <<'EOF'
import gzip, json, os, re, sys, zlib
C, tmp = sys.argv[1], sys.argv[2]
def put(target, name, data):
    if isinstance(data, str): data = data.encode()
    open(os.path.join(C, target, name), 'wb').write(data)

# ---- IDX: real headers and data, plain and gzipped, and edge cases -------------------------
img = open('data/mnist/t10k-images-idx3-ubyte', 'rb').read()
lab = open('data/mnist/t10k-labels-idx1-ubyte', 'rb').read()
one = img[:4] + (1).to_bytes(4, 'big') + img[8:16] + img[16:16 + 784]
labels = lab[:4] + (100).to_bytes(4, 'big') + lab[8:108]
put('idx', 't10k-images-1.idx', one)
put('idx', 't10k-labels-100.idx', labels)
put('idx', 't10k-images-1.idx.gz', gzip.compress(one, mtime=0))
put('idx', 't10k-labels-100.idx.gz', gzip.compress(labels, mtime=0))
put('idx', 'images-3x4x4.idx', b'\0\0\x08\x03' + b''.join(v.to_bytes(4, 'big') for v in (3, 4, 4)) + bytes(range(48)))
put('idx', 'dims-4.idx', b'\0\0\x08\x04' + b''.join(v.to_bytes(4, 'big') for v in (1, 1, 2, 2)) + b'abcd')
put('idx', 'float32-type.idx', b'\0\0\x0d\x01' + (2).to_bytes(4, 'big') + b'\0' * 8)
put('idx', 'truncated-data.idx', labels[:50])
put('idx', 'promises-1GiB.idx', b'\0\0\x08\x02' + (32768).to_bytes(4, 'big') * 2 + b'x' * 16)
put('idx', 'truncated-gzip.idx.gz', gzip.compress(labels, mtime=0)[:-6])

# ---- recipes ------------------------------------------------------------------------------
for f in sorted(os.listdir('recipes')):
    put('recipe', f, open(os.path.join('recipes', f), 'rb').read())
put('recipe', 'set-lines.txt', 'optimizer.name=sgd\noptimizer.lr=0.05\nhidden=64,32\nmemory_budget=1.5G\n'
    'seed=18000000000000000000\nschedule=multistep\nmilestones=100,200\nprecision=bf16\n')
put('recipe', 'sections.json', '{"model": "cnn", "channels": [8, 16], "optimizer": {"name": "rmsprop", '
    '"centered": true}, "loss_scale": {"mode": "static", "init_scale": 1024}, "memory_budget": "8G"}')
put('recipe', 'wrong-types.json', '{"epochs": "3", "hidden": [64, 1.5], "optimizer": {"nested": {}}}')

# ---- BPE: encoder.json and vocab.bpe cut to the 256 bytes and the first 120 merges ---------
enc = json.load(open('data/text/gpt2/encoder.json', encoding='utf-8'))
merges = open('data/text/gpt2/vocab.bpe', encoding='utf-8').read().split('\n')
keep = 120
small = {k: v for k, v in enc.items() if v < 256 + keep}
enc_text = json.dumps(small, ensure_ascii=True)
bpe_text = '\n'.join(merges[:1 + keep]) + '\n'
moby = open('data/text/moby-dick.txt', 'rb').read()
sample = moby[20000:20400]
put('bpe', 'gpt2-120-merges', enc_text.encode() + b'\0' + bpe_text.encode() + b'\0' + sample)
put('bpe', 'gpt2-unicode-text', enc_text.encode() + b'\0' + bpe_text.encode() + b'\0' +
    "caf\u00e9 na\u00efve \u2014 \U0001F600 it's we've 123 \t\n  x\n".encode() + b'\xff\xfe\xc3')
put('bpe', 'duplicate-key', b'{"a": 0, "a": 1}\0a a\n\0a')
put('bpe', 'merge-3-symbols', enc_text.encode() + b'\0#version: 0.2\n\xc4\xa0 t x\n\0 the')

# ---- text: byte 0 the tokenizer and validation fraction, byte 1 the context ----------------
put('text', 'byte-moby', bytes([0x00, 16]) + moby[30000:30600])
put('text', 'char-moby', bytes([0x05, 8]) + moby[40000:40500])
put('text', 'gpt2-moby', bytes([0x0a, 12]) + moby[50000:50800])
put('text', 'char-vocab', bytes([0x13, 0]) + bytes(sorted(set(moby[60000:61000]))))
put('text', 'gpt2-unicode', bytes([0x06, 3]) + "\u00e9t\u00e9 \u4e2d\u6587 \U0001F600  's 'll 42\r\n\t x".encode() * 4
    + b'\x80\xc0\xe0\x80 \xf4\x90\x80\x80')

# ---- safetensors: the real weights without their checksum, and edge cases -------------------
w = open(os.path.join(C, 'safetensors', 'mlp-784-1-10.safetensors'), 'rb').read()
w2 = re.sub(rb'"ctrain_crc32":"[0-9a-f]{8}",', lambda m: b' ' * len(m.group(0)), w, count=1)
put('safetensors', 'mlp-no-crc.safetensors', w2)
def st(header, data=b''):
    h = header.encode()
    h += b' ' * (-(len(h) + 8) % 8)
    return len(h).to_bytes(8, 'little') + h + data
put('safetensors', 'empty-header.safetensors', st('{}'))
put('safetensors', 'f16-tensor.safetensors', st('{"x":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}}', b'\0' * 4))
put('safetensors', 'overlap.safetensors',
    st('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}',
       b'\0' * 8))

# ---- traces ---------------------------------------------------------------------------------
put('trace', 'truncated.json', open(os.path.join(C, 'trace', 'mlp.json'), 'rb').read()[:700])
put('trace', 'no-events.json', '{"displayTimeUnit": "ms", "events": []}')
# a pipeline rank's step: a schedule, its micro-batches' compute, a receive and a send marker
put('trace', 'pipeline.json', '{"traceEvents": [{"ph": "X", "name": "step", "cat": "step", "ts": 0, "dur": 1200, "args": {"step": 4}}, {"ph": "X", "name": "pipeline schedule", "cat": "pipeline", "ts": 100, "dur": 1000, "args": {"bubble": 0.3, "ideal": 0.2}}, {"ph": "X", "name": "forward mb 0 (piece 0)", "cat": "pipeline", "ts": 100, "dur": 150}, {"ph": "X", "name": "forward mb 1 (piece 0)", "cat": "pipeline", "ts": 300, "dur": 150}, {"ph": "X", "name": "receive gradients", "cat": "pipeline_comm", "ts": 450, "dur": 50}, {"ph": "X", "name": "send activations", "cat": "pipeline_comm", "ts": 260, "dur": 1}, {"ph": "X", "name": "backward mb 0 (piece 0)", "cat": "pipeline", "ts": 500, "dur": 200}, {"ph": "X", "name": "backward mb 1 (piece 0)", "cat": "pipeline", "ts": 800, "dur": 200}], "metadata": {"peak_flops": 1000000000.0}}\n')

# ---- metrics logs: malformed lines --------------------------------------------------------
put('report', 'malformed.jsonl', '{"type":"step","step":1,"loss":2.5,"lr":0.1}\nhello\n{"type":"step"}\n'
    '{"type":"eval","epoch":1,"test_loss":1,"test_acc":0.5}\n{"type":"done","time":1}\n{"type":"step","step":2,"loss":')
EOF

# ---- regression inputs of fixed bugs ----------------------------------------------------
# ctrain report wrote HTML forever: a step >= 2^53, losses near DBL_MAX, steps near 2^53
printf '{"type":"step","step":1e74,"loss":2}\n' > "$C/report/regress-step-1e74.jsonl"
printf '{"type":"step","step":1,"loss":1.7976931348623157e308}\n' > "$C/report/regress-loss-dblmax.jsonl"
printf '{"type":"step","step":1,"loss":1.7e308,"lr":1e-300}\n{"type":"step","step":2,"loss":-1.7e308,"lr":1.7e308}\n' \
  > "$C/report/regress-loss-range-overflow.jsonl"
printf '{"type":"step","step":9007199254740988,"loss":1}\n{"type":"step","step":9007199254740992,"loss":2}\n' \
  > "$C/report/regress-steps-near-2p53.jsonl"
# ctrain doctor cast an unbounded double to int64
printf '{"traceEvents": [], "metadata": {"dropped_events": 1e300}}' > "$C/trace/regress-dropped-1e300.json"
# images: PNG/JPEG kinds, CIFAR records and bad files (tests/fuzz/make_image_corpus.py)
/usr/bin/python3 tests/fuzz/make_image_corpus.py "$C/image" > /dev/null
du -sh "$C"/* | sed 's/^/make_corpus: /'

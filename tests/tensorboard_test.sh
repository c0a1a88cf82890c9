#!/usr/bin/env bash
# tests/tensorboard_test.sh - TensorBoard event files and `ctrain report --csv`
# end to end (docs/tensorboard.md, docs/report.md):
#   - `ctrain train --tensorboard-dir DIR --metrics LOG` (and the recipe key
#     through --set) writes one event file that tests/test_tensorboard.c's
#     reader (every record's two CRC32Cs, protobuf-c) reads back with every
#     scalar of every step and evaluation line of LOG, equal;
#   - python3-protobuf (when installed) decodes the same records from
#     descriptors built here from the proto/ field numbers, CRCs checked;
#   - an unwritable folder fails the run with a message naming the path;
#   - data parallel (mpirun -np 2): rank 0 alone writes, comm_share logged;
#   - `ctrain report LOG --csv [-o FILE]`: a header row, one row per step
#     with the log's values, the evaluations on their steps; errors exit 1/2.
# usage: tests/tensorboard_test.sh path/to/ctrain [path/to/test_tensorboard]
set -u
CT=${1:-build/ctrain}
TB=${2:-$(dirname "$CT")/tests/test_tensorboard}
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ ! -f data/mnist/t10k-images-idx3-ubyte ] || [ ! -x "$TB" ]; then
  echo "  FAIL data/mnist or $TB is missing: run scripts/setup.sh and make"
  echo "tensorboard_test.sh: 0 passed, 1 failed"
  exit 1
fi
mnist_subset "$tmp/data" train 640
mnist_subset "$tmp/data" t10k 200
# 640 / 64 = 10 steps per epoch, 2 epochs; clipping: grad_norm is logged too
A=(--data-dir "$tmp/data" --hidden 32 --batch-size 64 --epochs 2 --threads 1 --set clip_grad_norm=1 --quiet)

# ---- the CLI flag: events equal to the metrics log -------------------------------------------------
expect train_tensorboard_dir 0 "done: 20 steps" -- "$CT" train "${A[@]}" --tensorboard-dir "$tmp/tb/run1" \
  --metrics "$tmp/m1.jsonl"
expect events_equal_metrics_log 0 "^20 steps, 144 values equal" -- "$TB" --compare "$tmp/tb/run1" "$tmp/m1.jsonl"
n=$(ls "$tmp/tb/run1" | grep -cE '^events\.out\.tfevents\.[0-9]{10}\.[^/]+$')
[ "$n" = 1 ] && ok "one file named events.out.tfevents.<time>.<host>" || bad "event file name" "$(ls "$tmp/tb/run1")"
"$TB" --dump "$tmp/tb/run1" >"$tmp/dump1" 2>&1
head -n 1 "$tmp/dump1" | grep -q 'step 0 file_version brain.Event:2$' && ok "first record: file_version brain.Event:2" ||
  bad "first record" "$(head -n 3 "$tmp/dump1")"
for t in train/loss train/accuracy train/lr train/samples_per_s train/grad_norm perf/mfu perf/peak_mib eval/loss eval/accuracy; do
  c=$(grep -c " $t=" "$tmp/dump1")
  want=20
  case $t in eval/*) want=2 ;; esac
  [ "$c" = "$want" ] || bad "tag $t in $c events, want $want" "$(head -n 4 "$tmp/dump1")"
done
[ "$fail" = 0 ] && ok "every tag at every step (train/*, perf/* x 20, eval/* x 2)"

# the recipe key (through --set), and no events without it
expect recipe_key 0 "done: 20 steps" -- "$CT" train "${A[@]}" --set tensorboard_dir="$tmp/tb/run2" --metrics "$tmp/m2.jsonl"
expect recipe_key_events 0 "^20 steps" -- "$TB" --compare "$tmp/tb/run2" "$tmp/m2.jsonl"

# ---- python3-protobuf reads the same records -------------------------------------------------------
PY3=
for p in python3 /usr/bin/python3; do # Debian's python3-protobuf is /usr/bin/python3's (not a pyenv's)
  if "$p" -c 'import google.protobuf' 2>/dev/null; then PY3=$p; break; fi
done
if [ -n "$PY3" ]; then
  expect python3_protobuf 0 "python: 23 records, 144 values, crcs ok, 20 losses equal" -- "$PY3" - "$tmp/tb/run1" "$tmp/m1.jsonl" <<'PY'
import json, os, struct, sys
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
F = descriptor_pb2.FieldDescriptorProto
fd = descriptor_pb2.FileDescriptorProto(name="ev.proto", package="tensorflow", syntax="proto3")
def msg(parent, name, fields, oneof=None):
    m = parent.add(name=name)
    if oneof: m.oneof_decl.add(name=oneof)
    for fname, num, typ, tname, in_oneof in fields:
        f = m.field.add(name=fname, number=num, type=typ, label=F.LABEL_OPTIONAL)
        if tname: f.type_name = tname
        if in_oneof: f.oneof_index = 0
    return m
msg(fd.message_type, "SourceMetadata", [("writer", 1, F.TYPE_STRING, None, 0)])
s = msg(fd.message_type, "Summary", [("value", 1, F.TYPE_MESSAGE, ".tensorflow.Summary.Value", 0)])
s.field[0].label = F.LABEL_REPEATED
msg(s.nested_type, "Value", [("tag", 1, F.TYPE_STRING, None, 0), ("simple_value", 2, F.TYPE_FLOAT, None, 1)], "value")
msg(fd.message_type, "Event", [("wall_time", 1, F.TYPE_DOUBLE, None, 0), ("step", 2, F.TYPE_INT64, None, 0),
    ("file_version", 3, F.TYPE_STRING, None, 1), ("summary", 5, F.TYPE_MESSAGE, ".tensorflow.Summary", 1),
    ("source_metadata", 10, F.TYPE_MESSAGE, ".tensorflow.SourceMetadata", 0)], "what")
pool = descriptor_pool.DescriptorPool()
pool.Add(fd)
desc = pool.FindMessageTypeByName("tensorflow.Event")
Event = message_factory.GetMessageClass(desc) if hasattr(message_factory, "GetMessageClass") else \
    message_factory.MessageFactory(pool).GetPrototype(desc)
def crc32c(b):
    c = 0xffffffff
    for x in b:
        c ^= x
        for _ in range(8): c = (c >> 1) ^ (0x82f63b78 & -(c & 1))
    return c ^ 0xffffffff
mask = lambda c: (((c >> 15) | (c << 17)) + 0xa282ead8) & 0xffffffff
d = sys.argv[1]
data = open(os.path.join(d, os.listdir(d)[0]), "rb").read()
at = n = vals = 0
loss = {}
while at < len(data):
    (ln,) = struct.unpack_from("<Q", data, at)
    assert struct.unpack_from("<I", data, at + 8)[0] == mask(crc32c(data[at:at + 8])), "length crc"
    body = data[at + 12:at + 12 + ln]
    assert struct.unpack_from("<I", data, at + 12 + ln)[0] == mask(crc32c(body)), "data crc"
    ev = Event.FromString(body)
    if n == 0: assert ev.file_version == "brain.Event:2" and ev.source_metadata.writer == "ctrain", ev
    else:
        assert ev.WhichOneof("what") == "summary" and ev.step > 0
        vals += len(ev.summary.value)
        for v in ev.summary.value:
            if v.tag == "train/loss": loss[ev.step] = v.simple_value
    at += 12 + ln + 4; n += 1
same = 0
for line in open(sys.argv[2]):
    j = json.loads(line)
    if j["type"] == "step":
        assert abs(loss[j["step"]] - j["loss"]) <= 2e-6 * abs(j["loss"]), (j, loss[j["step"]])
        same += 1
print(f"python: {n} records, {vals} values, crcs ok, {same} losses equal")
PY
else
  echo "  SKIP python3_protobuf: python3-protobuf is not installed"
fi

# ---- errors --------------------------------------------------------------------------------------
: >"$tmp/file"
expect unwritable_dir 1 "tensorboard_dir.*$tmp/file" -- "$CT" train "${A[@]}" --tensorboard-dir "$tmp/file/sub"

# ---- data parallel: rank 0 writes ----------------------------------------------------------------
if command -v mpirun >/dev/null 2>&1; then
  . "$(dirname "$0")/mpi_lib.sh" # root, oversubscription, the sanitizer build's LSan suppressions for Open MPI
  expect dp_train 0 "done: 20 steps" -- timeout -k 5 120 mpirun --bind-to none -np 2 "$CT" train "${A[@]}" \
    --tensorboard-dir "$tmp/tb/dp" --metrics "$tmp/dp.jsonl"
  expect dp_events_equal_metrics_log 0 "^20 steps" -- "$TB" --compare "$tmp/tb/dp" "$tmp/dp.jsonl"
  c=$("$TB" --dump "$tmp/tb/dp" 2>&1 | grep -c ' perf/comm_share=')
  [ "$c" = 20 ] && ok "np 2: one event file (rank 0), comm_share at every step" || bad "np 2: comm_share in $c events"
else
  echo "  SKIP data parallel: mpirun is not installed"
fi

# ---- ctrain report --csv -------------------------------------------------------------------------
M="$tmp/m1.jsonl"
"$CT" report "$M" --csv >"$tmp/out.csv" 2>"$tmp/csv.err"
rc=$?
hdr="step,epoch,loss,acc,lr,samples_per_s,grad_norm,loss_scale,mfu,peak_mib,comm_share,time,test_loss,test_acc"
[ "$rc" = 0 ] && [ "$(head -n 1 "$tmp/out.csv")" = "$hdr" ] && ok "csv: header row" ||
  bad "csv header (rc $rc)" "$(head -n 2 "$tmp/out.csv"; cat "$tmp/csv.err")"
[ "$(tail -n +2 "$tmp/out.csv" | wc -l)" = 20 ] && [ "$(tail -n +2 "$tmp/out.csv" | cut -d, -f1 | tr '\n' ' ')" = \
  "$(seq 1 20 | tr '\n' ' ')" ] && ok "csv: one row per step, in order" || bad "csv rows" "$(cat "$tmp/out.csv")"
# every step's loss, lr, grad_norm, time as the log has them; evaluations on steps 10 and 20
want=$(grep '"type":"step"' "$M" | sed -E 's/.*"loss":([^,]*),.*"lr":([^,]*),.*"grad_norm":([^,]*),.*"time":([^,}]*)\}/\1 \2 \3 \4/')
got=$(tail -n +2 "$tmp/out.csv" | awk -F, '{ print $3, $5, $7, $12 }')
[ -n "$want" ] && [ "$want" = "$got" ] && ok "csv: loss, lr, grad_norm, time equal the log's" ||
  bad "csv values differ from the log" "$(diff <(echo "$want") <(echo "$got") | head)"
ev=$(grep '"type":"eval"' "$M" | sed -E 's/.*"step":([0-9]+),"test_loss":([^,]*),"test_acc":([^,]*),.*/\1 \2 \3/')
gotev=$(tail -n +2 "$tmp/out.csv" | awk -F, '$13 != "" { print $1, $13, $14 }')
[ "$(echo "$ev" | wc -l)" = 2 ] && [ "$ev" = "$gotev" ] && ok "csv: test loss and accuracy on the evaluations' steps" ||
  bad "csv evaluations" "want '$ev' got '$gotev'"
"$CT" report "$M" --csv -o "$tmp/o.csv" >"$tmp/o.out" 2>&1 && [ ! -s "$tmp/o.out" ] && cmp -s "$tmp/o.csv" "$tmp/out.csv" &&
  ok "csv: -o FILE writes what stdout shows" || bad "csv -o differs" "$(cat "$tmp/o.out")"
printf '{"type":"run","version":1,"recipe":null}\nnot json\n' >"$tmp/nostep.jsonl"
expect csv_no_steps 1 "holds no step lines" -- "$CT" report "$tmp/nostep.jsonl" --csv
expect csv_missing 1 "cannot open metrics log" -- "$CT" report "$tmp/none.jsonl" --csv
expect csv_unwritable 1 "cannot write '$tmp/file/x.csv'" -- "$CT" report "$M" --csv -o "$tmp/file/x.csv"
{ echo '{"type":"step","step":1,"epoch":1,"loss":null,"acc":0.5,"lr":0.1,"samples_per_s":10,"time":1}'; echo '{"type":"step"'; } >"$tmp/nan.jsonl"
expect csv_null_is_nan 0 "not a metrics line.*step,.* 1,1,nan,0.5,0.1,10,,,,,,1,," -- "$CT" report "$tmp/nan.jsonl" --csv

summary tensorboard_test.sh

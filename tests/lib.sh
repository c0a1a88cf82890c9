# tests/lib.sh - helpers shared by the shell test scripts (sourced).
#   ok NAME                 count a pass
#   bad NAME [DETAIL]       count a failure, with the tail of DETAIL
#   expect NAME RC PATTERN -- command...
#                           run the command (time limit EXPECT_TIMEOUT, default
#                           300 s); pass when it exits RC, its output (lines
#                           joined) matches the extended regex PATTERN, and no
#                           sanitizer reported anything (under tests/run_all.sh
#                           the reports go to files that run_all.sh checks
#                           after each suite, so they fail it even from a run
#                           whose output a script does not look at)
#   summary NAME            print "NAME: N passed, N failed"; returns 1 on failure
#   mnist_subset DIR SPLIT COUNT
#                           the first COUNT images and labels of data/mnist's SPLIT
#                           ("train" / "t10k") as IDX files in DIR
pass=0
fail=0

ok() {
  pass=$((pass + 1))
  echo "  ok   $1"
}

bad() {
  fail=$((fail + 1))
  echo "  FAIL $1"
  [ -n "${2:-}" ] && printf '%s\n' "$2" | tail -n 8 | sed 's/^/       /'
  return 0
}

expect() {
  local name=$1 want=$2 pat=$3
  shift 4
  local out rc
  out=$(timeout -k 5 "${EXPECT_TIMEOUT:-300}" "$@" 2>&1)
  rc=$?
  if [ "$rc" -eq "$want" ] && printf '%s' "$out" | tr '\n' ' ' | grep -qiE -- "$pat" && ! printf '%s' "$out" | grep -q "Sanitizer"; then
    ok "$name"
  else
    bad "$name (rc $rc, want $want, pattern '$pat')" "$out"
  fi
}

be32() { printf '%b' "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x' $(($1 >> 24 & 255)) $(($1 >> 16 & 255)) $(($1 >> 8 & 255)) $(($1 & 255)))"; }
mnist_subset() {
  mkdir -p "$1"
  { printf '\x00\x00\x08\x03'; be32 "$3"; be32 28; be32 28; tail -c +17 "data/mnist/$2-images-idx3-ubyte" | head -c $(($3 * 784)); } >"$1/$2-images-idx3-ubyte"
  { printf '\x00\x00\x08\x01'; be32 "$3"; tail -c +9 "data/mnist/$2-labels-idx1-ubyte" | head -c "$3"; } >"$1/$2-labels-idx1-ubyte"
}

summary() {
  echo "$1: $pass passed, $fail failed"
  [ "$fail" -eq 0 ]
}

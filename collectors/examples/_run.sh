# Sourced by the record_*.sh scripts: `run NAME CMD...` runs CMD with a time limit (RUN_TIMEOUT seconds,
# default 180) between "=== NAME" lines that give its exit code and duration.
run() {  # name, command...
  local name=$1; shift
  echo "=== $name: $*"
  local t0=$SECONDS
  timeout "${RUN_TIMEOUT:-180}" "$@"
  echo "=== $name rc=$? ($((SECONDS - t0)) s)"
}
